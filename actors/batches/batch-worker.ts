import type { KV } from "@nats-io/kv";
import { nanos } from "@nats-io/transport-node";
import type { JsMsg } from "@nats-io/jetstream";
import type { ModelSpec } from "../../modules/catalog/mod.js";
import { BatchStore, batchStates, openBatchResults, type BatchStatus, storedBatchSchema, dispatchBudget, LINE_EXECUTORS, storeResult, workItemSchema } from "../../modules/batches/mod.js";
import { newId, randomToken } from "../../lib/ids.js";
import { ensureDurableConsumer } from "../../lib/nats/jetstream.js";
import { decodeEntry, InvalidValue } from "../../lib/nats/kv-records.js";
import { consumers, streams, subjects } from "../../lib/nats/subjects.js";
import { GenerationClient, prefixRoutingOption, RunnerDirectory, type RoutingSettings, type RunnerView } from "../../modules/inference/mod.js";
import { ConversationStore, ResponseService, ResponseStore } from "../../modules/responses/mod.js";
import type { Actor, ActorContext } from "../../modules/actor-runtime/mod.js";
import type { LineOutcome, WorkItem } from "../../modules/batches/mod.js";
import { errors } from "../../modules/errors/mod.js";
import { failureLine, successLine, type ResultLine } from "../../modules/openai/mod.js";

export interface BatchWorkerOptions {
  catalog: ReadonlyMap<string, ModelSpec>;
  ackWaitMs: number;
  /** Batch lines per runner beyond its free slots; -1: four times its slots (at most its queue bound). */
  queueMargin: number;
  admissionTimeoutMs: number;
  runnerTimeoutMs: number;
  /** How lines are spread over runners (TRIBUTARY_ROUTING). */
  routing: RoutingSettings;
  requestTimeoutMs: number;
  /** How long responses stored by /v1/responses lines are kept. */
  responseTtlSeconds: number;
  /** Where each finished line counts (usage rows, traces of lines with log: true, line metrics). */
  observer?: LineObserver;
}

/** Sees each batch line that ran to a result (the actor host's usage, traces and metrics). */
export interface LineObserver {
  lineFinished(item: WorkItem, requestId: string, startedAt: { unixMs: number; perf: number }, outcome: LineOutcome, result: ResultLine): void;
}

/** A line failing with a server error this many times is written as failed rather than retried. */
const MAX_SERVER_ERROR_ATTEMPTS = 3;

/**
 * Runs batch lines on idle runner capacity. Per model, it pulls lines from that model's durable
 * consumer on the work stream only as fast as runners have room: free slots plus a small queue
 * margin per runner (from their heartbeats, minus what is already in flight), so runner queues
 * stay shallow and an interactive request never queues behind a pile of batch work. Lines run at
 * batch priority through the same chat completion path as the HTTP route; the runner scheduler
 * lets interactive requests preempt them.
 *
 * Each line is acked only after its result is stored (create-only), so a worker, runner or
 * coordinator killed mid-line loses nothing: the line is delivered again after the ack wait, and
 * a line that ran twice still has one result. Several actor hosts share the consumers.
 */
export class BatchWorker implements Actor {
  readonly name = "batch-worker";
  private ctx!: ActorContext;
  private directory!: RunnerDirectory;
  private client!: GenerationClient;
  private responses!: ResponseService;
  private batches!: BatchStore;
  private results!: KV;
  private stopped = false;
  private readonly inFlight = new Map<string, number>();
  /** This worker's in-flight count for the runner's model when each runner heartbeat arrived. */
  private readonly inFlightAtBeat = new WeakMap<RunnerView, number>();
  /** Lines running now, by batch: aborted when their batch stops being in progress. */
  private readonly running = new Map<string, Set<AbortController>>();
  private readonly statusCache = new Map<string, { status: BatchStatus | undefined; at: number }>();
  private wake: (() => void) | undefined;
  private loops: Promise<void>[] = [];
  private stopWatch: (() => void) | undefined;

  constructor(private readonly options: BatchWorkerOptions) {}

  async start(ctx: ActorContext): Promise<void> {
    this.ctx = ctx;
    this.directory = new RunnerDirectory(ctx.nc, this.options.runnerTimeoutMs);
    this.directory.start();
    this.directory.onHeartbeat((view) => this.inFlightAtBeat.set(view, this.inFlight.get(view.model) ?? 0));
    this.client = new GenerationClient(ctx.nc, this.directory, {
      gatewayId: `b${randomToken(10)}`,
      admissionTimeoutMs: this.options.admissionTimeoutMs,
      runnerTimeoutMs: this.options.runnerTimeoutMs,
      prefixRouting: prefixRoutingOption(this.options.routing, this.options.catalog.values()),
    }, ctx.log);
    this.client.start();
    [this.batches, this.results] = await Promise.all([BatchStore.open(ctx.nc), openBatchResults(ctx.nc)]);
    const [responses, conversations] = await Promise.all([ResponseStore.open(ctx.nc, this.options.responseTtlSeconds * 1000), ConversationStore.open(ctx.nc)]);
    this.responses = new ResponseService({ catalog: this.options.catalog, client: this.client, responses, conversations, requestTimeoutMs: this.options.requestTimeoutMs, log: ctx.log });
    await this.followBatches();
    for (const model of this.options.catalog.keys()) {
      await ensureDurableConsumer(this.batches.handles.jsm, streams.batchWork, {
        durable_name: consumers.batchWorkers(model),
        filter_subject: subjects.batchWorkOfModel(model),
        ack_wait: nanos(this.options.ackWaitMs),
        max_deliver: -1,
        max_ack_pending: 100_000,
      });
      this.loops.push(this.pull(model).catch((err: unknown) => {
        if (!this.stopped) ctx.fail(err);
      }));
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.wake?.();
    this.stopWatch?.();
    // Lines in flight are abandoned (not acked): JetStream redelivers them after the ack wait.
    for (const set of this.running.values()) for (const c of set) c.abort();
    await Promise.all(this.loops);
    this.client.stop();
    this.directory.stop();
  }

  /** Follows batch records: a batch that stops being in progress has its running lines stopped. */
  private async followBatches(): Promise<void> {
    const watcher = await this.batches.kv.watch({ include: "updates" as never });
    this.stopWatch = () => watcher.stop();
    void (async () => {
      for await (const e of watcher) {
        const batchId = e.key.slice(e.key.indexOf(".") + 1);
        let status: BatchStatus | undefined;
        try {
          status = decodeEntry(e, storedBatchSchema)?.value.batch.status;
        } catch (err) {
          if (!(err instanceof InvalidValue)) throw err;
          this.ctx.log.error("a batch record does not decode", { err });
          continue;
        }
        this.statusCache.set(batchId, { status, at: Date.now() });
        if (batchStates.lineFate(status) !== "run") for (const c of this.running.get(batchId) ?? []) c.abort();
      }
    })().catch((err: unknown) => {
      if (!this.stopped) this.ctx.fail(err);
    });
  }

  private async batchStatus(item: WorkItem, maxAgeMs = 1_000): Promise<BatchStatus | undefined> {
    const cached = this.statusCache.get(item.batchId);
    if (cached && Date.now() - cached.at < maxAgeMs) return cached.status;
    const status = (await this.batches.get(item.project, item.batchId))?.batch.status;
    this.statusCache.set(item.batchId, { status, at: Date.now() });
    if (this.statusCache.size > 10_000) this.statusCache.delete(this.statusCache.keys().next().value!);
    return status;
  }

  private budget(model: string): number {
    return dispatchBudget({
      runners: this.directory.all(model),
      mine: this.inFlight.get(model) ?? 0,
      mineAtBeat: (r) => this.inFlightAtBeat.get(r),
      queueMargin: this.options.queueMargin,
    });
  }

  private async pull(model: string): Promise<void> {
    const consumer = await this.batches.js.consumers.get(streams.batchWork, consumers.batchWorkers(model));
    while (!this.stopped) {
      const budget = this.budget(model);
      if (budget <= 0) {
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, 100);
          this.wake = () => {
            clearTimeout(timer);
            resolve();
          };
        });
        continue;
      }
      const messages = await consumer.fetch({ max_messages: budget, expires: 1_000 });
      for await (const m of messages) {
        if (this.stopped) {
          m.nak();
          continue;
        }
        void this.runLine(model, m);
      }
    }
  }

  private async runLine(model: string, m: JsMsg): Promise<void> {
    let item: WorkItem;
    try {
      item = workItemSchema.parseBytes(`${m.subject} #${m.seq}`, m.data);
    } catch (err) {
      this.ctx.log.error("malformed batch line dropped", { err });
      m.term("malformed work item");
      return;
    }
    this.inFlight.set(model, (this.inFlight.get(model) ?? 0) + 1);
    const keepAlive = setInterval(() => m.working(), Math.max(200, this.options.ackWaitMs / 3));
    const control = new AbortController();
    const startedAt = { unixMs: Date.now(), perf: performance.now() };
    let set = this.running.get(item.batchId);
    if (!set) this.running.set(item.batchId, (set = new Set()));
    set.add(control);
    try {
      const fate = batchStates.lineFate(await this.batchStatus(item));
      if (fate === "wait") return m.nak(1_000);
      // Cancelled, expired, finalizing, deleted: the coordinator accounts for lines that did not run.
      if (fate === "drop") return m.ack();
      const executor = LINE_EXECUTORS.get(item.endpoint);
      const requestId = newId("req_");
      if (!executor) {
        const unsupported = errors.invalidParam("url", `The endpoint ${item.endpoint} is not supported in batches.`);
        await storeResult(this.results, item.batchId, item.line, failureLine(item.customId, requestId, unsupported));
        return m.ack();
      }
      const outcome = await executor.run(item.body, {
        client: this.client,
        catalog: this.options.catalog,
        projectId: item.project,
        responses: this.responses,
        requestId,
        deadlineUnixMs: Math.min(Date.now() + this.options.requestTimeoutMs, item.expiresAt * 1000),
        signal: control.signal,
      });
      if (control.signal.aborted) {
        if (this.stopped) return m.nak();
        return m.ack();
      }
      if (outcome.kind === "retry") {
        const attempts = m.info.deliveryCount;
        if (outcome.error._tag === "Internal" && attempts >= MAX_SERVER_ERROR_ATTEMPTS) {
          this.ctx.log.error("batch line failed with an internal error", { batchId: item.batchId, line: item.line, err: outcome.error.cause });
          await storeResult(this.results, item.batchId, item.line, failureLine(item.customId, requestId, outcome.error));
          return m.ack();
        }
        this.ctx.log.debug("batch line will be retried", { batchId: item.batchId, line: item.line, reason: outcome.error.message, attempts });
        return m.nak(Math.min(10_000, 500 * 2 ** Math.min(attempts, 5)));
      }
      // A result that arrives after the batch stopped is left out: the files are already fixed.
      if (batchStates.lineFate(await this.batchStatus(item, 0)) !== "run") return m.ack();
      const result = outcome.kind === "succeeded" ? successLine(item.customId, requestId, outcome.body) : failureLine(item.customId, requestId, outcome.error);
      await storeResult(this.results, item.batchId, item.line, result);
      m.ack();
      this.options.observer?.lineFinished(item, requestId, startedAt, outcome, result);
    } catch (err) {
      if (err instanceof InvalidValue) {
        // Its batch's record does not decode: its coordinator dropped the batch too.
        this.ctx.log.error("batch line dropped: its batch's record does not decode", { batchId: item.batchId, line: item.line, err });
        m.term("batch record does not decode");
        return;
      }
      this.ctx.log.warn("batch line failed; it will be retried", { batchId: item.batchId, line: item.line, err });
      m.nak(2_000);
    } finally {
      clearInterval(keepAlive);
      set.delete(control);
      if (set.size === 0) this.running.delete(item.batchId);
      this.inFlight.set(model, (this.inFlight.get(model) ?? 1) - 1);
      this.wake?.();
    }
  }
}
