import { MetricsRegistry, LATENCY_BUCKETS, type Counter, type Histogram } from "../../lib/metrics.js";
import type { RunnerDirectory } from "../../modules/inference/mod.js";
import type { TraceWriter } from "../../modules/traces/mod.js";
import type { UsageRecorder } from "../../modules/usage/mod.js";

/** Inter-token gaps are short: 1 ms to 2.5 s. */
const GAP_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2.5];
/** Token counts per request. */
const TOKEN_BUCKETS = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536];

/**
 * The gateway's Prometheus metrics. Labels are bounded: routes are the router's patterns,
 * models come from the catalog (a request for an unknown model is labelled "unknown"), statuses
 * are HTTP codes or the four trace statuses.
 */
export class GatewayMetrics {
  readonly registry = new MetricsRegistry();
  readonly httpRequests: Counter;
  readonly generations: Counter;
  readonly rateLimited: Counter;
  readonly tokens: Counter;
  readonly ttft: Histogram;
  readonly interToken: Histogram;
  readonly duration: Histogram;
  readonly queueWait: Histogram;
  readonly outputTokens: Histogram;

  constructor(sources: { inFlight: () => number; activeStreams: () => number; heldConnections: () => number; ssePendingBytes: () => number; runners: RunnerDirectory; models: readonly string[]; traces: TraceWriter; usage: UsageRecorder }) {
    const r = this.registry;
    this.httpRequests = r.counter("tributary_http_requests_total", "HTTP requests answered, by route pattern, method and status code", ["route", "method", "status"]);
    this.generations = r.counter("tributary_generation_requests_total", "inference requests (chat completions, responses, templates) by how they ended", ["model", "endpoint", "status"]);
    this.rateLimited = r.counter("tributary_rate_limit_rejections_total", "requests refused by a model's rate limits (429)", ["model"]);
    this.tokens = r.counter("tributary_tokens_total", "tokens of inference requests, input (prompt) and output", ["model", "kind"]);
    this.ttft = r.histogram("tributary_time_to_first_token_seconds", "time from the request's arrival to its first generated token", ["model"], LATENCY_BUCKETS);
    this.interToken = r.histogram("tributary_inter_token_latency_seconds", "mean gap between output tokens of a request (one observation per request)", ["model"], GAP_BUCKETS);
    this.duration = r.histogram("tributary_request_duration_seconds", "end-to-end time of an inference request, arrival to last byte", ["model", "endpoint"], LATENCY_BUCKETS);
    this.queueWait = r.histogram("tributary_queue_wait_seconds", "time a request waited in its runner's queue for a slot", ["model"], LATENCY_BUCKETS);
    this.outputTokens = r.histogram("tributary_output_tokens_per_request", "output tokens per inference request", ["model"], TOKEN_BUCKETS);
    r.collected("tributary_requests_in_flight", "HTTP requests in progress (streams included)", "gauge", [], () => [{ labels: {}, value: sources.inFlight() }]);
    r.collected("tributary_active_streams", "SSE streams open", "gauge", [], () => [{ labels: {}, value: sources.activeStreams() }]);
    r.collected("tributary_held_connections", "connections answered while their request body still arrived, held unread until closed (counted for 13 s: an upper bound)", "gauge", [], () => [{ labels: {}, value: sources.heldConnections() }]);
    r.collected("tributary_sse_pending_bytes", "bytes written to SSE streams that their clients have not taken yet", "gauge", [], () => [{ labels: {}, value: sources.ssePendingBytes() }]);
    r.collected("tributary_runners", "runners this gateway knows from heartbeats, by model and state", "gauge", ["model", "state"], () => {
      const out: Array<{ labels: Record<string, string>; value: number }> = [];
      for (const model of sources.models) {
        const counts = new Map<string, number>();
        for (const v of sources.runners.all(model)) counts.set(String(v.state), (counts.get(String(v.state)) ?? 0) + 1);
        for (const [state, value] of counts) out.push({ labels: { model, state: stateName(state) }, value });
      }
      return out;
    });
    r.collected("tributary_runner_queue_depth", "requests waiting in runner queues, summed over a model's runners (from heartbeats)", "gauge", ["model"], () =>
      sources.models.map((model) => ({ labels: { model }, value: sources.runners.all(model).reduce((n, v) => n + v.queueLength, 0) })));
    r.collected("tributary_runner_slots_busy", "decoding slots in use, summed over a model's runners (from heartbeats)", "gauge", ["model"], () =>
      sources.models.map((model) => ({ labels: { model }, value: sources.runners.all(model).reduce((n, v) => n + v.slotsBusy, 0) })));
    r.collected("tributary_traces_dropped_total", "traces dropped: the writer's buffer was full or the trace stream refused them", "counter", [], () => [{ labels: {}, value: sources.traces.dropped }]);
    r.collected("tributary_traces_written_total", "traces stored in the trace stream", "counter", [], () => [{ labels: {}, value: sources.traces.written }]);
    r.collected("tributary_trace_buffer", "traces waiting to be written", "gauge", [], () => [{ labels: {}, value: sources.traces.buffered }]);
    r.collected("tributary_usage_rows_dropped_total", "usage rollup rows lost (too many distinct rows waiting)", "counter", [], () => [{ labels: {}, value: sources.usage.droppedRows }]);
  }
}

const STATES: Record<string, string> = { "0": "loading", "1": "ready", "2": "draining", "3": "failed" };
const stateName = (s: string) => STATES[s] ?? s;
