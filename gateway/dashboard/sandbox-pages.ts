import { nextAfter } from "../../lib/page.js";
import { isDomainError } from "../../modules/errors/mod.js";
import { SANDBOX_ID, SANDBOX_STATUSES, sandboxStates, type SandboxObject } from "../../modules/sandboxes/mod.js";
import type { HttpExchange } from "../http/exchange.js";
import type { Router } from "../http/router.js";
import { cell, formatDuration, formatTime, Html, html, listTable, page } from "./html.js";
import { type DashboardKit, errorNotice, field, inProject, messageOf, notFoundPage, postButton, type Signed } from "./kit.js";

// Sandboxes of a project: the list (status, resources, age), a sandbox's record, and stop. Exec
// history is not recorded anywhere (an exec's output goes to its caller only), so the detail page
// shows the record: its life, its limits, what it was created with and, for a job's sandbox, the job.

const pub = { public: true };
const PER_PAGE = 50;
/** A sandbox on its way up or down is shown again this often until it settles. */
const SETTLING_REFRESH_S = 2;

export const resourcesOf = (r: SandboxObject["resources"]) => `${r.cpu_mhz} MHz · ${r.memory_mb} MB · ${r.disk_mb} MB`;

/** A status as a word coloured by what it means (running, waiting, ended well, failed), and why when that says more. */
export function statusWord(status: string, detail?: string | null): Html {
  return html`<span class="state state-${status}">${status}</span>${detail && detail !== status ? html` <span class="muted">(${detail})</span>` : ""}`;
}

export function registerSandboxPages(router: Router, kit: DashboardKit): void {
  const { deps } = kit;
  const link = (s: Signed, id: string, suffix = "") => inProject(s, `/dashboard/sandboxes/${encodeURIComponent(id)}${suffix}`);

  router.get("/dashboard/sandboxes", async (ex) => {
    const s = await kit.signedIn(ex);
    if (!s) return;
    const q = ex.searchParams();
    const status = SANDBOX_STATUSES.find((v) => v === q.get("status"));
    const after = q.get("after") ?? "";
    const now = Math.floor(Date.now() / 1000);
    let body: Html;
    try {
      const found = await deps.sandboxes.list(s.project, { limit: PER_PAGE, order: "desc", after: SANDBOX_ID.test(after) ? after : undefined }, { status, metadata: {} });
      const rows = found.data.map((x) => [
        html`<a href="${link(s, x.id)}"><code>${x.id}</code></a>`,
        statusWord(x.status, x.termination_reason),
        cell(resourcesOf(x.resources), "nowrap"),
        x.network,
        cell(formatDuration(now - x.created_at), "num"),
        cell(x.started_at === null ? "—" : formatDuration((x.stopped_at ?? now) - x.started_at), "num"),
        formatTime(x.created_at),
        x.metadata.job_id ? html`<a href="${inProject(s, `/dashboard/jobs/${encodeURIComponent(x.metadata.job_id)}`)}"><code>${x.metadata.job_id}</code></a>` : "—",
      ]);
      const next = new URLSearchParams({ project: s.project, ...(status ? { status } : {}) });
      const last = found.has_more ? nextAfter(found) : undefined;
      if (last) next.set("after", last);
      body = html`${listTable(["Sandbox", "Status", "CPU · memory · disk", "Network", "Age", "Run time", "Created", "Job"], rows, "sandboxes")}
${found.data.length === 0 ? html`<p class="muted">No sandboxes${status ? ` ${status}` : ""} in this project. Create one with <code>POST /v1/sandboxes</code>; jobs run in sandboxes of their own.</p>` : ""}
<div class="pager">${last ? html`<a href="/dashboard/sandboxes?${next.toString()}">Older →</a>` : ""}</div>`;
    } catch (err) {
      body = errorNotice(err);
    }
    const filters = html`<label>Status<select name="status"><option value="">any</option>${SANDBOX_STATUSES.map((v) => html`<option ${status === v ? new Html("selected") : ""}>${v}</option>`)}</select></label>`;
    kit.sendHtml(ex, 200, page(kit.layoutOf(s, "Sandboxes", "sandboxes"), html`<h1>Sandboxes</h1>${kit.projectPicker(s, "/dashboard/sandboxes", filters)}${body}`));
  }, pub);

  async function sandboxPage(ex: HttpExchange, s: Signed, id: string, notice?: { text: string; error?: boolean }): Promise<void> {
    let x: SandboxObject;
    try {
      x = (await deps.sandboxes.record(s.project, id)).sandbox;
    } catch (err) {
      if (!isDomainError(err)) throw err;
      return notFoundPage(kit, ex, s, "sandboxes", "Sandbox");
    }
    const now = Math.floor(Date.now() / 1000);
    const live = !sandboxStates.isFinal(x.status);
    const settling = x.status === "starting" || x.status === "stopping";
    const jobId = x.metadata.job_id;
    const metadata = Object.entries(x.metadata);
    const layout = { ...kit.layoutOf(s, `Sandbox ${x.id}`, "sandboxes"), ...(settling ? { refresh: { seconds: SETTLING_REFRESH_S, to: link(s, x.id) } } : {}) };
    kit.sendHtml(ex, 200, page(layout, html`<h1>Sandbox <span class="muted">${x.id}</span></h1>
${notice ? html`<div class="notice${notice.error ? " error" : ""}" role="status">${notice.text}</div>` : ""}
${x.error ? html`<div class="notice error">${x.error}</div>` : ""}
<div class="card"><dl class="kv grid">${field("Status", statusWord(x.status, x.termination_reason))}${field("Created", formatTime(x.created_at))}${field("Started", x.started_at && formatTime(x.started_at))}
${field(live ? "Expires" : "Stopped", live ? formatTime(x.expires_at) : x.stopped_at && formatTime(x.stopped_at))}${field("Age", formatDuration(now - x.created_at))}${field("Run time", x.started_at === null ? null : formatDuration((x.stopped_at ?? now) - x.started_at))}
${field("Timeout", formatDuration(x.timeout_seconds))}${field("Idle timeout", x.idle_timeout_seconds === null ? "none" : formatDuration(x.idle_timeout_seconds))}${field("Network", x.network)}
${field("CPU", `${x.resources.cpu_mhz} MHz`)}${field("Memory", `${x.resources.memory_mb} MB`)}${field("Disk", `${x.resources.disk_mb} MB`)}
${field("Environment", x.env_names.join(", "))}${field("Secrets", x.secrets.join(", "))}${field("Job", jobId ? html`<a href="${inProject(s, `/dashboard/jobs/${encodeURIComponent(jobId)}`)}"><code>${jobId}</code></a>` : null)}</dl></div>
${metadata.length > 0 ? html`<h2>Metadata</h2><table><tbody>${metadata.map(([k, v]) => html`<tr><th>${k}</th><td class="wrap">${v}</td></tr>`)}</tbody></table>` : ""}
<h2>Commands</h2><p class="muted">Commands run in a sandbox (exec, shell) are not recorded: their output goes to the caller only. ${jobId ? "This sandbox ran an attempt of its job: the job's page has its output." : html`Run one with <code>POST /v1/sandboxes/{id}/exec</code>, or <code>tributary sandbox shell</code>.`}</p>
<div class="actions">${live ? postButton(s, `/dashboard/sandboxes/${encodeURIComponent(x.id)}/stop`, "Stop sandbox") : ""}<a href="${inProject(s, "/dashboard/sandboxes")}">All sandboxes</a></div>
${live ? html`<p class="muted">Stopping ends every process in it and discards its workspace.${settling ? ` This page reloads every ${SETTLING_REFRESH_S} s until it settles.` : ""}</p>` : ""}`));
  }

  router.get("/dashboard/sandboxes/:id", async (ex, { id }) => {
    const s = await kit.signedIn(ex);
    if (s) await sandboxPage(ex, s, id!);
  }, pub);

  router.post("/dashboard/sandboxes/:id/stop", async (ex, { id }) => {
    const s = await kit.signedIn(ex);
    if (!s) return;
    if (!(await kit.checkedForm(ex, s))) return;
    let stopped: SandboxObject;
    try {
      stopped = await deps.sandboxes.stop(s.project, id!);
    } catch (err) {
      if (!isDomainError(err)) throw err;
      if (err._tag === "NotFound") return notFoundPage(kit, ex, s, "sandboxes", "Sandbox");
      return sandboxPage(ex, s, id!, { text: messageOf(err), error: true });
    }
    await sandboxPage(ex, s, id!, { text: `Sandbox ${stopped.id} is ${stopped.status}.` });
  }, pub);
}
