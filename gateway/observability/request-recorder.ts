import { buildTrace, statusOf, type TraceWriter } from "../../modules/traces/mod.js";
import type { UsageRecorder } from "../../modules/usage/mod.js";
import type { HttpExchange } from "../http/exchange.js";
import type { GatewayMetrics } from "./gateway-metrics.js";

/**
 * What the gateway does with a request once it is over, off its path (the response is out):
 * HTTP metrics for every request; for an inference request its generation metrics, its usage
 * row and, with `log: true`, its trace (handed to the writer's buffer, never awaited).
 */
export class RequestRecorder {
  constructor(
    private readonly deps: {
      metrics: GatewayMetrics;
      usage: UsageRecorder;
      traces: TraceWriter;
      models: ReadonlySet<string>;
      maxTraceBodyBytes: number;
    },
  ) {}

  finished(ex: HttpExchange): void {
    const { metrics } = this.deps;
    const status = ex.aborted && ex.statusCode === 0 ? "aborted" : String(ex.statusCode || 0);
    metrics.httpRequests.inc({ route: ex.route || "unmatched", method: ex.method, status });
    const obs = ex.observation;
    const principal = ex.principal;
    if (!obs || !principal || !obs.model) return;
    obs.end();
    const model = this.deps.models.has(obs.model) ? obs.model : "unknown";
    const clientLeft = ex.aborted;
    const outcome = statusOf(obs, clientLeft);
    metrics.generations.inc({ model, endpoint: obs.endpoint, status: outcome });
    if (obs.error?._tag === "RateLimited") metrics.rateLimited.inc({ model });
    // Requests refused before a runner saw them (bad model, bad body, rate limit) used nothing.
    if (obs.runnerAdmittedMs === undefined && obs.error) {
      if (model !== "unknown") this.countUsage(ex, obs, model, true, false);
      if (obs.log) this.trace(ex, clientLeft);
      return;
    }
    const usage = obs.effectiveUsage();
    metrics.tokens.inc({ model, kind: "input" }, usage.inputTokens);
    metrics.tokens.inc({ model, kind: "output" }, usage.outputTokens);
    metrics.outputTokens.observe({ model }, usage.outputTokens);
    metrics.duration.observe({ model, endpoint: obs.endpoint }, obs.endMs! / 1000);
    if (obs.firstTokenMs !== undefined) {
      metrics.ttft.observe({ model }, obs.firstTokenMs / 1000);
      if (usage.outputTokens > 1) metrics.interToken.observe({ model }, (obs.endMs! - obs.firstTokenMs) / 1000 / (usage.outputTokens - 1));
    }
    if (obs.queueWaitMs !== undefined) metrics.queueWait.observe({ model }, obs.queueWaitMs / 1000);
    this.countUsage(ex, obs, model, outcome === "error", true);
    if (obs.log) this.trace(ex, clientLeft);
  }

  /** `timed`: a runner took the request, so its latency counts (a refusal's would only pull the percentiles down). */
  private countUsage(ex: HttpExchange, obs: NonNullable<HttpExchange["observation"]>, model: string, error: boolean, timed: boolean): void {
    const usage = obs.effectiveUsage();
    this.deps.usage.add({
      at: obs.receivedAt + (obs.endMs ?? 0),
      projectId: ex.principal!.projectId,
      keyId: ex.principal!.keyId,
      model,
      batch: false,
      inputTokens: usage.inputTokens,
      cachedInputTokens: usage.cachedInputTokens,
      outputTokens: usage.outputTokens,
      error,
      ttftMs: timed ? (obs.firstTokenMs ?? null) : null,
      latencyMs: timed ? (obs.endMs ?? null) : null,
    });
  }

  private trace(ex: HttpExchange, clientLeft: boolean): void {
    this.deps.traces.record(buildTrace(ex.observation!, { principal: ex.principal!, httpStatus: ex.statusCode, clientLeft, maxBodyBytes: this.deps.maxTraceBodyBytes }));
  }
}
