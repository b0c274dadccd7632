import { nextAfter } from "../../lib/page.js";
import { JOB_ID, JOB_STATUSES, jobStates, type JobLogChunk } from "../../modules/jobs/mod.js";
import type { HttpExchange } from "../http/exchange.js";
import type { Router } from "../http/router.js";
import { streamBody } from "../http/stream-body.js";
import { cell, CSP, formatDuration, formatTime, Html, html, listTable, page } from "./html.js";
import { type DashboardKit, field, inProject, notFoundPage, postButton, type Signed } from "./kit.js";
import { resourcesOf, statusWord } from "./sandbox-pages.js";

// Jobs of a project: the list (a queued job says why it waits), a job's record with the end of its
// output, followed while it runs (the page reloads itself: the dashboard has no script), its whole
// output as text, and cancel.

const pub = { public: true };
const PER_PAGE = 50;
/** How much of the output the page shows: the end of it (the whole is a link away). */
const TAIL_BYTES = 64 * 1024;
/** A page that follows a job reloads this often until the job is final. */
const FOLLOW_REFRESH_S = 2;

/** A job's command as a person would type it: a shell line as it was given, an argv quoted where needed. */
export function commandText(argv: readonly string[]): string {
  if (argv.length === 3 && argv[0] === "/bin/sh" && argv[1] === "-c") return argv[2]!;
  return argv.map((a) => (/^[\w@%+=:,./-]+$/.test(a) ? a : `'${a.replace(/'/g, `'"'"'`)}'`)).join(" ");
}

export function registerJobPages(router: Router, kit: DashboardKit): void {
  const { deps } = kit;
  const link = (s: Signed, id: string, suffix = "") => inProject(s, `/dashboard/jobs/${encodeURIComponent(id)}${suffix}`);
  const find = async (s: Signed, id: string) => (JOB_ID.test(id) ? (await deps.jobs.get(s.project, id))?.job : undefined);

  router.get("/dashboard/jobs", async (ex) => {
    const s = await kit.signedIn(ex);
    if (!s) return;
    const q = ex.searchParams();
    const status = JOB_STATUSES.find((v) => v === q.get("status"));
    const after = q.get("after") ?? "";
    const now = Math.floor(Date.now() / 1000);
    const found = await deps.jobs.list(s.project, { limit: PER_PAGE, order: "desc", after: JOB_ID.test(after) ? after : undefined, ...(status ? { status } : {}) });
    const jobs = found?.data ?? [];
    const rows = jobs.map((j) => [
      html`<a href="${link(s, j.id)}"><code>${j.id}</code></a>`,
      cell(html`<div>${statusWord(j.status, j.error?.code)}${j.status === "queued" && j.waiting_reason ? html`<div class="muted waiting">waiting: ${j.waiting_reason}</div>` : ""}</div>`, "wrap"),
      cell(html`<code>${commandText(j.command)}</code>`, "wrap"),
      cell(`${j.attempt} of ${j.max_retries + 1}`, "num"),
      cell(resourcesOf(j.resources), "nowrap"),
      formatTime(j.created_at),
      cell(j.started_at === null ? "—" : formatDuration((j.finished_at ?? now) - j.started_at), "num"),
    ]);
    const next = new URLSearchParams({ project: s.project, ...(status ? { status } : {}) });
    const last = found?.has_more ? nextAfter(found) : undefined;
    if (last) next.set("after", last);
    const filters = html`<label>Status<select name="status"><option value="">any</option>${JOB_STATUSES.map((v) => html`<option ${status === v ? new Html("selected") : ""}>${v}</option>`)}</select></label>`;
    kit.sendHtml(ex, 200, page(kit.layoutOf(s, "Jobs", "jobs"), html`<h1>Jobs</h1>${kit.projectPicker(s, "/dashboard/jobs", filters)}
${listTable(["Job", "Status", "Command", "Attempt", "CPU · memory · disk", "Created", "Run time"], rows, "jobs")}
${jobs.length === 0 ? html`<p class="muted">No jobs${status ? ` ${status}` : ""} in this project. Create one with <code>POST /v1/jobs</code>.</p>` : ""}
<div class="pager">${last ? html`<a href="/dashboard/jobs?${next.toString()}">Older →</a>` : ""}</div>`));
  }, pub);

  async function jobPage(ex: HttpExchange, s: Signed, id: string, notice?: string): Promise<void> {
    const j = await find(s, id);
    if (!j) return notFoundPage(kit, ex, s, "jobs", "Job");
    const now = Math.floor(Date.now() / 1000);
    const final = jobStates.isFinal(j.status);
    const follow = !final && ex.searchParams().get("follow") !== "0";
    const tail = await deps.jobs.logTail(j.id, TAIL_BYTES);
    const layout = { ...kit.layoutOf(s, `Job ${j.id}`, "jobs"), ...(follow ? { refresh: { seconds: FOLLOW_REFRESH_S, to: link(s, j.id) } } : {}) };
    const files = (ids: readonly string[]) => (ids.length === 0 ? null : html`${ids.map((f, i) => html`${i > 0 ? ", " : ""}<a href="${inProject(s, `/dashboard/files/${encodeURIComponent(f)}`)}"><code>${f}</code></a>`)}`);
    kit.sendHtml(ex, 200, page(layout, html`<h1>Job <span class="muted">${j.id}</span></h1>
${notice ? html`<div class="notice" role="status">${notice}</div>` : ""}
${j.status === "queued" && j.waiting_reason ? html`<div class="notice" id="waiting-reason">Waiting: ${j.waiting_reason}</div>` : ""}
${j.error ? html`<div class="notice error">${j.error.code}: ${j.error.message}</div>` : ""}
<div class="actions">${statusWord(j.status)}${final ? "" : postButton(s, `/dashboard/jobs/${encodeURIComponent(j.id)}/cancel`, "Cancel job")}
${final ? "" : follow ? html`<span class="muted">Following: this page reloads every ${FOLLOW_REFRESH_S} s while the job runs.</span> <a href="${link(s, j.id, "?follow=0")}">Stop following</a>` : html`<a href="${link(s, j.id)}">Follow</a>`}</div>
<h2>Output</h2>${logBox(tail.chunks, tail.truncated)}
<div class="actions"><a href="${link(s, j.id, "/logs")}">Whole output (text)</a></div>
<h2>Job</h2><div class="card"><dl class="kv grid">${field("Status", statusWord(j.status))}${field("Attempt", `${j.attempt} of ${j.max_retries + 1}`)}${field("Exit code", j.exit_code)}
${field("Sandbox", j.sandbox_id ? html`<a href="${inProject(s, `/dashboard/sandboxes/${encodeURIComponent(j.sandbox_id)}`)}"><code>${j.sandbox_id}</code></a>` : null)}
${field("Created", formatTime(j.created_at))}${field("Started", j.started_at && formatTime(j.started_at))}${field("Finished", j.finished_at && formatTime(j.finished_at))}
${field("Run time", j.started_at === null ? null : formatDuration((j.finished_at ?? now) - j.started_at))}${field("Timeout", formatDuration(j.timeout_seconds))}${field("CPU · memory · disk", resourcesOf(j.resources))}${field("Network", j.network ?? "none")}
${field("Working directory", j.cwd)}${field("Environment", j.env_names.join(", "))}${field("Secrets", j.secrets.join(", "))}${field("Input files", files(j.input_files))}${field("Output files", files(j.output_files))}</dl></div>
<h2>Command</h2><pre>${commandText(j.command)}</pre>
<div class="actions"><a href="${inProject(s, "/dashboard/jobs")}">All jobs</a></div>`));
  }

  router.get("/dashboard/jobs/:id", async (ex, { id }) => {
    const s = await kit.signedIn(ex);
    if (s) await jobPage(ex, s, id!);
  }, pub);

  // The whole output as text, as the API's logs route gives it: shown by the browser, never run.
  router.get("/dashboard/jobs/:id/logs", async (ex, { id }) => {
    const s = await kit.signedIn(ex);
    if (!s) return;
    const j = await find(s, id!);
    if (!j) return notFoundPage(kit, ex, s, "jobs", "Job");
    const h = ex.responseHeaders;
    h["content-security-policy"] = CSP + "; sandbox";
    h["x-content-type-options"] = "nosniff";
    h["cache-control"] = "no-store";
    const jobs = deps.jobs;
    await streamBody(ex, "text/plain; charset=utf-8", (async function* () {
      for await (const chunk of jobs.logs(j.id)) yield Buffer.from(chunk.data, "base64");
    })());
  }, pub);

  router.post("/dashboard/jobs/:id/cancel", async (ex, { id }) => {
    const s = await kit.signedIn(ex);
    if (!s) return;
    if (!(await kit.checkedForm(ex, s))) return;
    const j = JOB_ID.test(id!) ? await deps.jobs.cancel(s.project, id!) : undefined;
    if (!j) return notFoundPage(kit, ex, s, "jobs", "Job");
    const said = j.status === "cancelling" ? "is being cancelled: its worker stops its command" : `is ${j.status}`;
    await jobPage(ex, s, id!, `Job ${j.id} ${said}.`);
  }, pub);
}

/**
 * The end of a job's output, stderr marked, in a box that shows its newest lines (a column laid
 * out from the bottom: no script scrolls it). Chunks are cut at byte boundaries of the stream, so
 * a character split between two is decoded whole.
 */
function logBox(chunks: readonly JobLogChunk[], truncated: boolean): Html {
  if (chunks.length === 0) return html`<p class="muted" id="job-output">No output yet.</p>`;
  const decoders = { stdout: new TextDecoder(), stderr: new TextDecoder() };
  let bytes = 0;
  const parts = chunks.map((c) => {
    const data = Buffer.from(c.data, "base64");
    bytes += data.length;
    const text = decoders[c.stream].decode(data, { stream: true });
    return c.stream === "stderr" ? html`<span class="stderr">${text}</span>` : html`${text}`;
  });
  return html`${truncated ? html`<p class="muted">The last ${Math.round(bytes / 1024)} KiB; earlier output is in the whole output.</p>` : ""}<div class="log-box" id="job-output"><pre class="log">${parts}</pre></div>`;
}
