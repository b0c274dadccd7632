import * as Schema from "effect/Schema";
import type { NatsConnection } from "@nats-io/transport-node";
import { getRecord, modifyRecord, pageRecords, removeKey, valueSchema, type ValueSchema } from "../../lib/nats/kv-records.js";
import type { Page, PageQuery } from "../../lib/page.js";
import { tokenUsage, TokenUsageSchema, type TokenUsage } from "../openai/mod.js";
import type { KV } from "@nats-io/kv";
import { RetentionPolicy, type JetStreamClient } from "@nats-io/jetstream";
import { buckets, kvToken, streams, subjects } from "../../lib/nats/subjects.js";
import { ensureStream, jetStreamHandles, openKv, type JetStreamHandles } from "../../lib/nats/jetstream.js";

// Batch records: the OpenAI batch object plus what its coordinator needs to carry the batch
// through its life after any process restarts. One KV entry per batch, keyed by project; every
// change is a compare-and-set on the entry's revision, so two coordinators can never both move a
// batch (the second one's write fails and it re-reads). Its moves are batch-states.ts's.

export type BatchStatus = "validating" | "failed" | "in_progress" | "finalizing" | "completed" | "expired" | "cancelling" | "cancelled";

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
  /** The organization and key that created the batch: its lines' usage and traces name them (absent in records of older builds). */
  organization?: string;
  keyId?: string;
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

const BATCH_STATUSES = ["validating", "failed", "in_progress", "finalizing", "completed", "expired", "cancelling", "cancelled"] as const;
const NullOrTime = Schema.NullOr(Schema.Number);
const Count = Schema.Number;

/** How a batch record is read back (the batch watchers of workers decode it too). */
export const storedBatchSchema: ValueSchema<StoredBatch> = valueSchema<StoredBatch>()(
  Schema.Struct({
    batch: Schema.Struct({
      id: Schema.String,
      object: Schema.Literal("batch"),
      endpoint: Schema.String,
      model: Schema.NullOr(Schema.String),
      errors: Schema.NullOr(
        Schema.Struct({
          object: Schema.Literal("list"),
          data: Schema.mutable(Schema.Array(Schema.Struct({ code: Schema.String, message: Schema.String, param: Schema.NullOr(Schema.String), line: Schema.NullOr(Count) }))),
        }),
      ),
      input_file_id: Schema.String,
      completion_window: Schema.String,
      status: Schema.Literals(BATCH_STATUSES),
      output_file_id: Schema.NullOr(Schema.String),
      error_file_id: Schema.NullOr(Schema.String),
      created_at: Schema.Number,
      in_progress_at: NullOrTime,
      expires_at: Schema.Number,
      finalizing_at: NullOrTime,
      completed_at: NullOrTime,
      failed_at: NullOrTime,
      expired_at: NullOrTime,
      cancelling_at: NullOrTime,
      cancelled_at: NullOrTime,
      request_counts: Schema.Struct({ total: Count, completed: Count, failed: Count }),
      metadata: Schema.NullOr(Schema.Record(Schema.String, Schema.String)),
      usage: TokenUsageSchema,
    }),
    project: Schema.String,
    organization: Schema.optional(Schema.String),
    keyId: Schema.optional(Schema.String),
    outputTtlSeconds: Schema.NullOr(Schema.Number),
    enqueued: Schema.Boolean,
    ending: Schema.NullOr(Schema.Literals(["completed", "expired", "cancelled"])),
  }),
);

/** How a job message of the jobs stream is read back. */
export const batchJobSchema = valueSchema<BatchJob>()(Schema.Struct({ project: Schema.String, batchId: Schema.String }));

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
    if (!validId(id)) return undefined;
    return (await getRecord(this.kv, this.key(project, id), storedBatchSchema))?.value;
  }

  /**
   * Applies `change` with compare-and-set, retrying on concurrent writes. `change` gets a fresh
   * copy it may modify and returns the new record, or undefined to leave the record as it is (the
   * transition no longer applies). Returns the record as stored afterwards.
   */
  async update(project: string, id: string, change: (record: StoredBatch) => StoredBatch | undefined): Promise<StoredBatch | undefined> {
    if (!validId(id)) return undefined;
    return (await modifyRecord(this.kv, this.key(project, id), storedBatchSchema, change))?.value;
  }

  async delete(project: string, id: string): Promise<void> {
    await removeKey(this.kv, this.key(project, id));
  }

  /**
   * A page of a project's batches in `order` of creation (ids sort by it), those past `after`
   * (which need not exist any more), reading only the page's records (pageRecords).
   */
  list(project: string, query: PageQuery): Promise<Page<BatchObject>> {
    return pageRecords(this.kv, kvToken(project), query, async (id) => (await this.get(project, id))?.batch, { idPrefix: "batch_" });
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

const validId = (id: string) => /^batch_[A-Za-z0-9]{1,64}$/.test(id);
