import type { MetricsRegistry, Counter, Histogram } from "../../lib/metrics.js";
import type { LineOutcome, WorkItem } from "../../modules/batches/mod.js";
import { openAIError, type ResultLine } from "../../modules/openai/mod.js";
import { buildTrace, RequestObservation, type TraceEndpoint, type TraceWriter } from "../../modules/traces/mod.js";
import type { UsageRecorder } from "../../modules/usage/mod.js";
import type { LineObserver } from "../batches/batch-worker.js";

/** Token counts of a line's response body: chat completions (prompt/completion) and responses (input/output). */
function usageOfBody(body: unknown): { input: number; cached: number; output: number } {
  const u = (body as { usage?: Record<string, unknown> } | null)?.usage;
  if (!u || typeof u !== "object") return { input: 0, cached: 0, output: 0 };
  const n = (v: unknown) => (typeof v === "number" && Number.isFinite(v) ? v : 0);
  const details = (u.prompt_tokens_details ?? u.input_tokens_details) as Record<string, unknown> | undefined;
  return { input: n(u.prompt_tokens ?? u.input_tokens), cached: n(details?.cached_tokens), output: n(u.completion_tokens ?? u.output_tokens) };
}

/**
 * The actor host's view of finished batch lines: each counts in the usage rollups as batch
 * usage, in the line metrics, and, when its body says `log: true`, as a trace.
 */
export class BatchLineObserver implements LineObserver {
  private readonly lines: Counter;
  private readonly duration: Histogram;

  constructor(private readonly deps: { usage: UsageRecorder; traces: TraceWriter; metrics: MetricsRegistry; maxTraceBodyBytes: number }) {
    this.lines = deps.metrics.counter("tributary_batch_lines_total", "batch lines that ran to a result, by state (completed or failed)", ["model", "state"]);
    this.duration = deps.metrics.histogram("tributary_batch_line_duration_seconds", "time one batch line took to run", ["model"]);
  }

  lineFinished(item: WorkItem, requestId: string, startedAt: { unixMs: number; perf: number }, outcome: LineOutcome, result: ResultLine): void {
    const body = (item.body ?? {}) as { model?: unknown; log?: unknown; stream?: unknown };
    const model = typeof body.model === "string" ? body.model.slice(0, 256) : "";
    const failed = outcome.kind !== "succeeded";
    this.lines.inc({ model, state: failed ? "failed" : "completed" });
    this.duration.observe({ model }, (performance.now() - startedAt.perf) / 1000);
    const tokens = outcome.kind === "succeeded" ? usageOfBody(outcome.body) : { input: 0, cached: 0, output: 0 };
    this.deps.usage.add({
      at: Date.now(),
      projectId: item.project,
      keyId: item.keyId ?? "",
      model,
      batch: true,
      inputTokens: tokens.input,
      cachedInputTokens: tokens.cached,
      outputTokens: tokens.output,
      error: failed,
      // A batch line is run unstreamed: it has no first token of its own.
      ttftMs: null,
      latencyMs: performance.now() - startedAt.perf,
    });
    if (body.log !== true) return;
    const obs = new RequestObservation(item.endpoint as TraceEndpoint, requestId, startedAt.unixMs, startedAt.perf);
    obs.model = model;
    obs.batch = true;
    obs.log = true;
    obs.requestBody = JSON.stringify(item.body);
    obs.usage = { inputTokens: tokens.input, cachedInputTokens: tokens.cached, outputTokens: tokens.output };
    if (outcome.kind === "succeeded") obs.responseBody = outcome.body;
    else obs.fail(outcome.error);
    const httpStatus = result.response?.status_code ?? (outcome.kind === "succeeded" ? 0 : openAIError(outcome.error, requestId).status);
    this.deps.traces.record(
      buildTrace(obs, { principal: { organizationId: item.organization ?? "", projectId: item.project, keyId: item.keyId ?? "" }, httpStatus, clientLeft: false, maxBodyBytes: this.deps.maxTraceBodyBytes }),
    );
  }
}
