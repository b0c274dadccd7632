import type { KV } from "@nats-io/kv";
import { nanos } from "@nats-io/transport-node";
import type { JsMsg } from "@nats-io/jetstream";
import type { ModelSpec } from "../../modules/catalog/mod.js";
import { BatchStore, batchJobSchema, batchStates as states, openBatchResults, purgeBatchLeftovers, resultsFilter, resultsStream, type BatchError, type BatchJob, type StoredBatch, LINE_EXECUTORS, ResultTally, storeResult, InputValidator, validLines, type WorkLine } from "../../modules/batches/mod.js";
import { FileStore, type FileObject } from "../../modules/files/mod.js";
import { ensureDurableConsumer, readStored } from "../../lib/nats/jetstream.js";
import { InvalidValue } from "../../lib/nats/kv-records.js";
import { consumers, streams, subjects } from "../../lib/nats/subjects.js";
import type { Actor, ActorContext } from "../../modules/actor-runtime/mod.js";
import type { WorkItem } from "../../modules/batches/mod.js";
import { notRunLine, storedValues, type ResultLine } from "../../modules/openai/mod.js";

export interface BatchCoordinatorOptions {
  catalog: ReadonlyMap<string, ModelSpec>;
  maxBatchRequests: number;
  maxBatchFileBytes: number;
  /** A job held by a coordinator that stopped answering is handed to another after this long. */
  ackWaitMs: number;
  /** How often a running batch's counters are refreshed in its record. */
  progressMs?: number;
}

const now = () => Math.floor(Date.now() / 1000);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const encoder = new TextEncoder();

/**
 * Owns batches through their life (batch-states.ts: validating -> in_progress -> finalizing ->
 * completed, or failed, expired, cancelling -> cancelled), doing the I/O of each move.
 *
 * Ownership: each live batch is one message on the jobs work-queue stream. The coordinator that
 * holds the message (unacked, kept alive with in-progress acks) owns the batch; when its process
 * dies, JetStream hands the message to another coordinator after the ack wait, which resumes from
 * the batch record. Every state change is a compare-and-set on that record, so even a coordinator
 * that stalled past its ack wait cannot move a batch twice.
 *
 * Work: validated lines go to the work stream (one message per line), which batch workers consume
 * with explicit acks; each finished line lands create-only in the results bucket, so a line run
 * twice is output once. Counters and the output and error files are derived from those results.
 */
export class BatchCoordinator implements Actor {
  readonly name = "batch-coordinator";
  private ctx!: ActorContext;
  private batches!: BatchStore;
  private files!: FileStore;
  private results!: KV;
  private stopped = false;
  private readonly owned = new Map<string, AbortController>();
  private loop: Promise<void> | undefined;

  constructor(private readonly options: BatchCoordinatorOptions) {}

  async start(ctx: ActorContext): Promise<void> {
    this.ctx = ctx;
    [this.batches, this.files, this.results] = await Promise.all([BatchStore.open(ctx.nc), FileStore.open(ctx.nc), openBatchResults(ctx.nc)]);
    await ensureDurableConsumer(this.batches.handles.jsm, streams.batchJobs, {
      durable_name: consumers.batchCoordinators,
      ack_wait: nanos(this.options.ackWaitMs),
      max_deliver: -1,
    });
    this.loop = this.takeJobs().catch((err: unknown) => {
      if (!this.stopped) ctx.fail(err);
    });
  }

  async stop(): Promise<void> {
    this.stopped = true;
    for (const c of this.owned.values()) c.abort();
    await this.loop;
  }

  private async takeJobs(): Promise<void> {
    const consumer = await this.batches.js.consumers.get(streams.batchJobs, consumers.batchCoordinators);
    while (!this.stopped) {
      const messages = await consumer.fetch({ max_messages: 16, expires: 2_000 });
      for await (const m of messages) void this.own(m);
    }
  }

  /** Holds a batch's job message while driving the batch; acks it once the batch is final. */
  private async own(m: JsMsg): Promise<void> {
    let job: BatchJob;
    try {
      job = batchJobSchema.parseBytes(`${m.subject} #${m.seq}`, m.data);
    } catch (err) {
      this.ctx.log.error("malformed batch job dropped", { err });
      m.term("malformed batch job");
      return;
    }
    if (this.owned.has(job.batchId)) return; // a redelivery of a job this coordinator is driving
    const control = new AbortController();
    this.owned.set(job.batchId, control);
    const keepAlive = setInterval(() => m.working(), Math.max(200, this.options.ackWaitMs / 3));
    const log = this.ctx.log.child({ batchId: job.batchId });
    try {
      if (await this.drive(job, control.signal)) m.ack();
      else m.nak(); // stopping: another coordinator takes it at once
    } catch (err) {
      if (err instanceof InvalidValue) {
        // Its record does not decode: no later delivery will read it better.
        log.error("batch dropped: its record does not decode", { err });
        m.term("batch record does not decode");
        return;
      }
      log.error("batch coordination failed; retrying", { err });
      m.nak(2_000);
    } finally {
      clearInterval(keepAlive);
      this.owned.delete(job.batchId);
    }
  }

  /** Moves the batch until it is final (true) or this coordinator stops (false). */
  private async drive(job: BatchJob, signal: AbortSignal): Promise<boolean> {
    for (;;) {
      if (signal.aborted) return false;
      const record = await this.batches.get(job.project, job.batchId);
      if (!record) return true; // deleted
      const next = states.duty(record);
      switch (next.kind) {
        case "validate":
          await this.validate(record);
          break;
        case "enqueue":
          await this.enqueue(record);
          break;
        case "watch":
          await this.watch(record, signal);
          break;
        case "finalize":
          await this.finalize(record, next.ending);
          break;
        case "done":
          await purgeBatchLeftovers(this.batches.handles, record.batch.id);
          return true;
      }
    }
  }

  /** Applies one move of batch-states.ts with compare-and-set; the record as stored afterwards. */
  private move(record: StoredBatch, step: (current: StoredBatch) => StoredBatch | undefined): Promise<StoredBatch | undefined> {
    return this.batches.update(record.project, record.batch.id, step);
  }

  /** Streams the input file once, line by line; on success the batch goes in_progress. */
  private async validate(record: StoredBatch): Promise<void> {
    const started = performance.now();
    const { batch } = record;
    const problems = await this.checkInput(record);
    if (problems) {
      await this.move(record, (r) => states.reject(r, problems, now()));
      this.ctx.log.info("batch failed validation", { batchId: batch.id, errors: problems.length });
      return;
    }
    this.ctx.log.info("batch validated", { batchId: batch.id, ms: Math.round(performance.now() - started) });
  }

  /** Returns the validation errors, or undefined after moving the batch to in_progress. */
  private async checkInput(record: StoredBatch): Promise<BatchError[] | undefined> {
    const { batch } = record;
    const executor = LINE_EXECUTORS.get(batch.endpoint);
    if (!executor) return [{ code: "invalid_request", message: `The endpoint ${batch.endpoint} is not supported in batches.`, param: "endpoint", line: null }];
    const file = await this.files.get(record.project, batch.input_file_id);
    if (!file) return [{ code: "file_not_found", message: `The input file ${batch.input_file_id} no longer exists.`, param: "input_file_id", line: null }];
    const validator = new InputValidator(batch.endpoint, executor, this.options.maxBatchRequests);
    for await (const text of this.files.lines(file.id)) validator.accept(text);
    validator.finish(file.bytes, this.options.maxBatchFileBytes);
    if (validator.errors.length > 0) return validator.errors;
    await this.move(record, (r) => states.validate(r, { total: validator.total, model: validator.firstModel }, now()));
    return undefined;
  }

  /** Reads the (valid) input again and publishes each line to the work stream of its model. */
  private async enqueue(record: StoredBatch): Promise<void> {
    const { batch } = record;
    const file = await this.files.get(record.project, batch.input_file_id);
    if (!file) {
      await this.move(record, (r) => states.endEarly(r, "the input file was deleted while the batch was starting", now()));
      return;
    }
    const pending: Promise<unknown>[] = [];
    let published = 0;
    for await (const line of this.workLines(file)) {
      if (!this.options.catalog.has(line.model)) {
        // Not a validation failure: the line ends in the error file, the others run.
        pending.push(storeResult(this.results, batch.id, line.line, notRunLine(line.customId, "invalid_request",
          `The model \`${line.model}\` does not exist or you do not have access to it.`)));
      } else {
        const item: WorkItem = { project: record.project, organization: record.organization, keyId: record.keyId, batchId: batch.id, line: line.line, customId: line.customId, endpoint: batch.endpoint, body: line.body, expiresAt: batch.expires_at };
        // The message id makes a re-enqueue after a crash (within the dedupe window) publish nothing twice.
        pending.push(this.batches.js.publish(subjects.batchWork(line.model, batch.id), JSON.stringify(item), { msgID: `${batch.id}.${line.line}` }));
        published++;
      }
      if (pending.length >= 256) await Promise.all(pending.splice(0));
    }
    await Promise.all(pending);
    await this.move(record, states.enqueued);
    this.ctx.log.info("batch enqueued", { batchId: batch.id, lines: published });
  }

  /** The lines of the (validated) input, read again: nothing is decoded a second time. */
  private workLines(file: FileObject): AsyncGenerator<WorkLine> {
    return validLines(this.files.lines(file.id));
  }

  /** Follows the results of a running batch until all are in, it expires, or it is cancelled. */
  private async watch(record: StoredBatch, signal: AbortSignal): Promise<void> {
    const { batch } = record;
    const tally = new ResultTally(batch.request_counts.total);
    const watcher = await this.results.watch({ key: `${batch.id}.>` });
    const counting = (async () => {
      for await (const e of watcher) {
        if (e.operation !== "PUT") continue;
        tally.add(Number(e.key.slice(batch.id.length + 1)), this.resultOf(e.key, e.string()));
      }
    })();
    const progressMs = this.options.progressMs ?? 500;
    let reported = -1;
    try {
      while (!signal.aborted) {
        await sleep(progressMs);
        if (tally.finished >= tally.total) {
          await this.move(record, (r) => states.linesDone(r, tally.counts(), tally.usage(), now()));
          return;
        }
        if (states.isOverdue(batch, Date.now())) {
          await this.move(record, (r) => states.expire(r, now()));
          return;
        }
        const current = await this.batches.get(record.project, batch.id);
        if (!current || current.batch.status !== "in_progress") return;
        if (tally.finished !== reported) {
          reported = tally.finished;
          await this.move(record, (r) => states.progress(r, tally.counts(), tally.usage()));
        }
      }
    } finally {
      watcher.stop();
      await counting.catch(() => {});
    }
  }

  /**
   * Stops the remaining work and writes the output file and the error file, both streamed from
   * the stored results into the Object Store (FinalLines says which line goes where), then makes
   * the batch final with them.
   */
  private async finalize(record: StoredBatch, ending: states.Ending): Promise<void> {
    const { batch } = record;
    await this.batches.handles.jsm.streams.purge(streams.batchWork, { filter: subjects.batchWorkOfBatch(batch.id) }).catch(() => {});
    if (states.nothingRan(batch)) {
      await this.move(record, (r) => states.endEarly(r, "the batch ended before it started", now()));
      return;
    }
    // Lines still running see the status change (workers follow batch records) and stop; their
    // results, if any slip in, are left out of the files, whose content is fixed below.
    if (ending !== "completed") await sleep(1_000);

    const lines = new states.FinalLines(batch.request_counts.total, ending);
    const store = this.batches.handles;
    const lineOf = (m: JsMsg) => Number(m.subject.slice(m.subject.lastIndexOf(".") + 1));
    const readResult = (m: JsMsg) => this.resultOf(`${m.subject} #${m.seq}`, new TextDecoder().decode(m.data));
    // The error file's pass reads the results the output's pass read, no later ones.
    let lastSeq = 0;
    const outputs = async function* (): AsyncGenerator<Uint8Array> {
      const out = new Chunker();
      for await (const m of readStored(store, resultsStream, resultsFilter(batch.id))) {
        lastSeq = Math.max(lastSeq, m.seq);
        if (lines.has(lineOf(m))) continue;
        const result = readResult(m);
        if (lines.sort(lineOf(m), result) === "output") yield* out.add(JSON.stringify(result));
      }
      yield* out.end();
    };
    const input = await this.files.get(record.project, batch.input_file_id);
    const self = this;
    const errorLines = async function* (): AsyncGenerator<Uint8Array> {
      const out = new Chunker();
      for await (const m of readStored(store, resultsStream, resultsFilter(batch.id))) {
        if (m.seq > lastSeq) break;
        if (lines.toErrorFile(lineOf(m))) yield* out.add(new TextDecoder().decode(m.data));
      }
      if (input && lines.missing) {
        for await (const line of self.workLines(input)) {
          const notRun = lines.notRun(line.line, line.customId);
          if (notRun) yield* out.add(JSON.stringify(notRun));
        }
      }
      yield* out.end();
    };

    const outputFile = await this.writeFile(record, "output", outputs());
    const errorFile = await this.writeFile(record, "error", errorLines());
    const files = { outputFileId: outputFile?.id ?? null, errorFileId: errorFile?.id ?? null };
    const final = await this.move(record, (r) => states.finalize(r, ending, files, lines.counts(), lines.usage(), now()));
    if (!final || final.batch.status !== ending) {
      // Someone else finished (or deleted) the batch meanwhile: these files are not its files.
      for (const f of [outputFile, errorFile]) if (f && final?.batch.output_file_id !== f.id && final?.batch.error_file_id !== f.id) await this.files.delete(record.project, f.id);
    }
    await purgeBatchLeftovers(this.batches.handles, batch.id);
    const counts = lines.counts();
    this.ctx.log.child({ batchId: batch.id }).info("batch finished", { status: ending, completed: counts.completed, failed: counts.failed, total: batch.request_counts.total });
  }

  /** A stored line result, or undefined (logged) when it does not decode: the line counts as failed. */
  private resultOf(where: string, json: string): ResultLine | undefined {
    try {
      return storedValues.resultLine.parse(where, json);
    } catch (err) {
      if (!(err instanceof InvalidValue)) throw err;
      this.ctx.log.error("a batch line result does not decode", { err });
      return undefined;
    }
  }

  /** Writes one of the batch's files under a fixed id (a retried finalisation replaces it); none when empty. */
  private async writeFile(record: StoredBatch, kind: "output" | "error", contents: AsyncIterable<Uint8Array>): Promise<FileObject | undefined> {
    const { batch } = record;
    const id = `file-${batch.id.slice("batch_".length)}${kind === "output" ? "O" : "E"}`;
    await this.files.delete(record.project, id);
    const createdAt = now();
    const file = await this.files.upload(
      {
        project: record.project,
        id,
        maxBytes: Number.MAX_SAFE_INTEGER,
        describe: () => ({
          filename: `batch_${batch.id}_${kind}.jsonl`,
          purpose: "batch_output",
          createdAt,
          expiresAt: record.outputTtlSeconds === null ? null : createdAt + record.outputTtlSeconds,
        }),
      },
      contents,
    );
    if (file.bytes > 0) return file;
    await this.files.delete(record.project, id);
    return undefined;
  }
}

/** JSON lines gathered into chunks of about 64 KiB for a file upload. */
class Chunker {
  private buffer = "";

  *add(line: string): Generator<Uint8Array> {
    this.buffer += line + "\n";
    if (this.buffer.length >= 64 * 1024) yield* this.end();
  }

  *end(): Generator<Uint8Array> {
    if (this.buffer) yield encoder.encode(this.buffer);
    this.buffer = "";
  }
}
