import * as Schema from "effect/Schema";
import type { JetStreamClient } from "@nats-io/jetstream";
import type { Logger } from "../../lib/log.js";
import { subjects } from "../../lib/nats/subjects.js";
import { valueSchema } from "../../lib/nats/kv-records.js";
import { LATENCY_BUCKETS, mergeLatency, observeLatency, type LatencyHistogram } from "./latency-histogram.js";

// Every inference request counts once, in memory, in the minute it ended: one row per minute,
// project, key, model and batch-or-not. A timer publishes the rows to the usage stream; the usage
// folder (actor host) adds them into the minute, hour and day buckets. So a request costs a map
// update, and the stream sees one message per process per flush, however many requests ran.

export interface UsageCounts {
  requests: number;
  input_tokens: number;
  input_cached_tokens: number;
  output_tokens: number;
  errors: number;
  /** Time to first token of the requests that had one: counts per fixed bucket (latency-histogram.ts). */
  ttft_ms?: LatencyHistogram;
  /** End-to-end time of every request, in the same buckets. */
  latency_ms?: LatencyHistogram;
}

export interface UsageRow extends UsageCounts {
  /** Unix seconds of the minute's start. */
  minute: number;
  project_id: string;
  api_key_id: string;
  model: string;
  batch: boolean;
}

/** One message on the usage stream. */
export interface UsageMessage {
  source: string;
  rows: UsageRow[];
}

const Num = Schema.Number;
/** The fields of a usage row both on the stream and in the buckets: its key and its counts. */
export const usageRowFields = {
  api_key_id: Schema.String,
  model: Schema.String,
  batch: Schema.Boolean,
  requests: Num,
  input_tokens: Num,
  input_cached_tokens: Num,
  output_tokens: Num,
  errors: Num,
  // Absent in rows from before latency was kept.
  ttft_ms: Schema.optionalKey(Schema.Array(Num).check(Schema.isMaxLength(LATENCY_BUCKETS))),
  latency_ms: Schema.optionalKey(Schema.Array(Num).check(Schema.isMaxLength(LATENCY_BUCKETS))),
};
export const usageMessageSchema = valueSchema<UsageMessage>()(
  Schema.Struct({
    source: Schema.String,
    rows: Schema.Array(Schema.Struct({ minute: Num, project_id: Schema.String, ...usageRowFields })),
  }),
);

export interface UsageEvent {
  /** Unix ms when the request ended. */
  at: number;
  projectId: string;
  keyId: string;
  model: string;
  batch: boolean;
  inputTokens: number;
  cachedInputTokens: number;
  outputTokens: number;
  error: boolean;
  /** Time to the first token (ms), when there was one. */
  ttftMs: number | null;
  /** From receiving the request to its end (ms); null when unknown. */
  latencyMs: number | null;
}

/** Rows per stream message: a message stays far below NATS's payload limit. */
const ROWS_PER_MESSAGE = 500;

export class UsageRecorder {
  private rows = new Map<string, UsageRow>();
  private timer: NodeJS.Timeout | undefined;
  private flushing: Promise<void> | undefined;
  private sequence = 0;
  /** Counts lost: more distinct rows than maxRows waiting, or a stream that kept refusing them. */
  droppedRows = 0;

  constructor(
    private readonly js: JetStreamClient,
    /** This process (a gateway or actor host id): the subject, and with a counter the messages' dedupe ids. */
    private readonly sourceId: string,
    private readonly options: { flushMs: number; maxRows: number },
    private readonly log: Logger,
  ) {}

  start(): void {
    this.timer = setInterval(() => void this.flush(), this.options.flushMs);
    this.timer.unref();
  }

  add(e: UsageEvent): void {
    const minute = Math.floor(e.at / 60_000) * 60;
    const key = `${minute}\u0000${e.projectId}\u0000${e.keyId}\u0000${e.model}\u0000${e.batch ? 1 : 0}`;
    let row = this.rows.get(key);
    if (!row) {
      if (this.rows.size >= this.options.maxRows) {
        this.droppedRows++;
        return;
      }
      row = { minute, project_id: e.projectId, api_key_id: e.keyId, model: e.model, batch: e.batch, requests: 0, input_tokens: 0, input_cached_tokens: 0, output_tokens: 0, errors: 0 };
      this.rows.set(key, row);
    }
    row.requests++;
    row.input_tokens += e.inputTokens;
    row.input_cached_tokens += e.cachedInputTokens;
    row.output_tokens += e.outputTokens;
    if (e.error) row.errors++;
    if (e.ttftMs !== null) observeLatency((row.ttft_ms ??= []), e.ttftMs);
    if (e.latencyMs !== null) observeLatency((row.latency_ms ??= []), e.latencyMs);
  }

  flush(): Promise<void> {
    if (this.flushing) return this.flushing;
    if (this.rows.size === 0) return Promise.resolve();
    this.flushing = this.publish().finally(() => (this.flushing = undefined));
    return this.flushing;
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.flush();
  }

  private async publish(): Promise<void> {
    const rows = [...this.rows.values()];
    this.rows = new Map();
    for (let i = 0; i < rows.length; i += ROWS_PER_MESSAGE) {
      const chunk = rows.slice(i, i + ROWS_PER_MESSAGE);
      const message: UsageMessage = { source: this.sourceId, rows: chunk };
      const msgID = `${this.sourceId}.${++this.sequence}`;
      try {
        // The id makes a retried publish count once (the stream's duplicate window).
        await this.js.publish(subjects.usageRollup(this.sourceId), JSON.stringify(message), { msgID, timeout: 5_000 });
      } catch (err) {
        // Put the counts back for the next flush; beyond the bound they are lost (and counted).
        for (const row of chunk) this.putBack(row);
        this.log.warn("usage rollup not published; retried at the next flush", { rows: chunk.length, err });
      }
    }
  }

  private putBack(row: UsageRow): void {
    const key = `${row.minute}\u0000${row.project_id}\u0000${row.api_key_id}\u0000${row.model}\u0000${row.batch ? 1 : 0}`;
    const current = this.rows.get(key);
    if (!current) {
      if (this.rows.size >= this.options.maxRows) return void this.droppedRows++;
      this.rows.set(key, row);
      return;
    }
    current.requests += row.requests;
    current.input_tokens += row.input_tokens;
    current.input_cached_tokens += row.input_cached_tokens;
    current.output_tokens += row.output_tokens;
    current.errors += row.errors;
    addLatency(current, row);
  }
}

/** Adds the latency histograms of `from` into `into`. */
export function addLatency(into: UsageCounts, from: UsageCounts): void {
  if (from.ttft_ms?.length) mergeLatency((into.ttft_ms ??= []), from.ttft_ms);
  if (from.latency_ms?.length) mergeLatency((into.latency_ms ??= []), from.latency_ms);
}
