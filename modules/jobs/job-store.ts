import * as Schema from "effect/Schema";
import type { KV } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import { DeliverPolicy, RetentionPolicy, StorageType, type JetStreamClient } from "@nats-io/jetstream";
import { ensureStream, jetStreamHandles, openKv, readStored, type JetStreamHandles } from "../../lib/nats/jetstream.js";
import { createRecord, getRecord, modifyRecord, pageRecords, valueSchema, type Mutable } from "../../lib/nats/kv-records.js";
import type { Page, PageQuery } from "../../lib/page.js";
import { prefixAdmission, type Admission } from "../../lib/nats/admission.js";
import { sortableIdTime } from "../../lib/ids.js";
import { buckets, kvToken, streams, subjects } from "../../lib/nats/subjects.js";
import * as states from "./job-states.js";

// Jobs: a command run to completion in a fresh sandbox, durably. The record (KV) holds the job
// object and what is needed to run it again; the queue (a JetStream work-queue stream) holds one
// message per job until it is final; its output goes to a stream of its own. Its moves are
// job-states.ts's.

export const JOB_STATUSES = ["queued", "running", "cancelling", "succeeded", "failed", "cancelled"] as const;
export type JobStatus = (typeof JOB_STATUSES)[number];
export const JOB_ID = /^job_[0-9A-Za-z]{24}$/;

const JobObjectSchema = Schema.Struct({
  id: Schema.String,
  object: Schema.Literal("job"),
  status: Schema.Literals(JOB_STATUSES),
  command: Schema.mutable(Schema.Array(Schema.String)),
  cwd: Schema.String,
  env_names: Schema.mutable(Schema.Array(Schema.String)),
  secrets: Schema.mutable(Schema.Array(Schema.String)),
  timeout_seconds: Schema.Number,
  max_retries: Schema.Number,
  resources: Schema.Struct({ cpu_mhz: Schema.Number, memory_mb: Schema.Number, disk_mb: Schema.Number }),
  /** The sandbox's network ("none" or "egress"); absent from records written before it existed: none. */
  network: Schema.optionalKey(Schema.Literals(["none", "egress"])),
  metadata: Schema.Record(Schema.String, Schema.String),
  /** Attempts started so far (a host lost mid-run counts as one). */
  attempt: Schema.Number,
  exit_code: Schema.NullOr(Schema.Number),
  error: Schema.NullOr(Schema.Struct({ code: Schema.String, message: Schema.String })),
  sandbox_id: Schema.NullOr(Schema.String),
  /**
   * Why a queued job is not running yet, in words ("every sandbox host is full (memory: 3.9 of 4.0
   * GiB reserved, 1.0 GiB asked)"), from its worker's last try; null once it starts or ends, and
   * before any try. Absent from records written before it existed.
   */
  waiting_reason: Schema.optionalKey(Schema.NullOr(Schema.String)),
  /** Project files mounted read-only at /workspace/input before the command runs. */
  input_files: Schema.mutable(Schema.Array(Schema.String)),
  /** Files the command left in /workspace/output, stored as project files (purpose user_data). */
  output_files: Schema.mutable(Schema.Array(Schema.String)),
  created_at: Schema.Number,
  started_at: Schema.NullOr(Schema.Number),
  finished_at: Schema.NullOr(Schema.Number),
});
export type JobObject = Mutable<typeof JobObjectSchema.Type>;

const StoredJobSchema = Schema.Struct({ job: JobObjectSchema, project: Schema.String, env: Schema.Record(Schema.String, Schema.String) });
export type StoredJob = Mutable<typeof StoredJobSchema.Type>;
const storedJob = valueSchema<StoredJob>()(StoredJobSchema);

export interface JobMessage {
  project: string;
  job_id: string;
}
export const jobMessage = valueSchema<JobMessage>()(Schema.Struct({ project: Schema.String, job_id: Schema.String }));

const LogSchema = Schema.Struct({ attempt: Schema.Number, stream: Schema.Literals(["stdout", "stderr"]), data: Schema.String });
export type JobLogChunk = Mutable<typeof LogSchema.Type>;
export const jobLogChunk = valueSchema<JobLogChunk>()(LogSchema);

/** How long job records are kept after their last write (the bucket's TTL), and what the bound counts. */
const JOB_RECORD_LIFE_MS = 7 * 24 * 3600 * 1000;

export class JobStore {
  private constructor(
    private readonly nc: NatsConnection,
    readonly kv: KV,
    private readonly js: JetStreamClient,
    private readonly handles: JetStreamHandles,
  ) {}

  static async open(nc: NatsConnection): Promise<JobStore> {
    const handles = await jetStreamHandles(nc);
    const jsm = handles.jsm;
    await ensureStream(jsm, { name: streams.jobs, subjects: [subjects.jobQueue], retention: RetentionPolicy.Workqueue, storage: StorageType.File, duplicate_window: 120 * 1_000_000_000 });
    await ensureStream(jsm, { name: streams.jobLogs, subjects: [subjects.jobLogsAll], storage: StorageType.File, max_age: 7 * 24 * 3600 * 1_000_000_000 });
    return new JobStore(nc, await openKv(nc, buckets.jobs, { history: 1, ttl: JOB_RECORD_LIFE_MS }), handles.js, handles);
  }

  private key(project: string, id: string): string {
    return `${kvToken(project)}.${id}`;
  }

  /**
   * The project's job bound: jobs created in the last 7 days (records live 7 days after their
   * last write, so this counts each at most as long as it is kept). Admission goes through a
   * counter record beside the job records (<project>.index.admitted: three tokens, outside the
   * listings of <project>.*), by the hour of creation, so of creates racing for the last place
   * exactly one gets it. A counter made anew (the first create, or after it expired) starts from
   * the records present, dated by their ids.
   */
  private bound(project: string, max: number): Admission {
    return prefixAdmission(this.kv, `${kvToken(project)}.`, max, {
      windowMs: JOB_RECORD_LIFE_MS,
      createdAt: (id) => sortableIdTime(id, "job_") ?? Date.now(),
    });
  }

  /**
   * Stores the job and queues it (the queue message is deduplicated by job id), unless the
   * project holds `maxPerProject` jobs from the last 7 days: then `held` is how many.
   */
  async create(record: StoredJob, maxPerProject: number): Promise<{ created: true } | { created: false; held: number }> {
    const { project, job } = record;
    const result = await this.bound(project, maxPerProject).within(job.id, async () => {
      if ((await createRecord(this.kv, this.key(project, job.id), record)) === undefined) throw new Error(`job ${job.id} exists`);
      await this.js.publish(subjects.jobQueue, JSON.stringify({ project, job_id: job.id } satisfies JobMessage), { msgID: job.id });
    });
    return result.admitted ? { created: true } : { created: false, held: result.held };
  }

  async get(project: string, id: string): Promise<StoredJob | undefined> {
    return (await getRecord(this.kv, this.key(project, id), storedJob))?.value;
  }

  /**
   * Applies `move` (one of job-states.ts, which never moves a final job) with compare-and-set: it
   * returns the next job, or undefined to leave it. Returns the record as stored afterwards.
   */
  async transition(project: string, id: string, move: (job: JobObject) => JobObject | undefined): Promise<StoredJob | undefined> {
    const result = await modifyRecord(this.kv, this.key(project, id), storedJob, (current) => {
      const next = move(current.job);
      return next ? { ...current, job: next } : undefined;
    });
    return result?.value;
  }

  /**
   * Cancels the job (idempotent): a queued job is cancelled at once, a running one turns
   * cancelling and the worker running it is told to stop it. The job as it then is; undefined
   * when the project has no such job.
   */
  async cancel(project: string, id: string): Promise<JobObject | undefined> {
    const updated = await this.transition(project, id, (job) => states.cancel(job, Math.floor(Date.now() / 1000)));
    if (updated?.job.status === "cancelling") this.nc.publish(subjects.jobCancel(id), "");
    return (await this.get(project, id))?.job;
  }

  /**
   * A page of a project's jobs in `order` of creation (ids sort by it), after the job `after`
   * (undefined: it is not among them), reading only what the page needs (pageRecords: recent
   * records newest first; with `status`, at most MAX_SKIPPED_PER_PAGE jobs of other statuses).
   */
  async list(project: string, query: PageQuery & { status?: string }): Promise<Page<JobObject> | undefined> {
    if (query.after !== undefined && !(JOB_ID.test(query.after) && (await this.get(project, query.after)))) return undefined;
    return pageRecords(this.kv, kvToken(project), query, async (id) => {
      const found = await this.get(project, id).catch(() => undefined);
      return found && (query.status === undefined || found.job.status === query.status) ? found.job : undefined;
    }, { idPrefix: "job_" });
  }

  /** The job's output stored so far, in order, read as the caller takes it. */
  async *logs(jobId: string): AsyncGenerator<JobLogChunk> {
    for await (const msg of readStored(this.handles, streams.jobLogs, subjects.jobLogs(jobId)))
      yield jobLogChunk.parseBytes(`${msg.subject} #${msg.seq}`, msg.data);
  }

  /**
   * The end of the job's output: its last chunks, at least `maxBytes` of them when there are that
   * many, and whether earlier output is left out. A page that follows a running job asks for this
   * every few seconds, so it reads back from the newest chunk in widening ranges of the stream
   * (other jobs' output in between is skipped by the server) rather than the whole output.
   */
  async logTail(jobId: string, maxBytes: number): Promise<{ chunks: JobLogChunk[]; truncated: boolean }> {
    const subject = subjects.jobLogs(jobId);
    const newest = await this.handles.jsm.streams.getMessage(streams.jobLogs, { last_by_subj: subject });
    if (!newest) return { chunks: [], truncated: false };
    for (let span = 256; ; span *= 16) {
      const from = Math.max(1, newest.seq - span + 1);
      const chunks: JobLogChunk[] = [];
      for await (const msg of readStored(this.handles, streams.jobLogs, subject, { startSeq: from })) chunks.push(jobLogChunk.parseBytes(`${msg.subject} #${msg.seq}`, msg.data));
      let keep = chunks.length;
      let bytes = 0;
      while (keep > 0 && bytes < maxBytes) bytes += Buffer.byteLength(chunks[--keep]!.data, "base64");
      if (bytes >= maxBytes || from === 1) return { chunks: chunks.slice(keep), truncated: keep > 0 || from > 1 };
    }
  }

  /**
   * The job's output from the start and then live, until `done()` says the job is final and
   * nothing more arrived for a while, or `signal` aborts.
   */
  async followLogs(jobId: string, onChunk: (chunk: JobLogChunk) => void, options: { signal: AbortSignal; done: () => Promise<boolean> }): Promise<void> {
    const consumer = await this.js.consumers.get(streams.jobLogs, { filter_subjects: subjects.jobLogs(jobId), deliver_policy: DeliverPolicy.All });
    const messages = await consumer.consume({ max_messages: 256 });
    const stop = () => void messages.close();
    options.signal.addEventListener("abort", stop, { once: true });
    let lastAt = Date.now();
    let checking = false;
    const timer = setInterval(() => {
      if (checking || Date.now() - lastAt < 500) return;
      checking = true;
      options.done().then(
        (done) => {
          checking = false;
          if (done && Date.now() - lastAt >= 500) stop();
        },
        () => stop(),
      );
    }, 250);
    try {
      for await (const msg of messages) {
        lastAt = Date.now();
        onChunk(jobLogChunk.parseBytes(`${msg.subject} #${msg.seq}`, msg.data));
      }
    } finally {
      clearInterval(timer);
      options.signal.removeEventListener("abort", stop);
    }
  }
}
