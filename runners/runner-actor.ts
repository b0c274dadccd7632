import type { Msg, Subscription } from "@nats-io/transport-node";
import {
  Admission,
  Cancel,
  HeldQuery,
  HeldReply,
  ResendQuery,
  ResendReply,
  ErrorCode,
  GenerateRequest,
  RunnerHeartbeat,
  RunnerHeartbeat_State as State,
} from "../proto/gen/tributary/v1/inference.js";
import { queues, subjects } from "../lib/nats/subjects.js";
import { randomToken } from "../lib/ids.js";
import { Outbox } from "../lib/nats/outbox.js";
import { classifyModelFailure, type ModelSpec } from "../modules/catalog/mod.js";
import type { Actor, ActorContext } from "../modules/actor-runtime/mod.js";
import { openMailbox } from "../modules/actor-runtime/mod.js";
import { EngineRequestError, type DecodeThreadsStatus, type Engine } from "./engines/engine.js";
import { AdmissionError, Scheduler } from "./scheduler/scheduler.js";
import { ReplyPublisher } from "./reply-publisher.js";
import type { SentEvents } from "./sent-events.js";

/** Request ids one HeldQuery may ask about (more than a runner's slots and queue ever hold). */
const MAX_HELD_QUERY_IDS = 4096;
/**
 * How long a request's events are kept after its final, for a requester that lost some to ask
 * again (ResendQuery): longer than a requester takes to notice a lost tail (its quiet stream asks
 * which requests are held after the runner timeout, twice).
 */
const RESEND_KEEP_MS = 30_000;

/** What a runner reports to probes and metrics. */

export interface RunnerStatus {
  model: string;
  runnerId: string;
  state: keyof typeof State;
  detail: string;
  slotsTotal: number;
  slotsBusy: number;
  queueLength: number;
  queueLimit: number;
  admitted: number;
  rejected: number;
  completionTokens: number;
  /** CPU runners whose decode threads are tuned while serving. */
  decodeThreads?: DecodeThreadsStatus;
}

export interface RunnerActorOptions {
  heartbeatMs: number;
  drainTimeoutMs: number;
  /** Delay before retrying a failed model load; doubles up to a minute. */
  loadRetryMs?: number;
}

/**
 * The runner actor of one model: admits generate requests into its scheduler, streams each
 * request's events to the reply subject the gateway named, honours cancels, and announces its
 * state and load in heartbeats that gateways use for routing and for detecting its loss.
 *
 * Mailboxes: runner.<id>.generate and runner.<id>.cancel (addressed by gateways that chose it),
 * generate.<model> in the model's queue group (gateways that know no runner yet), and
 * cancel.<model> (cancels for requests whose runner the gateway had not learned yet).
 */
export class RunnerActor implements Actor {
  readonly name: string;
  readonly runnerId = `r${randomToken(12)}`;
  private ctx!: ActorContext;
  private state = State.STATE_LOADING;
  private detail = "";
  private scheduler: Scheduler | undefined;
  private readonly subscriptions: Subscription[] = [];
  private directSubscription: Subscription | undefined;
  private queueSubscription: Subscription | undefined;
  private heartbeatTimer: NodeJS.Timeout | undefined;
  private stopped = false;
  private outbox!: Outbox;
  private readonly counters = { admitted: 0, rejected: 0, completionTokens: 0 };
  /** Each request's events as sent, from admission until RESEND_KEEP_MS after its final, oldest first. */
  private readonly sentEvents = new Map<string, SentEvents>();

  constructor(
    private readonly spec: ModelSpec,
    private readonly engine: Engine,
    private readonly options: RunnerActorOptions,
  ) {
    this.name = `runner:${spec.id}:${this.runnerId}`;
  }

  async start(ctx: ActorContext): Promise<void> {
    this.ctx = ctx;
    this.outbox = new Outbox(ctx.nc);
    this.directSubscription = openMailbox(ctx, subjects.runnerGenerate(this.runnerId), (m) => this.onGenerate(m));
    this.subscriptions.push(
      openMailbox(ctx, subjects.runnerCancel(this.runnerId), (m) => this.onCancel(m)),
      openMailbox(ctx, subjects.cancel(this.spec.id), (m) => this.onCancel(m)),
      openMailbox(ctx, subjects.runnerHeld(this.runnerId), (m) => this.onHeldQuery(m)),
      openMailbox(ctx, subjects.runnerResend(this.runnerId), (m) => this.onResend(m)),
    );
    this.heartbeatTimer = setInterval(() => {
      this.heartbeat();
      this.forgetEnded();
    }, this.options.heartbeatMs);
    this.heartbeat();
    void this.loadWithRetry();
  }

  status(): RunnerStatus {
    const stats = this.scheduler?.stats;
    const decodeThreads = this.engine.decodeThreads?.();
    return {
      model: this.spec.id,
      runnerId: this.runnerId,
      state: State[this.state] as keyof typeof State,
      detail: this.detail,
      slotsTotal: stats?.slotsTotal ?? this.engine.slots,
      slotsBusy: stats?.slotsBusy ?? 0,
      queueLength: stats?.queueLength ?? 0,
      queueLimit: stats?.queueLimit ?? this.spec.queueLimit,
      ...this.counters,
      ...(decodeThreads ? { decodeThreads } : {}),
    };
  }

  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    this.state = State.STATE_DRAINING;
    // New work goes elsewhere at once; in-flight requests keep streaming while we drain.
    this.queueSubscription?.unsubscribe();
    this.directSubscription?.unsubscribe();
    this.heartbeat();
    await this.scheduler?.drain(this.options.drainTimeoutMs);
    if (this.heartbeatTimer) clearInterval(this.heartbeatTimer);
    for (const s of this.subscriptions) s.unsubscribe();
    this.outbox.flush();
    await this.ctx.nc.flush().catch(() => {});
    await this.engine.dispose().catch(() => {});
  }

  private async loadWithRetry(): Promise<void> {
    let delay = this.options.loadRetryMs ?? 2_000;
    let stackLogged = false;
    while (!this.stopped) {
      try {
        this.state = State.STATE_LOADING;
        this.detail = "loading";
        await this.engine.load();
        if (this.stopped) return;
        this.scheduler = new Scheduler(this.engine, this.spec.queueLimit, this.ctx.log);
        this.queueSubscription = openMailbox(this.ctx, subjects.generate(this.spec.id), (m) => this.onGenerate(m), {
          queue: queues.runners(this.spec.id),
        });
        this.state = State.STATE_READY;
        this.detail = "";
        this.ctx.log.info("runner ready", { model: this.spec.id, runnerId: this.runnerId, engine: this.engine.kind, slots: this.engine.slots });
        this.heartbeat();
        return;
      } catch (err) {
        const failure = classifyModelFailure(err);
        this.state = State.STATE_FAILED;
        this.detail = failure.message;
        // A failure of a known cause says all in its message; an unknown one carries its stack
        // the first time, not on every retry (at debug, every time).
        const stack: string | undefined = failure._tag === "ModelLoadFailed" && !stackLogged && err instanceof Error ? err.stack : undefined;
        stackLogged ||= stack !== undefined;
        this.ctx.log.error("model load failed; retrying", { model: this.spec.id, err: failure.message, cause: failure._tag, retryInMs: delay, stack });
        this.ctx.log.debug("model load failure", { model: this.spec.id, err });
        this.heartbeat();
        await new Promise((r) => setTimeout(r, delay));
        delay = Math.min(delay * 2, 60_000);
      }
    }
  }

  private async onGenerate(msg: Msg): Promise<void> {
    let request: GenerateRequest;
    try {
      request = GenerateRequest.decode(msg.data);
    } catch {
      this.reject(msg, ErrorCode.ERROR_CODE_INVALID_REQUEST, "malformed GenerateRequest");
      return;
    }
    const scheduler = this.scheduler;
    if (this.state === State.STATE_DRAINING) return this.reject(msg, ErrorCode.ERROR_CODE_DRAINING, "runner is shutting down");
    if (!scheduler || this.state !== State.STATE_READY)
      return this.reject(
        msg,
        ErrorCode.ERROR_CODE_MODEL_LOADING,
        this.state === State.STATE_FAILED ? `model unavailable: ${this.detail}` : `the model is still loading${this.detail && this.detail !== "loading" ? ` (${this.detail})` : ""}`,
      );
    if (request.model !== this.spec.id)
      return this.reject(msg, ErrorCode.ERROR_CODE_MODEL_NOT_SERVED, `this runner serves ${this.spec.id}, not ${request.model}`);
    try {
      const prepared = await this.engine.prepare(request);
      const observer = new ReplyPublisher(this.outbox, request.replySubject, request.requestId, this.runnerId, this.ctx.log, (tokens) => {
        this.counters.completionTokens += tokens;
      }, request.coalesceDeltas, request.batchReplySubject);
      const queuePosition = scheduler.submit(prepared, observer);
      this.sentEvents.delete(request.requestId);
      this.sentEvents.set(request.requestId, observer.sent);
      this.counters.admitted++;
      msg.respond(Admission.encode({
        result: { $case: "accepted", value: { runnerId: this.runnerId, promptTokens: prepared.promptTokens, queuePosition, maxTokens: prepared.maxTokens, droppedMessages: prepared.droppedMessages ?? 0, renderedPrompt: prepared.renderedPrompt } },
      }).finish());
    } catch (err) {
      if (err instanceof EngineRequestError || err instanceof AdmissionError)
        return this.reject(msg, err.code, err.message, err instanceof EngineRequestError ? err.param : "");
      this.ctx.log.error("admission failed", { requestId: request.requestId, err });
      this.reject(msg, ErrorCode.ERROR_CODE_ENGINE_FAILURE, "the runner failed to admit the request");
    }
  }

  /** Answers which of the asked requests are still here (a requester's streams went quiet). */
  private onHeldQuery(msg: Msg): void {
    let query: HeldQuery;
    try {
      query = HeldQuery.decode(msg.data);
    } catch {
      this.ctx.log.warn("malformed HeldQuery ignored");
      return;
    }
    // Events already queued for sending go out before the answer, so an answer of "not held"
    // never overtakes a request's last events.
    this.outbox.flush();
    const held = query.requestIds.slice(0, MAX_HELD_QUERY_IDS).filter((id) => this.scheduler?.holds(id) ?? false);
    msg.respond(HeldReply.encode({ heldRequestIds: held }).finish());
  }

  /** Sends a request's events again from the sequence number asked for (a requester lost some). */
  private onResend(msg: Msg): void {
    let query: ResendQuery;
    try {
      query = ResendQuery.decode(msg.data);
    } catch {
      this.ctx.log.warn("malformed ResendQuery ignored");
      return;
    }
    // Events queued for sending go out first: the answer then holds no event the requester may still get.
    this.outbox.flush();
    const sent = this.sentEvents.get(query.requestId);
    this.ctx.log.info("resending a request's events", { requestId: query.requestId, fromSeq: query.fromSeq, kept: sent !== undefined });
    msg.respond(ResendReply.encode({ kept: sent !== undefined, events: sent?.from(query.fromSeq) ?? [] }).finish());
  }

  /** Forgets the events of requests that ended more than RESEND_KEEP_MS ago. */
  private forgetEnded(): void {
    const now = performance.now();
    // forEach: a for-of over the entries makes an array per entry, and there are thousands.
    this.sentEvents.forEach((sent, requestId, map) => {
      if (sent.endedAt > 0 && now - sent.endedAt > RESEND_KEEP_MS) map.delete(requestId);
    });
  }

  private onCancel(msg: Msg): void {
    try {
      this.scheduler?.cancel(Cancel.decode(msg.data).requestId);
    } catch {
      this.ctx.log.warn("malformed Cancel ignored");
    }
  }

  private reject(msg: Msg, code: ErrorCode, message: string, param = ""): void {
    this.counters.rejected++;
    msg.respond(Admission.encode({ result: { $case: "rejected", value: { code, message, param } } }).finish());
  }

  /** What the load is doing now (a download's progress), shown in heartbeats while loading. */
  setLoadProgress(detail: string): void {
    if (this.state === State.STATE_LOADING) this.detail = detail;
  }

  private heartbeat(): void {
    const stats = this.scheduler?.stats;
    const beat = RunnerHeartbeat.encode({
      runnerId: this.runnerId,
      model: this.spec.id,
      state: this.state,
      slotsTotal: stats?.slotsTotal ?? this.engine.slots,
      slotsBusy: stats?.slotsBusy ?? 0,
      queueLength: stats?.queueLength ?? 0,
      queueLimit: stats?.queueLimit ?? this.spec.queueLimit,
      sentUnixMs: Date.now(),
      intervalMs: this.options.heartbeatMs,
      detail: this.detail,
      batchRunning: stats?.batchRunning ?? 0,
      batchQueueLength: stats?.batchQueueLength ?? 0,
    }).finish();
    this.ctx.nc.publish(subjects.heartbeat(this.spec.id), beat);
  }
}
