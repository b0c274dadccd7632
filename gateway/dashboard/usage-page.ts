import { nextAfter } from "../../lib/page.js";
import { deploymentStates } from "../../modules/apps/mod.js";
import { isDomainError } from "../../modules/errors/mod.js";
import { sandboxStates, type SandboxObject } from "../../modules/sandboxes/mod.js";
import {
  latencyQuantile,
  mergeLatency,
  overlapSeconds,
  parseUsageQuery,
  runSecondsPerBucket,
  usagePage,
  type LatencyHistogram,
  type RunKind,
  type RunSpan,
  type UsageResult,
} from "../../modules/usage/mod.js";
import type { Router } from "../http/router.js";
import { barChart, cell, formatDuration, formatNumber, Html, html, lineChart, listTable, page, type ChartPoint } from "./html.js";
import { type DashboardKit, errorNotice, memberPrincipal, type Signed } from "./kit.js";

// The project's usage over the last hour, day or 30 days: totals for the period, requests, tokens
// and errors per bucket, each model's TTFT and latency percentiles over time, and the platform's
// run time (sandboxes, jobs, hosted apps' instances), which is not metered: it is read from the
// records, which say when each thing started and ended.

const pub = { public: true };

const WIDTHS = {
  "1m": { buckets: 60, seconds: 60, tickEvery: 10, per: "minute", choice: "minutes (last hour)", unit: { name: "s", seconds: 1 } },
  "1h": { buckets: 24, seconds: 3600, tickEvery: 3, per: "hour", choice: "hours (last day)", unit: { name: "min", seconds: 60 } },
  "1d": { buckets: 30, seconds: 86_400, tickEvery: 5, per: "day", choice: "days (last 30)", unit: { name: "h", seconds: 3600 } },
} as const;
type Width = keyof typeof WIDTHS;

/** Sandboxes read for the run time, at most (newest first): past it the figures say they are partial. */
const MAX_SANDBOX_READS = 1000;
const MAX_DEPLOYMENT_READS = 300;
/** Sandboxes created this long before the period are not read: the longest timeout a create may ask. */
const SANDBOX_LOOKBACK_S = 86_400;

const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];

/**
 * The buckets as points of the x axis: every few a tick with the time and, at the first tick and
 * where the day changes, the date (UTC), so that a reader knows which day a bar is.
 */
export function timeAxis(starts: readonly number[], width: Width): ChartPoint[] {
  let shownDay = "";
  let shownYear = "";
  return starts.map((t, i) => {
    const d = new Date(t * 1000);
    const iso = d.toISOString();
    const label = width === "1d" ? iso.slice(0, 10) : `${iso.slice(0, 10)} ${iso.slice(11, 16)} UTC`;
    if (i % WIDTHS[width].tickEvery !== 0) return { label };
    const day = `${MONTHS[d.getUTCMonth()]} ${d.getUTCDate()}`;
    const year = String(d.getUTCFullYear());
    let tick: string[];
    if (width === "1d") tick = year !== shownYear ? [day, year] : [day];
    else tick = day !== shownDay ? [iso.slice(11, 16), day] : [iso.slice(11, 16)];
    shownDay = day;
    shownYear = year;
    return { label, tick };
  });
}

export function registerUsagePage(router: Router, kit: DashboardKit): void {
  const { deps } = kit;

  /**
   * What the project's sandboxes (a job's sandboxes counting as the job's) and deployments ran,
   * as spans, from their records: those running now, and those created since a day before `since`
   * (at most MAX_SANDBOX_READS and MAX_DEPLOYMENT_READS records; `partial` when there were more).
   */
  async function runSpans(s: Signed, since: number, now: number): Promise<{ spans: RunSpan[]; partial: boolean }> {
    const spans: RunSpan[] = [];
    let partial = false;
    const seen = new Set<string>();
    const addSandbox = (x: SandboxObject) => {
      if (seen.has(x.id)) return;
      seen.add(x.id);
      const start = x.started_at ?? x.created_at;
      spans.push({ kind: x.metadata.job_id ? "job" : "sandbox", start, end: x.stopped_at ?? (sandboxStates.isFinal(x.status) ? start : now) });
    };
    // Running now, whenever it started: from the live index (bounded by the project's limit).
    for (const x of (await deps.sandboxes.list(s.project, { limit: MAX_SANDBOX_READS, order: "desc" }, { status: "running", metadata: {} })).data) addSandbox(x);
    let after: string | undefined;
    for (let read = 0; ; ) {
      const found = await deps.sandboxes.list(s.project, { limit: 100, order: "desc", after }, { metadata: {} }).catch((err: unknown) => {
        // The cursor's record expired meanwhile: what was read stands.
        if (!isDomainError(err)) throw err;
        return undefined;
      });
      if (!found) break;
      found.data.forEach(addSandbox);
      read += found.data.length;
      const oldest = found.data.at(-1);
      after = nextAfter(found);
      if (!found.has_more || !after || (oldest && oldest.created_at < since - SANDBOX_LOOKBACK_S)) break;
      if (read >= MAX_SANDBOX_READS) {
        partial = true;
        break;
      }
    }
    let deploymentsAfter: string | undefined;
    for (let read = 0; ; ) {
      const found = await deps.apps.list(memberPrincipal(s), { limit: 100, after: deploymentsAfter });
      for (const d of found.data) spans.push({ kind: "app", start: d.created_at, end: d.ended_at ?? (deploymentStates.isFinal(d.status) ? d.created_at : now) });
      read += found.data.length;
      deploymentsAfter = nextAfter(found);
      if (!found.has_more || !deploymentsAfter) break;
      if (read >= MAX_DEPLOYMENT_READS) {
        partial = true;
        break;
      }
    }
    return { spans, partial };
  }

  router.get("/dashboard/usage", async (ex) => {
    const s = await kit.signedIn(ex);
    if (!s) return;
    const q = ex.searchParams();
    const width: Width = (Object.keys(WIDTHS) as Width[]).find((w) => w === q.get("width")) ?? "1h";
    const w = WIDTHS[width];
    const now = Math.floor(Date.now() / 1000);
    const end = Math.floor(now / w.seconds) * w.seconds + w.seconds;
    const start = end - w.buckets * w.seconds;
    let body: Html;
    try {
      const query = parseUsageQuery(new URLSearchParams({ start_time: String(start), end_time: String(end), bucket_width: width, limit: String(w.buckets), group_by: "model" }));
      const [usage, run] = await Promise.all([usagePage(deps.usage, [s.project], query, { histograms: true }), runSpans(s, start, now)]);
      const axis = timeAxis(usage.data.map((b) => b.start_time), width);
      const per = (f: (r: UsageResult) => number) => usage.data.map((b, i) => ({ ...axis[i]!, value: b.results.reduce((n, r) => n + f(r), 0) }));

      const totals = () => ({ requests: 0, input: 0, cached: 0, output: 0, errors: 0, ttft: [] as LatencyHistogram, latency: [] as LatencyHistogram });
      /** Adds a usage result to a total (the period's, or one model's). */
      const add = (into: ReturnType<typeof totals>, r: UsageResult) => {
        into.requests += r.num_model_requests;
        into.input += r.input_tokens;
        into.cached += r.input_cached_tokens;
        into.output += r.output_tokens;
        into.errors += r.num_model_request_errors;
        mergeLatency(into.ttft, r.histograms?.ttft_ms);
        mergeLatency(into.latency, r.histograms?.request_ms);
      };
      const all = totals();
      const models = new Map<string, ReturnType<typeof totals>>();
      for (const b of usage.data)
        for (const r of b.results) {
          const m = models.get(r.model ?? "") ?? totals();
          add(m, r);
          models.set(r.model ?? "", m);
          add(all, r);
        }
      const byRequests = [...models].sort((a, b) => b[1].requests - a[1].requests);
      // A model's percentiles per bucket: the bucket's histograms of that model (exact), then read.
      const percentiles = (model: string, pick: (r: UsageResult) => LatencyHistogram | undefined) =>
        usage.data.map((b, i) => {
          const h: LatencyHistogram = [];
          for (const r of b.results) if ((r.model ?? "") === model) mergeLatency(h, pick(r));
          return { ...axis[i]!, values: [latencyQuantile(h, 0.5), latencyQuantile(h, 0.95)] };
        });
      const ms = (v: number | null) => (v === null ? "—" : `${formatNumber(Math.round(v * 10) / 10)} ms`);

      const runTime = runSecondsPerBucket(run.spans, usage.data.map((b) => b.start_time), w.seconds);
      const ran = (kind: RunKind) => run.spans.filter((x) => x.kind === kind && overlapSeconds(x, start, end) > 0).length;
      const total = (term: string, value: string | Html, note?: string) => html`<div><dt>${term}</dt><dd>${value}${note ? html` <small>${note}</small>` : ""}</dd></div>`;
      // Days are named whole (the last one is today); minutes and hours by where the period ends.
      const period = width === "1d" ? `${axis[0]?.label ?? ""} to ${axis.at(-1)?.label ?? ""}` : `${axis[0]?.label ?? ""} to ${timeAxisEnd(end)}`;

      body = html`<h2>Totals for the period <span class="muted">(${period})</span></h2>
<dl class="totals" id="totals">${total("Requests", formatNumber(all.requests))}${total("Errors", formatNumber(all.errors), all.requests > 0 ? `${((all.errors / all.requests) * 100).toFixed(1)}%` : undefined)}
${total("Input tokens", formatNumber(all.input), all.cached > 0 ? `${formatNumber(all.cached)} cached` : undefined)}${total("Output tokens", formatNumber(all.output))}
${total("TTFT p50 / p95", html`${ms(latencyQuantile(all.ttft, 0.5))} <small>/ ${ms(latencyQuantile(all.ttft, 0.95))}</small>`)}${total("Latency p50 / p95", html`${ms(latencyQuantile(all.latency, 0.5))} <small>/ ${ms(latencyQuantile(all.latency, 0.95))}</small>`)}
${total("Sandboxes", formatDuration(runTime.total.sandbox), `${ran("sandbox")} ran`)}${total("Jobs", formatDuration(runTime.total.job), `${ran("job")} sandboxes`)}${total("App instances", formatDuration(runTime.total.app), `${ran("app")} deployments`)}</dl>
<div class="charts">${barChart(per((r) => r.num_model_requests), { title: `Requests per ${w.per} (UTC)` })}
${barChart(per((r) => r.input_tokens + r.output_tokens), { title: `Tokens per ${w.per}, input + output (UTC)`, color: "#37b24d" })}
${barChart(per((r) => r.num_model_request_errors), { title: `Errors per ${w.per} (UTC)`, color: "#e03131" })}
${lineChart(runTime.buckets.map((b, i) => ({ ...axis[i]!, values: [b.sandbox / w.unit.seconds, b.job / w.unit.seconds, b.app / w.unit.seconds] })), { title: `Run time per ${w.per} (${w.unit.name})`, series: ["sandboxes", "jobs", "app instances"], id: "run-time", unit: ` ${w.unit.name}` })}</div>
<h2>Latency by model</h2>
${byRequests.length === 0 ? html`<p class="muted">No requests in this period.</p>` : ""}
${byRequests.map(([model], i) => html`<div class="charts">${lineChart(percentiles(model, (r) => r.histograms?.ttft_ms), { title: `${model}: time to first token`, series: ["p50", "p95"], id: `ttft-${i}`, unit: " ms" })}
${lineChart(percentiles(model, (r) => r.histograms?.request_ms), { title: `${model}: request latency`, series: ["p50", "p95"], id: `latency-${i}`, unit: " ms" })}</div>`)}
<h2>By model</h2>${listTable(
        ["Model", "Requests", "Input tokens", "Output tokens", "Errors", "TTFT p50", "TTFT p95", "Latency p50", "Latency p95"],
        byRequests.map(([model, t]) => [
          model,
          ...[formatNumber(t.requests), formatNumber(t.input), formatNumber(t.output), String(t.errors)].map((v) => cell(v, "num")),
          ...[latencyQuantile(t.ttft, 0.5), latencyQuantile(t.ttft, 0.95), latencyQuantile(t.latency, 0.5), latencyQuantile(t.latency, 0.95)].map((v) => cell(ms(v), "num")),
        ]),
        "by-model",
      )}
<p class="muted">Percentiles come from fixed latency buckets kept with the usage rows (bounds step by 1.5 to 2x), so they are exact for any bucket width and as precise as the bucket they fall in. Request latency counts the requests a runner took; TTFT those that had a first token, streamed or not.</p>
<h2>Platform</h2>${listTable(
        ["What ran", "Run time", "How many", "Counted from"],
        (
          [
            ["Sandboxes", "sandbox", "each sandbox's start to its stop (or now)"],
            ["Jobs", "job", "the sandboxes of their attempts, start to stop"],
            ["App instances", "app", "each deployment's creation to its end (or now)"],
          ] as const
        ).map(([what, kind, from]) => [what, cell(formatDuration(runTime.total[kind]), "num"), cell(ran(kind), "num"), cell(from, "wrap")]),
        "run-time-table",
      )}
<p class="muted">Run time is not metered as it runs: it is read from the records of sandboxes (kept 7 days after they end) and deployments when this page is shown, so a 30-day view holds the last 7 days of sandboxes and jobs.${run.partial ? html` <strong>Partial:</strong> only the newest ${MAX_SANDBOX_READS} sandboxes and ${MAX_DEPLOYMENT_READS} deployments were read.` : ""}</p>`;
    } catch (err) {
      body = errorNotice(err);
    }
    const widthPicker = html`<label>Buckets<select name="width">${(Object.keys(WIDTHS) as Width[]).map((v) => html`<option value="${v}" ${v === width ? new Html("selected") : ""}>${WIDTHS[v].choice}</option>`)}</select></label>`;
    kit.sendHtml(ex, 200, page(kit.layoutOf(s, "Usage", "usage"), html`<h1>Usage</h1>${kit.projectPicker(s, "/dashboard/usage", widthPicker)}${body}`));
  }, pub);
}

/** The end of a period of minutes or hours, as the axis names its buckets. */
function timeAxisEnd(end: number): string {
  const iso = new Date(end * 1000).toISOString();
  return `${iso.slice(0, 10)} ${iso.slice(11, 16)} UTC`;
}
