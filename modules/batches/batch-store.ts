import type { NatsConnection } from "@nats-io/transport-node";
import { isRevisionConflict } from "../../lib/nats/kv-records.js";
import { tokenUsage, type TokenUsage } from "../openai/mod.js";
import type { KV } from "@nats-io/kv";
import { RetentionPolicy, type JetStreamClient } from "@nats-io/jetstream";
import { buckets, kvToken, streams, subjects } from "../../lib/nats/subjects.js";
import { ensureStream, jetStreamHandles, listKeys, openKv, type JetStreamHandles } from "../../lib/nats/jetstream.js";

// Batch records: the OpenAI batch object plus what its coordinator needs to carry the batch
// through its life after any process restarts. One KV entry per batch, keyed by project; every
// change is a compare-and-set on the entry's revision, so two coordinators can never both move a
// batch (the second one's write fails and it re-reads).

export type BatchStatus = "validating" | "failed" | "in_progress" | "finalizing" | "completed" | "expired" | "cancelling" | "cancelled";
export const FINAL_STATUSES: readonly BatchStatus[] = ["failed", "completed", "expired", "cancelled"];

export interface BatchError {
  code: string;
  message: string;
  param: string | null;
  line: number | null;
}

export type BatchUsage = TokenUsage;

/** The OpenAI batch object, every key present. */
export interface BatchObject {
  id: string;
  object: "batch";
  endpoint: string;
  model: string | null;
  errors: { object: "list"; data: BatchError[] } | null;
  input_file_id: string;
  completion_window: string;
  status: BatchStatus;
  output_file_id: string | null;
  error_file_id: string | null;
  created_at: number;
  in_progress_at: number | null;
  expires_at: number;
  finalizing_at: number | null;
  completed_at: number | null;
  failed_at: number | null;
  expired_at: number | null;
  cancelling_at: number | null;
  cancelled_at: number | null;
  request_counts: { total: number; completed: number; failed: number };
  metadata: Record<string, string> | null;
  usage: BatchUsage;
}

export interface StoredBatch {
  batch: BatchObject;
  project: string;
  /** Seconds after their creation at which output and error files expire; null: never. */
  outputTtlSeconds: number | null;
  /** Every line has been published to the work stream (or resolved at once). */
  enqueued: boolean;
  /** While finalizing: the final status that follows. */
  ending: "completed" | "expired" | "cancelled" | null;
}

/** The message on the jobs stream that a coordinator holds while it owns a batch. */
export interface BatchJob {
  project: string;
  batchId: string;
}

export const emptyUsage = (): BatchUsage => tokenUsage(0, 0);

export class ConflictError extends Error {
  override name = "ConflictError";
}

export class BatchStore {
  private constructor(
    readonly kv: KV,
    readonly handles: JetStreamHandles,
  ) {}

  static async open(nc: NatsConnection): Promise<BatchStore> {
    const [kv, handles] = await Promise.all([openKv(nc, buckets.batches, { history: 1 }), jetStreamHandles(nc)]);
    await ensureBatchStreams(handles);
    return new BatchStore(kv, handles);
  }

  get js(): JetStreamClient {
    return this.handles.js;
  }

  /** Records a new batch and hands it to the coordinators. */
  async create(record: StoredBatch): Promise<void> {
    await this.kv.create(this.key(record.project, record.batch.id), JSON.stringify(record));
    const job: BatchJob = { project: record.project, batchId: record.batch.id };
    // The message id makes a retried publish (a lost ack) a no-op within the dedupe window.
    await this.handles.js.publish(subjects.batchJob, JSON.stringify(job), { msgID: `job-${record.batch.id}` });
  }

  async get(project: string, id: string): Promise<StoredBatch | undefined> {
    return (await this.getEntry(project, id))?.record;
  }

  async getEntry(project: string, id: string): Promise<{ record: StoredBatch; revision: number } | undefined> {
    if (!/^batch_[A-Za-z0-9]{1,64}$/.test(id)) return undefined;
    const entry = await this.kv.get(this.key(project, id));
    if (!entry || entry.operation !== "PUT") return undefined;
    return { record: entry.json<StoredBatch>(), revision: entry.revision };
  }

  /**
   * Applies `change` with compare-and-set, retrying on concurrent writes. `change` returns the
   * new record, or undefined to leave the record as it is (the transition no longer applies).
   */
  async update(project: string, id: string, change: (record: StoredBatch) => StoredBatch | undefined): Promise<StoredBatch | undefined> {
    for (let attempt = 0; attempt < 20; attempt++) {
      const current = await this.getEntry(project, id);
      if (!current) return undefined;
      const next = change(structuredClone(current.record));
      if (!next) return current.record;
      try {
        await this.kv.update(this.key(project, id), JSON.stringify(next), current.revision);
        return next;
      } catch (err) {
        if (!isRevisionConflict(err)) throw err;
      }
    }
    throw new ConflictError(`batch ${id} is being changed concurrently`);
  }

  async delete(project: string, id: string): Promise<void> {
    await this.kv.purge(this.key(project, id));
  }

  /** A project's batches, newest first (ids sort by creation time). */
  async list(project: string, limit: number, after: string | undefined): Promise<{ data: BatchObject[]; has_more: boolean }> {
    const ids = await listKeys(this.kv, `${kvToken(project)}.>`, kvToken(project) + ".");
    ids.sort().reverse();
    const start = after ? ids.findIndex((id) => id < after) : 0;
    const data: BatchObject[] = [];
    for (let i = start < 0 ? ids.length : start; i < ids.length; i++) {
      const record = await this.get(project, ids[i]!);
      if (!record) continue;
      if (data.length === limit) return { data, has_more: true };
      data.push(record.batch);
    }
    return { data, has_more: false };
  }

  private key(project: string, id: string): string {
    return `${kvToken(project)}.${id}`;
  }
}

/** The streams batches run on: jobs (one message per live batch) and work (one per waiting line). */
export async function ensureBatchStreams(handles: JetStreamHandles): Promise<void> {
  await ensureStream(handles.jsm, {
    name: streams.batchJobs,
    subjects: [subjects.batchJob],
    retention: RetentionPolicy.Workqueue,
  });
  await ensureStream(handles.jsm, {
    name: streams.batchWork,
    subjects: [subjects.batchWorkAll],
    retention: RetentionPolicy.Workqueue,
  });
}

export async function openBatchResults(nc: NatsConnection): Promise<KV> {
  return openKv(nc, buckets.batchResults, { history: 1 });
}

/** KV subject filter of one batch's line results. */
export const resultsFilter = (batchId: string) => `$KV.${buckets.batchResults}.${batchId}.>`;
export const resultsStream = `KV_${buckets.batchResults}`;

/** Drops a batch's waiting lines and stored line results (after finalisation, or on delete). */
export async function purgeBatchLeftovers(handles: JetStreamHandles, batchId: string): Promise<void> {
  await handles.jsm.streams.purge(streams.batchWork, { filter: subjects.batchWorkOfBatch(batchId) }).catch(() => {});
  await handles.jsm.streams.purge(resultsStream, { filter: resultsFilter(batchId) }).catch(() => {});
}
