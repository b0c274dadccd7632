import { jetstream, type Consumer, type JsMsg } from "@nats-io/jetstream";
import { nanos, type Subscription } from "@nats-io/transport-node";
import type { ModelSpec } from "../../modules/catalog/mod.js";
import { randomToken } from "../../lib/ids.js";
import type { Logger } from "../../lib/log.js";
import { ensureDurableConsumer, openJetStreamManager } from "../../lib/nats/jetstream.js";
import { InvalidValue } from "../../lib/nats/kv-records.js";
import { BoundedPuller } from "../../lib/nats/bounded-puller.js";
import { consumers, streams, subjects } from "../../lib/nats/subjects.js";
import { GenerationClient, prefixRoutingOption, RunnerDirectory, type RoutingSettings } from "../../modules/inference/mod.js";
import { BackgroundLifecycle, BackgroundQueue, backgroundJobSchema, ConversationStore, ResponseEventLog, ResponseService, ResponseStore, RunControl, type BackgroundJob, type RunOutcome, type RunRecord } from "../../modules/responses/mod.js";
import type { Actor, ActorContext } from "../../modules/actor-runtime/mod.js";
import type { UsageRecorder } from "../../modules/usage/mod.js";
import { buildTrace, RequestObservation, type TraceWriter } from "../../modules/traces/mod.js";
import type { ResponseObject } from "../../modules/openai/mod.js";

export interface BackgroundWorkerSettings {
  catalog: readonly ModelSpec[];
  ttlSeconds: number;
  concurrency: number;
  ackWaitMs: number;
  maxAttempts: number;
  requestTimeoutMs: number;
  admissionTimeoutMs: number;
  runnerTimeoutMs: number;
  /** How runs are spread over runners (TRIBUTARY_ROUTING). */
  routing: RoutingSettings;
  drainTimeoutMs: number;
  /** Usage rollups: each run counts (as a request of the response's project). */
  usage?: UsageRecorder;
  /** Runs of responses created with log: true are traced. */
  traces?: { writer: TraceWriter; maxBodyBytes: number };
}

/** Deliveries of a job whose handling keeps throwing (stores unavailable) before it is given up. */
const MAX_DELIVERIES = 20;

/** Pause before a job that must wait is delivered again: 1 s, doubling per delivery, at most 30 s. */
const retryDelayMs = (deliveries: number) => Math.min(30_000, 1_000 * 2 ** Math.min(5, deliveries - 1));

/**
 * Runs background responses: the transport around BackgroundLifecycle (modules/responses),
 * which holds their states. Jobs come from the durable work queue (a JetStream work-queue stream
 * with one durable pull consumer shared by every actor host): a job is fetched only when a run
 * slot is free, kept alive with working() while it runs, acked once the response is final, and
 * redelivered to another worker if this one dies. A cancel arrives on the cancel subject and
 * stops the run at once; on shutdown, runs that do not finish within the drain are handed back.
 */
export class BackgroundResponseWorker implements Actor {
  readonly name = "responses:background";
  private log!: Logger;
  private directory!: RunnerDirectory;
  private client!: GenerationClient;
  private lifecycle!: BackgroundLifecycle;
  private consumer!: Consumer;
  private cancelSubscription: Subscription | undefined;
  private readonly running = new Map<string, RunControl>();
  private puller: BoundedPuller | undefined;

  constructor(private readonly settings: BackgroundWorkerSettings) {}

  async start(ctx: ActorContext): Promise<void> {
    this.log = ctx.log;
    const nc = ctx.nc;
    const [responses, conversations, events, queue] = await Promise.all([
      ResponseStore.open(nc, this.settings.ttlSeconds * 1000),
      ConversationStore.open(nc),
      ResponseEventLog.open(nc),
      BackgroundQueue.open(nc),
    ]);
    const jsm = await openJetStreamManager(nc);
    const durable = consumers.responsesBackground;
    const config = { ack_wait: nanos(this.settings.ackWaitMs), max_deliver: -1, max_ack_pending: -1 };
    try {
      await ensureDurableConsumer(jsm, streams.responsesBackground, { durable_name: durable, ...config });
    } catch {
      // It exists with another ack wait (configuration changed): take the new one.
      await jsm.consumers.update(streams.responsesBackground, durable, config);
    }
    this.consumer = await jetstream(nc).consumers.get(streams.responsesBackground, durable);

    // Reply subjects of this worker's generations: a gateway id of its own.
    this.directory = new RunnerDirectory(nc, this.settings.runnerTimeoutMs);
    this.directory.start();
    this.client = new GenerationClient(nc, this.directory, {
      gatewayId: `w${randomToken(10)}`,
      admissionTimeoutMs: this.settings.admissionTimeoutMs,
      runnerTimeoutMs: this.settings.runnerTimeoutMs,
      prefixRouting: prefixRoutingOption(this.settings.routing, this.settings.catalog),
    }, this.log);
    this.client.start();
    const service = new ResponseService({
      catalog: new Map(this.settings.catalog.map((m) => [m.id, m])),
      client: this.client,
      responses,
      conversations,
      requestTimeoutMs: this.settings.requestTimeoutMs,
      log: this.log,
    });
    const { maxAttempts, requestTimeoutMs } = this.settings;
    const usage = this.settings.usage;
    this.lifecycle = new BackgroundLifecycle({
      nc,
      service,
      events,
      queue,
      maxAttempts,
      requestTimeoutMs,
      log: this.log,
      onRunEnded: usage
        ? (projectId, r, runRecord) => {
            this.trace(projectId, r, runRecord);
            usage.add({
              at: Date.now(),
              projectId,
              keyId: runRecord.owner.keyId,
              model: r.model,
              batch: false,
              inputTokens: r.usage?.input_tokens ?? 0,
              cachedInputTokens: r.usage?.input_tokens_details?.cached_tokens ?? 0,
              outputTokens: r.usage?.output_tokens ?? 0,
              error: r.status === "failed",
              ttftMs: runRecord.firstTokenMs,
              latencyMs: performance.now() - runRecord.startedAt.perf,
            });
          }
        : undefined,
    });

    this.cancelSubscription = nc.subscribe(subjects.responseCancelAll, {
      callback: (err, msg) => {
        if (err) return;
        this.running.get(msg.subject.slice(msg.subject.lastIndexOf(".") + 1))?.cancel();
      },
    });
    this.puller = new BoundedPuller(this.consumer, this.settings.concurrency, (msg) => this.handle(msg));
    this.puller.start((err) => ctx.fail(err));
  }

  async stop(): Promise<void> {
    await this.puller?.stop();
    // Let running responses finish for a while; the rest go back to the queue for another worker.
    const drained = await Promise.race([
      Promise.resolve(this.puller?.idle()).then(() => true),
      new Promise<boolean>((r) => setTimeout(() => r(false), this.settings.drainTimeoutMs).unref()),
    ]);
    if (!drained) for (const control of this.running.values()) control.handBack();
    await this.puller?.idle();
    this.cancelSubscription?.unsubscribe();
    this.client?.stop();
    this.directory?.stop();
  }

  /** The trace of a background run whose request said log: true (no HTTP exchange: http_status 0, the response id as request id). */
  private trace(projectId: string, response: ResponseObject, run: RunRecord): void {
    const traces = this.settings.traces;
    if (!traces || run.request.log !== true) return;
    const obs = new RequestObservation("/v1/responses", response.id, run.startedAt.unixMs, run.startedAt.perf);
    obs.model = response.model;
    obs.log = true;
    obs.stream = run.request.stream === true;
    obs.runnerAdmitted(run.runnerId, run.promptTokens, run.renderedPrompt);
    if (run.firstTokenMs !== null) obs.firstTokenMs = run.firstTokenMs;
    obs.requestBody = JSON.stringify(run.request);
    obs.responseBody = response;
    obs.responseId = response.id;
    obs.usage = { inputTokens: response.usage?.input_tokens ?? 0, cachedInputTokens: response.usage?.input_tokens_details?.cached_tokens ?? 0, outputTokens: response.usage?.output_tokens ?? 0 };
    if (run.failure) obs.fail(run.failure);
    else if (response.status === "cancelled") obs.cancelled = true;
    traces.writer.record(buildTrace(obs, { principal: { organizationId: run.owner.organizationId, projectId, keyId: run.owner.keyId }, httpStatus: 0, clientLeft: false, maxBodyBytes: traces.maxBodyBytes }));
  }

  private async handle(msg: JsMsg): Promise<void> {
    let job: BackgroundJob;
    try {
      job = backgroundJobSchema.parseBytes(`${msg.subject} #${msg.seq}`, msg.data);
    } catch (err) {
      this.log.error("malformed background job dropped", { err });
      return msg.term();
    }
    const keepAlive = setInterval(() => msg.working(), Math.max(1_000, this.settings.ackWaitMs / 3));
    const control = new RunControl();
    this.running.set(job.responseId, control);
    const deliveries = msg.info.deliveryCount;
    try {
      const outcome = await this.lifecycle.run(job, control);
      this.log.debug("background job handled", { response: job.responseId, outcome, deliveries });
      this.acknowledge(msg, outcome);
    } catch (err) {
      if (err instanceof InvalidValue) {
        // Its record does not decode: no later delivery will read it better.
        this.log.error("background response dropped: its record does not decode", { response: job.responseId, err });
        return msg.term();
      }
      // JetStream or the stores failed: try again later; a job failing for good ends up failed.
      this.log.error("background response could not be run; retrying", { response: job.responseId, deliveries, err });
      if (deliveries < MAX_DELIVERIES) return msg.nak(retryDelayMs(deliveries));
      await this.lifecycle.giveUp(job, "The response could not be run.").catch(() => {});
      msg.term();
    } finally {
      clearInterval(keepAlive);
      this.running.delete(job.responseId);
    }
  }

  private acknowledge(msg: JsMsg, outcome: RunOutcome): void {
    if (outcome === "done") msg.ack();
    else if (outcome === "again") msg.nak(); // another runner or host takes it at once
    else msg.nak(retryDelayMs(msg.info.deliveryCount));
  }
}
