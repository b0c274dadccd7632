import * as Schema from "effect/Schema";
import type { KV } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import { DiscardPolicy, RetentionPolicy, StorageType } from "@nats-io/jetstream";
import { nanos } from "@nats-io/transport-node";
import { ensureStream, jetStreamHandles, openKv } from "../../lib/nats/jetstream.js";
import { getRecord, upsertRecord, valueSchema } from "../../lib/nats/kv-records.js";
import { buckets, kvToken, streams, subjects } from "../../lib/nats/subjects.js";
import { addLatency, usageRowFields, type UsageCounts, type UsageRow } from "./usage-recorder.js";

export type BucketWidth = "1m" | "1h" | "1d";
export const WIDTH_SECONDS: Record<BucketWidth, number> = { "1m": 60, "1h": 3600, "1d": 86_400 };

/** One row of a stored bucket: what one key spent on one model, batch or not. */
export interface StoredUsageRow extends UsageCounts {
  api_key_id: string;
  model: string;
  batch: boolean;
}

/** A bucket of one project: its rows, and the last usage-stream message folded into it. */
export interface UsageBucket {
  /** Stream sequence of the last message added: a message delivered again is not added twice. */
  applied_seq: number;
  rows: StoredUsageRow[];
}

const bucketSchema = valueSchema<UsageBucket>()(
  Schema.Struct({
    applied_seq: Schema.Number,
    rows: Schema.Array(Schema.Struct(usageRowFields)),
  }),
);

const bucketKey = (start: number, projectId: string) => `${start}.${kvToken(projectId)}`;

/**
 * Usage rollups in three KV buckets (minute, hour, day), keyed `<bucket start>.<project>`; the
 * usage stream carries the per-minute rows there. Only the usage folder writes (compare-and-set,
 * one stream message at a time, each bucket remembering the last message it took), so a
 * redelivered message never counts twice.
 */
export class UsageStore {
  private constructor(private readonly kvs: Record<BucketWidth, KV>) {}

  /** `minuteRetentionSeconds`: how long minute buckets are kept (hours and days: 400 days). */
  static async open(nc: NatsConnection, minuteRetentionSeconds: number): Promise<UsageStore> {
    const long = 400 * 86_400 * 1000;
    const [m, h, d] = await Promise.all([
      openKv(nc, buckets.usageMinute, { history: 1, ttl: minuteRetentionSeconds * 1000 }),
      openKv(nc, buckets.usageHour, { history: 1, ttl: long }),
      openKv(nc, buckets.usageDay, { history: 1, ttl: long }),
    ]);
    return new UsageStore({ "1m": m, "1h": h, "1d": d });
  }

  /** The usage stream (a work queue the folders drain). Opened by whoever publishes or folds. */
  static async openStream(nc: NatsConnection): Promise<void> {
    const { jsm } = await jetStreamHandles(nc);
    await ensureStream(jsm, {
      name: streams.usage,
      subjects: [subjects.usageRollupAll],
      retention: RetentionPolicy.Workqueue,
      storage: StorageType.File,
      discard: DiscardPolicy.Old,
      // Unfolded rollups older than a week are of no use to anyone.
      max_age: nanos(7 * 86_400 * 1000),
      duplicate_window: nanos(120_000),
    });
  }

  /** Adds the rows of stream message `seq` to every bucket they fall in. */
  async fold(rows: readonly UsageRow[], seq: number): Promise<void> {
    const groups = new Map<string, { width: BucketWidth; start: number; projectId: string; rows: UsageRow[] }>();
    for (const row of rows)
      for (const width of Object.keys(WIDTH_SECONDS) as BucketWidth[]) {
        const start = Math.floor(row.minute / WIDTH_SECONDS[width]) * WIDTH_SECONDS[width];
        const id = `${width}.${bucketKey(start, row.project_id)}`;
        let g = groups.get(id);
        if (!g) groups.set(id, (g = { width, start, projectId: row.project_id, rows: [] }));
        g.rows.push(row);
      }
    await Promise.all([...groups.values()].map((g) =>
      upsertRecord(this.kvs[g.width], bucketKey(g.start, g.projectId), bucketSchema, (current) => {
        if (current && current.applied_seq >= seq) return undefined; // taken already
        const merged = current ? current.rows.map((r) => ({ ...r, ...(r.ttft_ms ? { ttft_ms: [...r.ttft_ms] } : {}), ...(r.latency_ms ? { latency_ms: [...r.latency_ms] } : {}) })) : [];
        for (const row of g.rows) {
          let into = merged.find((r) => r.api_key_id === row.api_key_id && r.model === row.model && r.batch === row.batch);
          if (!into) merged.push((into = { api_key_id: row.api_key_id, model: row.model, batch: row.batch, requests: 0, input_tokens: 0, input_cached_tokens: 0, output_tokens: 0, errors: 0 }));
          into.requests += row.requests;
          into.input_tokens += row.input_tokens;
          into.input_cached_tokens += row.input_cached_tokens;
          into.output_tokens += row.output_tokens;
          into.errors += row.errors;
          addLatency(into, row);
        }
        return { applied_seq: seq, rows: merged };
      }),
    ));
  }

  /** The rows of one project's bucket (empty when nothing was used). */
  async read(width: BucketWidth, start: number, projectId: string): Promise<StoredUsageRow[]> {
    return (await getRecord(this.kvs[width], bucketKey(start, projectId), bucketSchema))?.value.rows ?? [];
  }
}
