import { nextAfter } from "../../lib/page.js";
import { FILE_PURPOSES, type FileObject } from "../../modules/files/mod.js";
import type { BudgetUse } from "../../modules/ratelimit/mod.js";
import type { HttpExchange } from "../http/exchange.js";
import type { Router } from "../http/router.js";
import { streamBody } from "../http/stream-body.js";
import { cell, formatBytes, formatNumber, formatTime, Html, html, listTable, page } from "./html.js";
import { type DashboardKit, downloadHeaders, field, type Signed } from "./kit.js";

// Files of a project (a page of the list, a file's metadata, its download, deletion) and the rate
// limits: each model's limits and what the current window of its budget has handed out.

const pub = { public: true };
const FILES_PER_PAGE = 50;
/** Keys whose budgets the page reads when budgets are per key (a page, not the whole list). */
const MAX_KEY_BUDGETS = 20;
const FILE_ID = /^file-[A-Za-z0-9]{1,64}$/;
/** The purposes the list filters by: what clients upload, and batches' output and error files. */
const LISTED_PURPOSES: readonly string[] = [...FILE_PURPOSES, "batch_output"];

export function registerResourcePages(router: Router, kit: DashboardKit): void {
  const { deps } = kit;

  // ---- files ----

  const fileLink = (s: Signed, f: FileObject, suffix = "") => `/dashboard/files/${encodeURIComponent(f.id)}${suffix}?project=${encodeURIComponent(s.project)}`;

  router.get("/dashboard/files", async (ex) => {
    const s = await kit.signedIn(ex);
    if (!s) return;
    const q = ex.searchParams();
    const purpose = LISTED_PURPOSES.find((p) => p === q.get("purpose"));
    const after = q.get("after") ?? "";
    const files = await deps.files.list(s.project, { purpose, limit: FILES_PER_PAGE, order: "desc", after: FILE_ID.test(after) ? after : undefined });
    const next = new URLSearchParams({ project: s.project, ...(purpose ? { purpose } : {}) });
    // A filtered page that stopped at its skip bound goes on from its cursor.
    const last = nextAfter(files);
    if (last) next.set("after", last);
    const rows = files.data.map((f) => [
      html`<a href="${fileLink(s, f)}">${f.filename}</a>`,
      html`<code>${f.id}</code>`,
      f.purpose,
      cell(formatBytes(f.bytes), "num"),
      formatTime(f.created_at),
      f.expires_at ? formatTime(f.expires_at) : "never",
    ]);
    const filters = html`<label>Purpose<select name="purpose"><option value="">any</option>${LISTED_PURPOSES.map((p) => html`<option ${purpose === p ? new Html("selected") : ""}>${p}</option>`)}</select></label>`;
    kit.sendHtml(ex, 200, page(kit.layoutOf(s, "Files", "files"), html`<h1>Files</h1>${kit.projectPicker(s, "/dashboard/files", filters)}
${listTable(["Name", "Id", "Purpose", "Size", "Created", "Expires"], rows, "files")}
${files.data.length === 0 && !files.has_more ? html`<p class="muted">No files in this project. Upload with <code>POST /v1/files</code>.</p>` : ""}
<div class="pager">${files.has_more ? html`<a href="/dashboard/files?${next.toString()}">Older →</a>` : ""}</div>`));
  }, pub);

  async function filePage(ex: HttpExchange, s: Signed, id: string): Promise<void> {
    const f = await deps.files.get(s.project, id);
    if (!f) return kit.sendHtml(ex, 404, page(kit.layoutOf(s, "Not found", "files"), html`<h1>File not found</h1><p>No file with this id in project ${s.project}.</p>`));
    kit.sendHtml(ex, 200, page(kit.layoutOf(s, `File ${f.id}`, "files"), html`<h1>File <span class="muted">${f.id}</span></h1>
<div class="card"><dl class="kv grid">${field("Name", f.filename)}${field("Purpose", f.purpose)}${field("Size", `${formatBytes(f.bytes)} (${f.bytes} bytes)`)}${field("Created", formatTime(f.created_at))}
${field("Expires", f.expires_at ? formatTime(f.expires_at) : "never")}${field("Status", f.status)}${field("Project", s.project)}</dl></div>
<div class="pager"><a href="${fileLink(s, f, "/content")}" download>Download</a>
<form class="inline" method="post" action="${fileLink(s, f, "/delete")}"><input type="hidden" name="csrf" value="${s.session.csrf}"><button class="danger" type="submit">Delete file</button></form></div>
<p class="muted">Deleting a file removes its contents at once; batches that name it keep their records.</p>`));
  }

  router.get("/dashboard/files/:id", async (ex, { id }) => {
    const s = await kit.signedIn(ex);
    if (s) await filePage(ex, s, id!);
  }, pub);

  router.get("/dashboard/files/:id/content", async (ex, { id }) => {
    const s = await kit.signedIn(ex);
    if (!s) return;
    const f = await deps.files.get(s.project, id!);
    if (!f) return kit.sendHtml(ex, 404, page(kit.layoutOf(s, "Not found", "files"), html`<h1>File not found</h1>`));
    downloadHeaders(ex, f.filename);
    await streamBody(ex, "application/octet-stream", deps.files.content(f.id));
  }, pub);

  router.post("/dashboard/files/:id/delete", async (ex, { id }) => {
    const s = await kit.signedIn(ex);
    if (!s) return;
    if (!(await kit.checkedForm(ex, s))) return;
    const deleted = await deps.files.delete(s.project, id!);
    if (!deleted) return kit.sendHtml(ex, 404, page(kit.layoutOf(s, "Not found", "files"), html`<h1>File not found</h1><p>No file with this id in project ${s.project}.</p>`));
    kit.sendHtml(ex, 200, page(kit.layoutOf(s, "Files", "files"), html`<h1>Files</h1><div class="notice" role="status">File ${id} deleted.</div><p><a href="/dashboard/files?project=${s.project}">Back to the files</a></p>`));
  }, pub);

  // ---- rate limits ----

  router.get("/dashboard/limits", async (ex) => {
    const s = await kit.signedIn(ex);
    if (!s) return;
    const scope = deps.rateLimitScope;
    let body: Html;
    if (!deps.budgets) {
      body = html`<div class="notice">Rate limits are off on this gateway (<code>TRIBUTARY_RATE_LIMITS=off</code>): every request is admitted.</div>`;
    } else {
      const keys = scope === "key" ? (await deps.accounts.listApiKeys({ projectId: s.project })).slice(0, MAX_KEY_BUDGETS) : [];
      const scopeIds: Array<{ id: string; label: string }> =
        scope === "organization" ? [{ id: s.session.organization_id, label: `organization ${s.session.organization_id}` }]
        : scope === "project" ? [{ id: s.project, label: `project ${s.project}` }]
        : keys.map((k) => ({ id: k.id, label: `key ${k.name} (${k.id})` }));
      const reads: Array<Promise<BudgetUse & { label: string }>> = [];
      for (const m of deps.models)
        for (const sc of scopeIds)
          reads.push(deps.budgets.read({ model: m.id, scope, scopeId: sc.id }, { requests: m.rateLimits.requestsPerMinute, tokens: m.rateLimits.tokensPerMinute }).then((u) => ({ ...u, label: sc.label })));
      const budgets = await Promise.all(reads);
      const bar = (used: number, limit: number, what: string) =>
        html`<progress max="${Math.max(1, limit)}" value="${Math.min(used, limit)}" aria-label="${what}">${Math.round((used / Math.max(1, limit)) * 100)}%</progress> <span class="muted">${formatNumber(used)} / ${formatNumber(limit)}</span>`;
      const rows = budgets.map((b) => [
        b.model,
        b.label,
        cell(formatNumber(b.limits.requests), "num"),
        cell(formatNumber(b.limits.tokens), "num"),
        html`<span>${bar(b.granted.requests, b.limits.requests, `requests of ${b.model}`)}</span>`,
        html`<span>${bar(b.granted.tokens, b.limits.tokens, `tokens of ${b.model}`)}</span>`,
        b.windowEndsInMs === null ? "—" : `${(b.windowEndsInMs / 1000).toFixed(1)} s`,
        b.owned ? "active" : "idle",
      ]);
      body = html`<p class="muted">Budgets are per model and ${scope}${scope === "key" ? ` (the first ${MAX_KEY_BUDGETS} keys of the project)` : ""}, per window of ${(budgets.find((b) => b.windowMs)?.windowMs ?? deps.rateLimitWindowMs) / 1000} s. <em>Used</em> is what the window has handed to gateways: the requests admitted and the tokens they were estimated at (settled to what they used when they end), plus chunks gateways hold and have not used yet.</p>
${listTable(["Model", "Budget of", "Requests / window", "Tokens / window", "Requests used", "Tokens used", "Window ends in", "State"], rows, "budgets")}
${rows.length === 0 ? html`<p class="muted">No budgets to show${scope === "key" ? ": this project has no keys" : ""}.</p>` : ""}`;
    }
    const picker = scope === "organization" ? html`` : kit.projectPicker(s, "/dashboard/limits");
    kit.sendHtml(ex, 200, page(kit.layoutOf(s, "Rate limits", "limits"), html`<h1>Rate limits</h1>${picker}${body}`));
  }, pub);
}

