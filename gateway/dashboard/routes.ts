import { randomToken } from "../../lib/ids.js";
import { nextAfter } from "../../lib/page.js";
import type { ApiKeyView, MemberRecord } from "../../modules/accounts/mod.js";
import { normalizeEmail, SIGN_IN_LINK_PATH } from "../../modules/accounts/mod.js";
import { isDomainError } from "../../modules/errors/mod.js";
import { parseTraceQuery, TRACE_ID, type Trace } from "../../modules/traces/mod.js";
import { latencyQuantile, mergeLatency, parseUsageQuery, usagePage, type LatencyHistogram } from "../../modules/usage/mod.js";
import type { HttpExchange } from "../http/exchange.js";
import type { Router } from "../http/router.js";
import { type DashboardDeps, type DashboardKit, errorNotice, messageOf, SIGNIN_COOKIE, type Signed } from "./kit.js";
import { registerOrganizationPages } from "./organization-pages.js";
import { registerResourcePages } from "./resource-pages.js";
import { barChart, CSP, esc, lineChart, formatNumber, formatTime, Html, html, type Layout, page, STYLESHEET, timeline } from "./html.js";
import { parseCookies, sameToken, SignInThrottle } from "./sign-in-guard.js";


const SESSION_COOKIE = "tributary_session";
/** Form bodies are small: a few fields. */
const MAX_FORM_BYTES = 16 * 1024;


/**
 * The dashboard under /dashboard: server-rendered pages (no script), sign-in with a session
 * cookie (HttpOnly, SameSite=Strict, Secure behind TLS), a CSRF token in every form that changes
 * something, sign-in attempts throttled per account and address. A session sees its organization's
 * projects only, and everything it shows is rendered as text.
 */
export function registerDashboardRoutes(router: Router, deps: DashboardDeps): void {
  const throttle = new SignInThrottle(deps.signInAttempts);
  const pub = { public: true };

  const secure = (ex: HttpExchange) => deps.secureCookies === "on" || (deps.secureCookies === "auto" && ex.headers["x-forwarded-proto"] === "https");
  const cookie = (ex: HttpExchange, name: string, value: string, maxAge: number) =>
    `${name}=${value}; Path=/dashboard; HttpOnly; SameSite=Strict; Max-Age=${maxAge}${secure(ex) ? "; Secure" : ""}`;

  function sendHtml(ex: HttpExchange, status: number, body: string): void {
    const h = ex.responseHeaders;
    h["content-security-policy"] = CSP;
    h["x-content-type-options"] = "nosniff";
    h["x-frame-options"] = "DENY";
    h["referrer-policy"] = "no-referrer";
    h["cache-control"] = "no-store";
    ex.send(status, body, "text/html; charset=utf-8");
  }

  function redirect(ex: HttpExchange, to: string): void {
    ex.responseHeaders.location = to;
    ex.responseHeaders["cache-control"] = "no-store";
    ex.send(303, "", "text/plain; charset=utf-8");
  }

  /** The signed-in session and the project the page is about, or a redirect to sign-in (undefined). */
  async function signedIn(ex: HttpExchange): Promise<Signed | undefined> {
    const token = parseCookies(ex.headers.cookie).get(SESSION_COOKIE);
    const session = token ? await deps.members.session(token) : undefined;
    if (!token || !session) {
      redirect(ex, "/dashboard/sign-in");
      return undefined;
    }
    const org = await deps.accounts.getOrganization(session.organization_id);
    const projects = (await deps.accounts.listProjects(session.organization_id)).map((p) => ({ id: p.id, name: p.name }));
    const asked = ex.searchParams().get("project");
    const project = projects.find((p) => p.id === asked)?.id ?? org?.default_project_id ?? projects[0]?.id ?? "";
    return { session, token, project, projects };
  }

  async function readForm(ex: HttpExchange): Promise<URLSearchParams> {
    return new URLSearchParams((await ex.readBody(MAX_FORM_BYTES)).toString("utf8"));
  }

  /** A state change needs the session's CSRF token in its form: otherwise 403 and nothing changes. */
  async function checkedForm(ex: HttpExchange, signed: Signed): Promise<URLSearchParams | undefined> {
    const form = await readForm(ex);
    if (!sameToken(form.get("csrf"), signed.session.csrf)) {
      sendHtml(ex, 403, page({ title: "Refused" }, html`<div class="notice error">This form has expired or did not come from the dashboard (CSRF check failed). Reload the page and try again.</div>`));
      return undefined;
    }
    return form;
  }

  const layoutOf = (s: Signed, title: string, active: NonNullable<Layout["active"]>) => ({ title, active, email: s.session.email, csrf: s.session.csrf, project: s.project });
  const projectPicker = (s: Signed, path: string, extra: Html = html``) =>
    html`<form class="filters" method="get" action="${path}"><label>Project<select name="project">${s.projects.map((p) => html`<option value="${p.id}" ${p.id === s.project ? new Html("selected") : ""}>${p.name} (${p.id})</option>`)}</select></label>${extra}<button type="submit">Show</button></form>`;

  /** A page refused for the session's role (403): nothing was changed. */
  const forbidden = (ex: HttpExchange, s: Signed, active: NonNullable<Layout["active"]>, message: string) =>
    sendHtml(ex, 403, page(layoutOf(s, "Not allowed", active), html`<h1>Not allowed</h1><div class="notice error" role="alert">${message}</div>`));

  const kit: DashboardKit = { deps, sendHtml, redirect, signedIn, readForm, checkedForm, layoutOf, projectPicker, forbidden, cookie, startSession: (ex, member) => startSession(ex, member) };
  async function startSession(ex: HttpExchange, member: MemberRecord): Promise<void> {
    const { token } = await deps.members.startSession(member);
    ex.responseHeaders["set-cookie"] = cookie(ex, SESSION_COOKIE, token, deps.sessionTtlSeconds);
  }

  router.get("/dashboard/static/app.css", (ex) => {
    ex.responseHeaders["cache-control"] = "public, max-age=3600";
    ex.responseHeaders["x-content-type-options"] = "nosniff";
    ex.send(200, STYLESHEET, "text/css; charset=utf-8");
  }, pub);

  router.get("/dashboard", (ex) => redirect(ex, "/dashboard/traces"), pub);

  // ---- sign-in, sign-out ----

  function signInPage(ex: HttpExchange, status: number, message?: string | Html): void {
    // Login CSRF: the form carries a token that must match a cookie set with it (double submit).
    const token = randomToken(32);
    ex.responseHeaders["set-cookie"] = cookie(ex, SIGNIN_COOKIE, token, 3600);
    sendHtml(ex, status, page({ title: "Sign in" }, html`<div class="signin card"><h1>Sign in to Tributary</h1>
${message ? html`<div class="notice error" role="alert">${message}</div>` : ""}
<form method="post" action="/dashboard/sign-in"><input type="hidden" name="csrf" value="${token}">
<label>Email<input name="email" type="email" autocomplete="username" required></label>
<label>Password<input name="password" type="password" autocomplete="current-password" required></label>
<button type="submit">Sign in</button></form></div>`));
  }

  router.get("/dashboard/sign-in", (ex) => signInPage(ex, 200), pub);

  router.post("/dashboard/sign-in", async (ex) => {
    const form = await readForm(ex);
    if (!sameToken(form.get("csrf"), parseCookies(ex.headers.cookie).get(SIGNIN_COOKIE))) return signInPage(ex, 403, "The sign-in form expired. Please try again.");
    const email = normalizeEmail(form.get("email") ?? "").slice(0, 254);
    const password = form.get("password") ?? "";
    const keys = [`account:${email}`, `address:${ex.remoteAddress}`];
    if (!throttle.allowed(keys)) return signInPage(ex, 429, "Too many failed sign-ins. Please wait 15 minutes and try again.");
    const member = email && password ? await deps.members.authenticate(email, password) : undefined;
    if (!member) {
      throttle.failed(keys);
      deps.log.info("dashboard sign-in failed", { address: ex.remoteAddress });
      return signInPage(ex, 401, "Wrong email or password.");
    }
    throttle.succeeded(keys[0]!);
    await startSession(ex, member);
    redirect(ex, "/dashboard/traces");
  }, pub);

  // A one-time sign-in link (`tributary start` prints one for the local organization's owner): the
  // token in its query is the credential. A refused link counts against the address as a failed
  // sign-in does. It lands on usage, which shows every request of the project (logs only those
  // sent with `log: true`).
  router.get(SIGN_IN_LINK_PATH, async (ex) => {
    const keys = [`address:${ex.remoteAddress}`];
    if (!throttle.allowed(keys)) return signInPage(ex, 429, "Too many failed sign-ins. Please wait 15 minutes and try again.");
    try {
      const member = await deps.members.redeemSignInToken(ex.searchParams().get("token") ?? "");
      await startSession(ex, member);
      redirect(ex, "/dashboard/usage");
    } catch (err) {
      if (!isDomainError(err)) throw err;
      throttle.failed(keys);
      deps.log.info("dashboard sign-in link refused", { address: ex.remoteAddress, reason: err._tag });
      signInPage(ex, err._tag === "InvalidParam" ? 400 : 401, html`${messageOf(err)} For a new link, run <code>tributary admin sign-in-link</code>.`);
    }
  }, pub);

  router.post("/dashboard/sign-out", async (ex) => {
    const signed = await signedIn(ex);
    if (!signed) return;
    if (!(await checkedForm(ex, signed))) return;
    await deps.members.endSession(signed.token);
    ex.responseHeaders["set-cookie"] = cookie(ex, SESSION_COOKIE, "", 0);
    redirect(ex, "/dashboard/sign-in");
  }, pub);

  // ---- logs (traces) ----

  router.get("/dashboard/traces", async (ex) => {
    const s = await signedIn(ex);
    if (!s) return;
    const q = ex.searchParams();
    const params = new URLSearchParams();
    for (const name of ["model", "status", "api_key_id", "after"]) {
      const v = q.get(name);
      if (v) params.set(name, v);
    }
    params.set("limit", "50");
    let body: Html;
    try {
      const traces = await deps.traces.list(s.project, parseTraceQuery(params));
      const link = (tr: Trace) => `/dashboard/traces/${encodeURIComponent(tr.id)}?project=${encodeURIComponent(s.project)}`;
      const next = new URLSearchParams(params);
      next.delete("limit");
      next.set("project", s.project);
      const last = nextAfter(traces);
      if (last) next.set("after", last);
      body = html`<table><thead><tr><th>Time</th><th>Model</th><th>Endpoint</th><th>Status</th><th>Input</th><th>Output</th><th>TTFT</th><th>Total</th><th>Key</th></tr></thead><tbody>
${traces.data.map((tr) => html`<tr><td><a href="${link(tr)}">${formatTime(tr.created_at)}</a></td><td>${tr.model}</td><td>${tr.endpoint}${tr.stream ? " (stream)" : ""}${tr.batch ? " (batch)" : ""}</td>
<td class="status-${tr.status}">${tr.status}</td><td class="num">${tr.usage.input_tokens}</td><td class="num">${tr.usage.output_tokens}</td>
<td class="num">${tr.timings.ttft_ms === null ? "—" : `${tr.timings.ttft_ms.toFixed(1)} ms`}</td><td class="num">${tr.timings.total_ms.toFixed(1)} ms</td><td>${tr.api_key_id}</td></tr>`)}
</tbody></table>${traces.data.length === 0 ? html`<p class="muted">No logged requests match. Requests are logged when their body says <code>"log": true</code>.</p>` : ""}
<div class="pager">${traces.has_more ? html`<a href="/dashboard/traces?${next.toString()}">Older →</a>` : ""}</div>`;
    } catch (err) {
      body = errorNotice(err);
    }
    const filters = html`<label>Model<input name="model" value="${q.get("model") ?? ""}" maxlength="256"></label>
<label>Status<select name="status"><option value="">any</option>${["success", "error", "cancelled", "client_disconnected"].map((v) => html`<option ${q.get("status") === v ? new Html("selected") : ""}>${v}</option>`)}</select></label>`;
    sendHtml(ex, 200, page(layoutOf(s, "Logs", "traces"), html`<h1>Logs</h1>${projectPicker(s, "/dashboard/traces", filters)}${body}`));
  }, pub);

  router.get("/dashboard/traces/:id", async (ex, { id }) => {
    const s = await signedIn(ex);
    if (!s) return;
    const trace = TRACE_ID.test(id!) ? await deps.traces.get(s.project, id!) : undefined;
    if (!trace) return sendHtml(ex, 404, page(layoutOf(s, "Not found", "traces"), html`<h1>Trace not found</h1><p>No trace with this id in project ${s.project}.</p>`));
    const tm = trace.timings;
    const phases: Array<{ label: string; from: number; to: number }> = [];
    if (tm.rate_limit_admitted_ms !== null) phases.push({ label: "rate limiter", from: 0, to: tm.rate_limit_admitted_ms });
    if (tm.runner_admitted_ms !== null) phases.push({ label: "runner admission", from: tm.rate_limit_admitted_ms ?? 0, to: tm.runner_admitted_ms });
    if (tm.first_token_ms !== null) phases.push({ label: "first token", from: tm.runner_admitted_ms ?? 0, to: tm.first_token_ms });
    phases.push({ label: "generation", from: tm.first_token_ms ?? tm.runner_admitted_ms ?? 0, to: tm.end_ms });
    phases.push({ label: "total", from: 0, to: tm.total_ms });
    const pretty = (text: string, truncated: boolean) => {
      let shown = text;
      if (!truncated) {
        try {
          shown = JSON.stringify(JSON.parse(text), null, 2);
        } catch {
          // Not JSON (a prompt): shown as it is.
        }
      }
      return html`<pre>${shown}</pre>${truncated ? html`<p class="muted">Truncated: only the first bytes were recorded.</p>` : ""}`;
    };
    const field = (k: string, v: unknown) => html`<div><dt>${k}</dt><dd>${v === null || v === undefined || v === "" ? "—" : v}</dd></div>`;
    sendHtml(ex, 200, page(layoutOf(s, `Trace ${trace.id}`, "traces"), html`<h1>Trace <span class="muted">${trace.id}</span></h1>
<div class="card"><dl class="kv grid">${field("Request id", trace.request_id)}${field("Model", trace.model)}${field("Endpoint", trace.endpoint)}${field("Status", trace.status)}
${field("HTTP status", trace.http_status)}${field("Stream", trace.stream ? "yes" : "no")}${field("Batch", trace.batch ? "yes" : "no")}${field("Runner", trace.runner_id)}
${field("API key", trace.api_key_id)}${field("Received", new Date(tm.received_at).toISOString())}${field("Input tokens", trace.usage.input_tokens)}${field("Output tokens", trace.usage.output_tokens)}
${field("Finish reasons", trace.finish_reasons.join(", "))}${field("TTFT", tm.ttft_ms === null ? null : `${tm.ttft_ms} ms`)}${field("Queue wait", tm.queue_wait_ms === null ? null : `${tm.queue_wait_ms} ms`)}${field("Chunks", trace.stream ? trace.response.chunks : null)}</dl>
${trace.error ? html`<div class="notice error">${trace.error.type}${trace.error.code ? ` (${trace.error.code})` : ""}: ${trace.error.message}</div>` : ""}</div>
<h2>Timeline</h2><div class="card">${timeline(phases, tm.total_ms)}</div>
<h2>Prompt (as the engine saw it)</h2>${trace.prompt ? pretty(trace.prompt.text, trace.prompt.truncated) : html`<p class="muted">No runner admitted this request.</p>`}
<h2>Request</h2>${pretty(trace.request.text, trace.request.truncated)}
<h2>Response</h2>${pretty(trace.response.text, trace.response.truncated)}
<h2>Attributes</h2><pre>${JSON.stringify(trace.attributes, null, 2)}</pre>`));
  }, pub);

  // ---- usage ----

  router.get("/dashboard/usage", async (ex) => {
    const s = await signedIn(ex);
    if (!s) return;
    const q = ex.searchParams();
    const width = (["1m", "1h", "1d"] as const).find((w) => w === q.get("width")) ?? "1h";
    const count = { "1m": 60, "1h": 24, "1d": 30 }[width];
    const span = { "1m": 60, "1h": 3600, "1d": 86_400 }[width];
    const end = Math.floor(Date.now() / 1000 / span) * span + span;
    const start = end - count * span;
    let body: Html;
    try {
      const query = parseUsageQuery(new URLSearchParams({ start_time: String(start), end_time: String(end), bucket_width: width, limit: String(count), group_by: "model" }));
      const usage = await usagePage(deps.usage, [s.project], query, { histograms: true });
      const label = (t: number) => (width === "1d" ? new Date(t * 1000).toISOString().slice(5, 10) : new Date(t * 1000).toISOString().slice(11, 16));
      const per = (f: (r: (typeof usage.data)[number]["results"][number]) => number) =>
        usage.data.map((b) => ({ label: label(b.start_time), value: b.results.reduce((n, r) => n + f(r), 0) }));
      const totals = new Map<string, { requests: number; input: number; output: number; errors: number; ttft: LatencyHistogram; latency: LatencyHistogram }>();
      for (const b of usage.data)
        for (const r of b.results) {
          const t = totals.get(r.model ?? "") ?? { requests: 0, input: 0, output: 0, errors: 0, ttft: [], latency: [] };
          t.requests += r.num_model_requests;
          t.input += r.input_tokens;
          t.output += r.output_tokens;
          t.errors += r.num_model_request_errors;
          mergeLatency(t.ttft, r.histograms?.ttft_ms);
          mergeLatency(t.latency, r.histograms?.request_ms);
          totals.set(r.model ?? "", t);
        }
      // Percentiles per bucket over every model: the buckets' histograms merged (exact), then read.
      const percentiles = (pick: (r: (typeof usage.data)[number]["results"][number]) => LatencyHistogram | undefined) =>
        usage.data.map((b) => {
          const h: LatencyHistogram = [];
          for (const r of b.results) mergeLatency(h, pick(r));
          return { label: label(b.start_time), values: [latencyQuantile(h, 0.5), latencyQuantile(h, 0.95)] };
        });
      const ms = (v: number | null) => (v === null ? "—" : `${formatNumber(Math.round(v * 10) / 10)} ms`);
      body = html`${barChart(per((r) => r.num_model_requests), { title: "Requests" })}
${barChart(per((r) => r.input_tokens + r.output_tokens), { title: "Tokens (input + output)", color: "#37b24d" })}
${barChart(per((r) => r.num_model_request_errors), { title: "Errors", color: "#e03131", height: 100 })}
${lineChart(percentiles((r) => r.histograms?.ttft_ms), { title: "Time to first token (ms): p50 and p95", series: ["p50", "p95"], id: "ttft" })}
${lineChart(percentiles((r) => r.histograms?.request_ms), { title: "Request latency (ms): p50 and p95", series: ["p50", "p95"], id: "latency" })}
<h2>By model</h2><table><thead><tr><th>Model</th><th>Requests</th><th>Input tokens</th><th>Output tokens</th><th>Errors</th><th>TTFT p50</th><th>TTFT p95</th><th>Latency p50</th><th>Latency p95</th></tr></thead><tbody>
${[...totals].map(([model, t]) => html`<tr><td>${model}</td><td class="num">${formatNumber(t.requests)}</td><td class="num">${formatNumber(t.input)}</td><td class="num">${formatNumber(t.output)}</td><td class="num">${t.errors}</td>
<td class="num">${ms(latencyQuantile(t.ttft, 0.5))}</td><td class="num">${ms(latencyQuantile(t.ttft, 0.95))}</td><td class="num">${ms(latencyQuantile(t.latency, 0.5))}</td><td class="num">${ms(latencyQuantile(t.latency, 0.95))}</td></tr>`)}</tbody></table>
<p class="muted">Percentiles come from fixed latency buckets kept with the usage rows (bounds step by 1.5 to 2x), so they are exact for any bucket width and as precise as the bucket they fall in. Request latency counts the requests a runner took; TTFT those that had a first token.</p>`;
    } catch (err) {
      body = errorNotice(err);
    }
    const widthPicker = html`<label>Buckets<select name="width">${(["1m", "1h", "1d"] as const).map((w) => html`<option value="${w}" ${w === width ? new Html("selected") : ""}>${{ "1m": "minutes (last hour)", "1h": "hours (last day)", "1d": "days (last 30)" }[w]}</option>`)}</select></label>`;
    sendHtml(ex, 200, page(layoutOf(s, "Usage", "usage"), html`<h1>Usage</h1>${projectPicker(s, "/dashboard/usage", widthPicker)}${body}`));
  }, pub);

  // ---- batches ----

  router.get("/dashboard/batches", async (ex) => {
    const s = await signedIn(ex);
    if (!s) return;
    const after = ex.searchParams().get("after") ?? undefined;
    const page = await deps.batches.list(s.project, { limit: 20, order: "desc", after: after && /^batch_[A-Za-z0-9]{1,64}$/.test(after) ? after : undefined });
    const rows = page.data.map((b) => {
      const c = b.request_counts;
      const done = c.completed + c.failed;
      const pct = c.total > 0 ? Math.round((done / c.total) * 100) : 0;
      const file = (id: string | null) => (id ? html`<code>${id}</code>` : "—");
      return html`<tr><td><code>${b.id}</code></td><td>${b.endpoint}</td><td>${b.status}</td>
<td><progress max="${Math.max(1, c.total)}" value="${done}" aria-label="progress of ${b.id}">${pct}%</progress> <span class="muted">${done} / ${c.total}</span></td>
<td class="num">${c.completed}</td><td class="num">${c.failed}</td><td>${file(b.output_file_id)}</td><td>${file(b.error_file_id)}</td><td>${formatTime(b.created_at)}</td></tr>`;
    });
    const last = page.has_more ? nextAfter(page) : undefined;
    const next = last ? `/dashboard/batches?project=${encodeURIComponent(s.project)}&after=${encodeURIComponent(last)}` : undefined;
    sendHtml(ex, 200, page_(s, html`<h1>Batches</h1>${projectPicker(s, "/dashboard/batches")}
<table><thead><tr><th>Batch</th><th>Endpoint</th><th>Status</th><th>Progress</th><th>Completed</th><th>Failed</th><th>Output file</th><th>Error file</th><th>Created</th></tr></thead><tbody>${rows}</tbody></table>
${page.data.length === 0 ? html`<p class="muted">No batches in this project.</p>` : ""}<div class="pager">${next ? html`<a href="${next}">Older →</a>` : ""}</div>`));
  }, pub);

  const page_ = (s: Signed, body: Html) => page(layoutOf(s, "Batches", "batches"), body);

  // ---- members ----

  async function membersPage(ex: HttpExchange, s: Signed, status = 200, message?: string): Promise<void> {
    const members = await deps.members.list(s.session.organization_id);
    const owner = s.session.role === "owner";
    sendHtml(ex, status, page(layoutOf(s, "Members", "members"), html`<h1>Members</h1>
${message ? html`<div class="notice">${message}</div>` : ""}
<table><thead><tr><th>Email</th><th>Role</th><th>Id</th><th>Added</th></tr></thead><tbody>
${members.map((m) => html`<tr><td>${m.email}</td><td>${m.role}</td><td>${m.id}</td><td>${formatTime(m.created_at)}</td></tr>`)}</tbody></table>
${owner ? html`<h2>Add a member</h2><div class="card"><form class="filters" method="post" action="/dashboard/members"><input type="hidden" name="csrf" value="${s.session.csrf}">
<label>Email<input name="email" type="email" maxlength="254" required></label><label>Initial password<input name="password" type="password" minlength="8" maxlength="1024" required></label>
<label>Role<select name="role"><option value="member">member</option><option value="owner">owner</option></select></label><button type="submit">Add</button></form>
<p class="muted">Give the new member their password another way; they sign in with it.</p></div>` : html`<p class="muted">Owners add members.</p>`}`));
  }

  router.get("/dashboard/members", async (ex) => {
    const s = await signedIn(ex);
    if (s) await membersPage(ex, s);
  }, pub);

  router.post("/dashboard/members", async (ex) => {
    const s = await signedIn(ex);
    if (!s) return;
    const form = await checkedForm(ex, s);
    if (!form) return;
    if (s.session.role !== "owner") return membersPage(ex, s, 403, "Only owners add members.");
    try {
      const m = await deps.members.create({
        organizationId: s.session.organization_id,
        email: form.get("email") ?? "",
        password: form.get("password") ?? "",
        role: form.get("role") === "owner" ? "owner" : "member",
      });
      await membersPage(ex, s, 200, `${m.email} added as ${m.role}.`);
    } catch (err) {
      if (!isDomainError(err)) throw err;
      await membersPage(ex, s, 400, messageOf(err));
    }
  }, pub);

  // ---- API keys ----

  async function keysPage(ex: HttpExchange, s: Signed, created?: { secret: string; name: string }, message?: string): Promise<void> {
    const [projectKeys, orgKeys] = await Promise.all([
      deps.accounts.listApiKeys({ projectId: s.project }),
      deps.accounts.listApiKeys({ organizationId: s.session.organization_id }),
    ]);
    const rows = (keys: ApiKeyView[]) =>
      keys.map((k) => html`<tr><td>${k.name}</td><td><code>${k.prefix}...</code></td><td>${k.id}</td><td>${formatTime(k.created_at)}</td><td>${k.last_used_at ? formatTime(k.last_used_at) : "never"}</td>
<td><form method="post" action="/dashboard/keys/${k.id}/revoke?project=${s.project}"><input type="hidden" name="csrf" value="${s.session.csrf}"><button class="danger" type="submit">Revoke</button></form></td></tr>`);
    const table = (keys: ApiKeyView[]) =>
      keys.length === 0 ? html`<p class="muted">None.</p>` : html`<table><thead><tr><th>Name</th><th>Key</th><th>Id</th><th>Created</th><th>Last used</th><th></th></tr></thead><tbody>${rows(keys)}</tbody></table>`;
    sendHtml(ex, 200, page(layoutOf(s, "API keys", "keys"), html`<h1>API keys</h1>${projectPicker(s, "/dashboard/keys")}
${message ? html`<div class="notice">${message}</div>` : ""}
${created ? html`<div class="card"><p>Key <strong>${created.name}</strong> created. Copy it now: it is shown only once.</p><div class="secret" id="new-key">${created.secret}</div></div>` : ""}
<div class="card"><form class="filters" method="post" action="/dashboard/keys?project=${s.project}"><input type="hidden" name="csrf" value="${s.session.csrf}">
<label>Name<input name="name" maxlength="200" required></label><label>For<select name="scope"><option value="project">this project</option><option value="organization">the organization</option></select></label>
<button type="submit">Create key</button></form></div>
<h2>Keys of project ${s.project}</h2>${table(projectKeys)}<h2>Organization keys</h2>${table(orgKeys.filter((k) => k.project_id === null))}`));
  }

  router.get("/dashboard/keys", async (ex) => {
    const s = await signedIn(ex);
    if (s) await keysPage(ex, s);
  }, pub);

  router.post("/dashboard/keys", async (ex) => {
    const s = await signedIn(ex);
    if (!s) return;
    const form = await checkedForm(ex, s);
    if (!form) return;
    const scope = form.get("scope") === "organization" ? "organization" : "project";
    try {
      const created = await deps.accounts.createApiKey(scope === "organization" ? { organizationId: s.session.organization_id, name: form.get("name") ?? undefined } : { projectId: s.project, name: form.get("name") ?? undefined });
      await keysPage(ex, s, { secret: created.secret, name: created.key.name });
    } catch (err) {
      if (!isDomainError(err)) throw err;
      await keysPage(ex, s, undefined, messageOf(err));
    }
  }, pub);

  router.post("/dashboard/keys/:id/revoke", async (ex, { id }) => {
    const s = await signedIn(ex);
    if (!s) return;
    if (!(await checkedForm(ex, s))) return;
    // Only a key of the session's organization.
    const mine = (await deps.accounts.listApiKeys({ organizationId: s.session.organization_id, includeRevoked: true })).find((k) => k.id === id);
    if (!mine) return keysPage(ex, s, undefined, "No such key in this organization.");
    try {
      await deps.accounts.revokeApiKey(mine.id);
    } catch (err) {
      if (!isDomainError(err)) throw err;
      return keysPage(ex, s, undefined, messageOf(err));
    }
    await keysPage(ex, s, undefined, `Key ${mine.name} (${mine.prefix}...) revoked: it is refused from now on.`);
  }, pub);

  registerOrganizationPages(router, kit);
  registerResourcePages(router, kit);
}




export { esc };
export type { DashboardDeps } from "./kit.js";
