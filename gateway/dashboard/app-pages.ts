import { nextAfter } from "../../lib/page.js";
import { validArtifactId, type Artifact } from "../../modules/artifacts/mod.js";
import { DEPLOYMENT_ID, deploymentStates, type PresentedDeployment } from "../../modules/apps/mod.js";
import { isDomainError } from "../../modules/errors/mod.js";
import type { HttpExchange } from "../http/exchange.js";
import type { Router } from "../http/router.js";
import { streamBody } from "../http/stream-body.js";
import { cell, formatBytes, formatTime, Html, html, listTable, page } from "./html.js";
import { type DashboardKit, downloadHeaders, field, inProject, memberPrincipal, messageOf, notFoundPage, postButton, type Signed } from "./kit.js";
import { statusWord } from "./sandbox-pages.js";

// Hosted apps and their bundles: a project's deployments (status, instances when the record lists
// them, the hosted address and the path address, the deployment each replaced), a deployment's
// logs followed while it lives (the page reloads itself: no script), stop; and its artifacts (the
// uploaded bundles: size, sha256, manifest, download).

const pub = { public: true };
const DEPLOYMENTS_PER_PAGE = 20;
const ARTIFACTS_PER_PAGE = 50;
/** A page that follows a deployment's logs reloads this often until the deployment ends. */
const FOLLOW_REFRESH_S = 3;
/** Instance fields shown, at most (a record may list more than a person reads in a table). */
const MAX_INSTANCE_FIELDS = 8;

type Scalar = string | number | boolean | null;

/**
 * A deployment's instances when its record lists them (`instances`, each an object), each as its
 * fields that are plain values; undefined when it lists none. The page shows what is there and
 * needs no more of their shape.
 */
export function instancesOf(d: object): Array<Record<string, Scalar>> | undefined {
  const list = (d as { instances?: unknown }).instances;
  if (!Array.isArray(list)) return undefined;
  return list
    .filter((i): i is Record<string, unknown> => typeof i === "object" && i !== null && !Array.isArray(i))
    .map((i) => Object.fromEntries(Object.entries(i).filter((e): e is [string, Scalar] => e[1] === null || ["string", "number", "boolean"].includes(typeof e[1]))));
}

/** An instance's field as text: times (`..._at`, Unix seconds) as dates. */
const instanceValue = (key: string, v: Scalar) => (typeof v === "number" && key.endsWith("_at") && v > 1e9 ? formatTime(v) : v === null ? "—" : String(v));

export function registerAppPages(router: Router, kit: DashboardKit): void {
  const { deps } = kit;
  const deploymentLink = (s: Signed, id: string, suffix = "") => inProject(s, `/dashboard/apps/${encodeURIComponent(id)}${suffix}`);
  const artifactLink = (s: Signed, id: string, suffix = "") => inProject(s, `/dashboard/artifacts/${encodeURIComponent(id)}${suffix}`);
  const code = (text: string | null) => (text ? html`<code class="hash">${text}</code>` : null);

  // ---- deployments ----

  router.get("/dashboard/apps", async (ex) => {
    const s = await kit.signedIn(ex);
    if (!s) return;
    const after = ex.searchParams().get("after") ?? "";
    const found = await deps.apps.list(memberPrincipal(s), { limit: DEPLOYMENTS_PER_PAGE, after: DEPLOYMENT_ID.test(after) ? after : undefined });
    // The instances' column only when a record lists them (app hosts that record instances).
    const listed = found.data.map((d) => instancesOf(d));
    const withInstances = listed.some((i) => i !== undefined);
    const rows = found.data.map((d, n) => {
      const instances = listed[n];
      const states = instances?.map((i) => i.status ?? i.state).filter((v) => v !== undefined && v !== null);
      // An ended deployment serves no address: only a live one shows them.
      const live = !deploymentStates.isFinal(d.status);
      return [
        html`<a href="${deploymentLink(s, d.id)}"><code>${d.id}</code></a>`,
        statusWord(d.status, d.reason),
        ...(withInstances ? [instances === undefined ? "—" : html`${instances.length}${states && states.length > 0 ? html` <span class="muted">(${states.join(", ")})</span>` : ""}`] : []),
        cell(live ? html`<div>${code(d.hosted_url)}<br>${code(d.local_url)}</div>` : html`<span class="muted">not serving (${d.status})</span>`, "wrap"),
        d.replaces ? html`<a href="${deploymentLink(s, d.replaces)}"><code>${d.replaces}</code></a>` : "—",
        formatTime(d.created_at),
        d.ended_at ? formatTime(d.ended_at) : "—",
      ];
    });
    const columns = ["Deployment", "Status", ...(withInstances ? ["Instances"] : []), "Hosted address, path address", "Replaced", "Created", "Ended"];
    const last = found.has_more ? nextAfter(found) : undefined;
    kit.sendHtml(ex, 200, page(kit.layoutOf(s, "Apps", "apps"), html`<h1>Apps</h1>${kit.projectPicker(s, "/dashboard/apps")}
${listTable(columns, rows, "deployments")}
${found.data.length === 0 ? html`<p class="muted">No deployments in this project. Deploy an app with <code>tributary deploy</code>.</p>` : ""}
<p class="muted">Both addresses take a key of this project as bearer credential.</p>
<div class="pager">${last ? html`<a href="${inProject(s, `/dashboard/apps?after=${encodeURIComponent(last)}`)}">Older →</a>` : ""}</div>`));
  }, pub);

  async function deploymentPage(ex: HttpExchange, s: Signed, id: string, notice?: { text: string; error?: boolean }): Promise<void> {
    let d: PresentedDeployment;
    try {
      d = deps.apps.present(await deps.apps.get(memberPrincipal(s), id));
    } catch (err) {
      if (!isDomainError(err)) throw err;
      return notFoundPage(kit, ex, s, "apps", "Deployment");
    }
    const final = deploymentStates.isFinal(d.status);
    const follow = !final && ex.searchParams().get("follow") !== "0";
    const lines = await deps.apps.logs(memberPrincipal(s), d.id);
    const instances = instancesOf(d);
    const columns = [...new Set(instances?.flatMap((i) => Object.keys(i)) ?? [])].slice(0, MAX_INSTANCE_FIELDS);
    const layout = { ...kit.layoutOf(s, `Deployment ${d.id}`, "apps"), ...(follow ? { refresh: { seconds: FOLLOW_REFRESH_S, to: deploymentLink(s, d.id) } } : {}) };
    const clock = (at: number) => (at > 0 ? new Date(at).toISOString().slice(11, 19) + " " : "");
    kit.sendHtml(ex, 200, page(layout, html`<h1>Deployment <span class="muted">${d.id}</span></h1>
${notice ? html`<div class="notice${notice.error ? " error" : ""}" role="status">${notice.text}</div>` : ""}
${d.status === "failed" ? html`<div class="notice error">${d.reason ?? "failed"}${d.message ? `: ${d.message}` : ""}</div>` : ""}
<div class="actions">${statusWord(d.status, d.reason)}${final ? "" : postButton(s, `/dashboard/apps/${encodeURIComponent(d.id)}/stop`, "Stop deployment")}
${final ? "" : follow ? html`<span class="muted">Following its logs: this page reloads every ${FOLLOW_REFRESH_S} s while it runs.</span> <a href="${deploymentLink(s, d.id, "?follow=0")}">Stop following</a>` : html`<a href="${deploymentLink(s, d.id)}">Follow logs</a>`}</div>
<div class="card"><dl class="kv grid">${field("Hosted address", code(d.hosted_url))}${field("Path address", code(d.local_url))}${field("Entrypoint", d.entrypoint)}
${field("Replaced", d.replaces ? html`<a href="${deploymentLink(s, d.replaces)}"><code>${d.replaces}</code></a>` : null)}${field("Replaced by", d.superseded_by ? html`<a href="${deploymentLink(s, d.superseded_by)}"><code>${d.superseded_by}</code></a>` : null)}
${field("Bundle", html`<a href="${artifactLink(s, d.artifact_id)}"><code>${d.artifact_id}</code></a>`)}${field("sha256", code(d.sha256))}
${field("Resources", `${d.resources.cpu_mhz} MHz · ${d.resources.memory_size_mb} MB${d.resources.gpu_count > 0 ? ` · ${d.resources.gpu_count} GPU` : ""}`)}${field("Restarts", d.restarts)}
${field("Created", formatTime(d.created_at))}${field("Healthy", d.healthy_at && formatTime(d.healthy_at))}${field("Ended", d.ended_at && formatTime(d.ended_at))}
${field("Environment", d.env_names.join(", "))}${field("Secrets", d.secrets.join(", "))}</dl></div>
${instances ? html`<h2>Instances</h2>${instances.length === 0 ? html`<p class="muted">None running.</p>` : html`<table id="instances"><thead><tr>${columns.map((c) => html`<th>${c}</th>`)}</tr></thead><tbody>${instances.map((i) => html`<tr>${columns.map((c) => html`<td>${i[c] === undefined ? "—" : instanceValue(c, i[c]!)}</td>`)}</tr>`)}</tbody></table>`}` : ""}
<h2>Logs</h2>${lines.length === 0 ? html`<p class="muted" id="app-logs">No log lines${final ? "" : " yet"}.</p>` : html`<div class="log-box" id="app-logs"><pre class="log">${lines.map((l) => (l.stream === "stderr" ? html`<span class="stderr">${clock(l.at)}${l.line}\n</span>` : html`${clock(l.at)}${l.line}\n`))}</pre></div>`}
<p class="muted">${final ? "The last lines its record kept." : "The instance's recent lines, newest last."}</p>
<div class="actions"><a href="${inProject(s, "/dashboard/apps")}">All deployments</a></div>`));
  }

  router.get("/dashboard/apps/:id", async (ex, { id }) => {
    const s = await kit.signedIn(ex);
    if (s) await deploymentPage(ex, s, id!);
  }, pub);

  router.post("/dashboard/apps/:id/stop", async (ex, { id }) => {
    const s = await kit.signedIn(ex);
    if (!s) return;
    if (!(await kit.checkedForm(ex, s))) return;
    try {
      const d = await deps.apps.stopDeployment(memberPrincipal(s), id!);
      await deploymentPage(ex, s, id!, { text: `Deployment ${d.id} is ${d.status}: its address answers 404 until another is deployed.` });
    } catch (err) {
      if (!isDomainError(err)) throw err;
      if (err._tag === "NotFound") return notFoundPage(kit, ex, s, "apps", "Deployment");
      await deploymentPage(ex, s, id!, { text: messageOf(err), error: true });
    }
  }, pub);

  // ---- artifacts (app bundles) ----

  router.get("/dashboard/artifacts", async (ex) => {
    const s = await kit.signedIn(ex);
    if (!s) return;
    const q = ex.searchParams();
    const status = q.get("status") === "uploading" ? "uploading" : "ready";
    const after = q.get("after") ?? "";
    const found = await deps.artifacts.list(s.project, { status, limit: ARTIFACTS_PER_PAGE, order: "desc", after: validArtifactId(after) ? after : undefined });
    const rows = found.data.map((a) => [
      html`<a href="${artifactLink(s, a.id)}">${a.filename}</a>`,
      html`<code>${a.id}</code>`,
      statusWord(a.status),
      cell(formatBytes(a.bytes), "num"),
      cell(code(a.sha256) ?? "—", "wrap"),
      formatTime(a.created_at),
      a.status === "ready" ? html`<a href="${artifactLink(s, a.id, "/content")}" download>Download</a>` : a.expires_at ? `expires ${formatTime(a.expires_at)}` : "",
    ]);
    const next = new URLSearchParams({ project: s.project, status });
    const last = nextAfter(found);
    if (found.has_more && last) next.set("after", last);
    const filters = html`<label>Status<select name="status">${(["ready", "uploading"] as const).map((v) => html`<option ${status === v ? new Html("selected") : ""}>${v}</option>`)}</select></label>`;
    kit.sendHtml(ex, 200, page(kit.layoutOf(s, "Artifacts", "artifacts"), html`<h1>Artifacts</h1>${kit.projectPicker(s, "/dashboard/artifacts", filters)}
${listTable(["Name", "Id", "Status", "Size", "sha256", "Created", ""], rows, "artifacts")}
${found.data.length === 0 ? html`<p class="muted">No ${status === "ready" ? "artifacts" : "unfinished uploads"} in this project. <code>tributary deploy</code> uploads an app's bundle as one.</p>` : ""}
<div class="pager">${found.has_more && last ? html`<a href="/dashboard/artifacts?${next.toString()}">Older →</a>` : ""}</div>`));
  }, pub);

  const artifactOf = async (s: Signed, id: string): Promise<Artifact | undefined> => (validArtifactId(id) ? deps.artifacts.get(s.project, id) : undefined);

  router.get("/dashboard/artifacts/:id", async (ex, { id }) => {
    const s = await kit.signedIn(ex);
    if (!s) return;
    const a = await artifactOf(s, id!);
    if (!a) return notFoundPage(kit, ex, s, "artifacts", "Artifact");
    kit.sendHtml(ex, 200, page(kit.layoutOf(s, `Artifact ${a.id}`, "artifacts"), html`<h1>Artifact <span class="muted">${a.id}</span></h1>
<div class="card"><dl class="kv grid">${field("Name", a.filename)}${field("Status", statusWord(a.status))}${field("Size", `${formatBytes(a.bytes)} (${a.bytes} bytes)`)}${field("sha256", code(a.sha256))}
${field("Created", formatTime(a.created_at))}${field("Expires", a.expires_at && formatTime(a.expires_at))}</dl></div>
${a.status === "ready" ? html`<div class="actions"><a href="${artifactLink(s, a.id, "/content")}" download>Download</a></div>` : html`<p class="muted">Still uploading: it can be downloaded once its upload is finished.</p>`}
<h2>Manifest</h2>${a.manifest === null ? html`<p class="muted">None: it was uploaded without one.</p>` : html`<pre>${a.manifest}</pre>`}`));
  }, pub);

  router.get("/dashboard/artifacts/:id/content", async (ex, { id }) => {
    const s = await kit.signedIn(ex);
    if (!s) return;
    const a = await artifactOf(s, id!);
    if (!a || a.status !== "ready") return notFoundPage(kit, ex, s, "artifacts", "Artifact");
    downloadHeaders(ex, a.filename);
    ex.responseHeaders["x-artifact-sha256"] = a.sha256 ?? "";
    await streamBody(ex, "application/octet-stream", deps.artifacts.content(s.project, a.id));
  }, pub);
}
