import { RequestError, TimeoutError, type Msg, type NatsConnection, type Subscription } from "@nats-io/transport-node";
import { Admission, Cancel, GenerateRequest, HeldQuery, HeldReply, ResendQuery, ResendReply, RunnerEvent, type Error as ProtoError } from "../../proto/gen/tributary/v1/inference.js";
import { MalformedBatch, readRunnerEventBatch, type RunnerEventSink } from "./event-batch-reader.js";
import { subjects } from "../../lib/nats/subjects.js";
import type { Logger } from "../../lib/log.js";
import { errors, NoRunner, RunnerLost, StreamInterrupted, type DomainError } from "../errors/mod.js";
import { domainErrorFromRunner, retryElsewhere } from "./runner-errors.js";
import { GenerationStream, type GenerationSource, type StreamOwner } from "./generation-stream.js";
import { PrefixPlacements, prefixKey, type PrefixRouting } from "./prefix-routing.js";
import type { RunnerDirectory } from "./runner-directory.js";
import { RunnerHeartbeat_State as State } from "../../proto/gen/tributary/v1/inference.js";

export interface GenerationClientOptions {
  gatewayId: string;
  admissionTimeoutMs: number;
  runnerTimeoutMs: number;
  /** Prefix-aware routing (prefix-routing.ts) for the models it names; load-only when unset. */
  prefixRouting?: PrefixRouting;
}

const MAX_ATTEMPTS = 3;
/** Requests one HeldQuery asks about (the runner answers at most this many too). */
const MAX_HELD_QUERY_IDS = 4096;
/** Resends one gap may ask for before its stream fails (each asks from where the stream waits). */
const MAX_RESENDS = 3;

/**
 * Sends generate requests to runners and routes their events back. Each request names this
 * gateway's batch subject, where runners send the events of all its requests packed per step, and
 * a reply subject of its own under the gateway's prefix (for runners that send one message per
 * event); two subscriptions receive them and hand each event to its request's stream. A watchdog fails streams whose runner has gone
 * silent (no event and no heartbeat within the runner timeout).
 */
export class GenerationClient implements GenerationSource {
  private readonly streams = new Map<string, GenerationStream>();
  /** Runners with a HeldQuery in flight (one at a time each). */
  private readonly probing = new Set<string>();
  private subscription: Subscription | undefined;
  private batchSubscription: Subscription | undefined;
  /** Admissions waiting on a known runner: the watchdog ends the wait when that runner is lost. */
  private readonly admissions = new Set<{ runnerId: string; resolve: (outcome: "lost" | "stopped") => void }>();
  private watchdog: NodeJS.Timeout | undefined;
  /** Where this client last sent each prefix (prefix routing only): its own knowledge, not shared with other gateways. */
  private readonly placements: PrefixPlacements | undefined;

  constructor(
    private readonly nc: NatsConnection,
    private readonly directory: RunnerDirectory,
    private readonly options: GenerationClientOptions,
    private readonly log: Logger,
  ) {
    const routing = options.prefixRouting;
    this.placements = routing ? new PrefixPlacements({ loadFactor: routing.loadFactor, idleMs: routing.idleMs }) : undefined;
  }

  /** How the streams of this client are released and cancelled. */
  private readonly owner: StreamOwner = {
    release: (stream) => {
      this.streams.delete(stream.requestId);
      if (stream.admitted) this.directory.noteFinished(stream.admitted.runnerId);
    },
    cancel: (requestId, model, runnerId) =>
      this.nc.publish(runnerId ? subjects.runnerCancel(runnerId) : subjects.cancel(model), Cancel.encode({ requestId }).finish()),
  };

  /** Subscribes to `subject`, decoding each message with `codec`; a message that does not decode is logged and ignored. */
  private subscribeDecoded<T>(subject: string, codec: { decode(data: Uint8Array): T }, what: string, handle: (value: T) => void): Subscription {
    return this.nc.subscribe(subject, {
      callback: (err, msg) => {
        if (err) return;
        let value: T;
        try {
          value = codec.decode(msg.data);
        } catch {
          this.log.warn(`malformed ${what} ignored`, { subject: msg.subject });
          return;
        }
        handle(value);
      },
    });
  }

  start(): void {
    this.subscription = this.subscribeDecoded(subjects.replyWildcard(this.options.gatewayId), RunnerEvent, "runner event", (event) => this.route(event, performance.now()));
    // Runners send the events of requests that named the batch subject packed, one message per step.
    this.batchSubscription = this.nc.subscribe(subjects.replyBatch(this.options.gatewayId), {
      callback: (err, msg) => {
        if (err) return;
        this.batchNow = performance.now();
        try {
          readRunnerEventBatch(msg.data, this.batchSink);
        } catch (e) {
          if (!(e instanceof MalformedBatch)) throw e;
          this.log.warn("malformed runner event batch ignored", { subject: msg.subject });
        }
      },
    });
    this.watchdog = setInterval(() => this.watch(), this.watchPeriodMs);
    this.watchdog.unref();
  }

  /** When the batch being read arrived: one clock read per batch, not per event. */
  private batchNow = 0;

  private readonly batchSink: RunnerEventSink = {
    delta: (requestId, seq, runnerId, delta) => {
      const stream = this.streams.get(requestId);
      if (stream && !stream.ignores(runnerId)) stream.receiveDelta(seq, delta, this.onGap, this.batchNow);
    },
    event: (event) => this.route(event, this.batchNow),
  };

  private route(event: RunnerEvent, now: number): void {
    const stream = this.streams.get(event.requestId);
    if (stream && !stream.ignores(event.runnerId)) stream.receive(event, this.onGap, now);
  }

  stop(): void {
    if (this.watchdog) clearInterval(this.watchdog);
    this.subscription?.unsubscribe();
    this.batchSubscription?.unsubscribe();
    for (const waiter of this.admissions) waiter.resolve("stopped");
    this.admissions.clear();
  }

  /** Fails every open stream (gateway shutdown after its drain timeout). */
  failAll(error: DomainError): void {
    for (const s of [...this.streams.values()]) s.fail(error);
  }

  /**
   * Sends `request` to a runner of its model and resolves once a runner admitted it; the stream
   * then delivers the events. Throws the domain error of the refusal when no runner admits it.
   */
  async generate(request: GenerateRequest): Promise<GenerationStream> {
    request.replySubject = subjects.reply(this.options.gatewayId, request.requestId);
    request.batchReplySubject = subjects.replyBatch(this.options.gatewayId);
    const stream = new GenerationStream(request.requestId, request.model, this.owner);
    this.streams.set(request.requestId, stream);
    try {
      await this.admit(request, stream);
      return stream;
    } catch (err) {
      this.streams.delete(request.requestId);
      throw err;
    }
  }

  private async admit(request: GenerateRequest, stream: GenerationStream): Promise<void> {
    const bytes = GenerateRequest.encode(request).finish();
    const limit = this.nc.info?.max_payload ?? Infinity;
    if (bytes.length > limit)
      throw errors.tooLarge(`The request is too large to send to a runner (${bytes.length} bytes encoded; the limit is ${limit}).`);
    const byLoad = this.directory.candidates(request.model);
    const placements = this.options.prefixRouting?.models.has(request.model) ? this.placements : undefined;
    const key = placements ? prefixKey(request) : undefined;
    const ordered = placements ? placements.order(byLoad, key, performance.now()) : byLoad;
    const targets: Array<{ runnerId: string | undefined; subject: string }> = ordered
      .slice(0, MAX_ATTEMPTS)
      .map((r) => ({ runnerId: r.runnerId, subject: subjects.runnerGenerate(r.runnerId) }));
    // A gateway that has not heard a heartbeat yet still reaches runners through the model's queue group.
    if (targets.length === 0) targets.push({ runnerId: undefined, subject: subjects.generate(request.model) });
    let lastRejection: ProtoError | undefined;
    for (const { runnerId, subject } of targets) {
      // Counted when sent, not when admitted: a burst of requests picks runners before any reply
      // is back, and each pick must see the ones before it. Uncounted when it ends or is refused;
      // the next heartbeat replaces the guess.
      if (runnerId) this.directory.noteRequest(runnerId, false);
      // Recorded when sent too, for the same reason; a runner that refuses it hands the key on to the next.
      const runner = runnerId ? this.directory.get(runnerId) : undefined;
      if (runner) placements?.record(key, runner, performance.now());
      let reply: Admission;
      try {
        const msg = await this.requestWhileAlive(subject, bytes, runnerId);
        if (msg === "lost") {
          this.directory.noteFinished(runnerId!);
          // It died (or went silent) with the request outstanding: it may have admitted it, so it is
          // told to drop it, its events are ignored from now on, and the next runner is tried at once.
          this.log.warn("runner lost during admission; trying another", { requestId: request.requestId, runnerId });
          stream.ignoreRunner(runnerId!);
          this.owner.cancel(request.requestId, request.model, runnerId);
          continue;
        }
        reply = Admission.decode(msg.data);
      } catch (err) {
        if (runnerId) this.directory.noteFinished(runnerId);
        if (err instanceof RequestError && err.isNoResponders()) continue;
        if (err instanceof TimeoutError || (err instanceof RequestError && err.cause instanceof TimeoutError)) {
          // The runner may have admitted it: cancel rather than risk running it twice elsewhere.
          stream.cancel();
          throw errors.deadline(`No runner of ${request.model} answered within ${this.options.admissionTimeoutMs} ms.`);
        }
        throw err;
      }
      const result = reply.result;
      if (result?.$case === "accepted") {
        stream.admitted = result.value;
        // Admitted through the queue group: the runner is known only now.
        if (!runnerId) this.directory.noteRequest(result.value.runnerId, result.value.queuePosition > 0);
        if (stream.done) {
          // The client left while we waited: released before it was admitted, so uncounted here.
          this.directory.noteFinished(result.value.runnerId);
          stream.sendCancel();
        }
        return;
      }
      if (result?.$case === "rejected") {
        if (runnerId) this.directory.noteFinished(runnerId);
        lastRejection = result.value;
        if (!retryElsewhere(result.value)) throw domainErrorFromRunner(result.value, request.model);
      }
    }
    if (lastRejection) throw domainErrorFromRunner(lastRejection, request.model);
    throw this.noRunnerError(request.model);
  }

  /**
   * The admission request to `runnerId`, or "lost" as soon as the directory declares that runner
   * lost (silent for the runner timeout): waiting the whole admission timeout on a dead runner
   * would hold the request for nothing. Without a runner (the queue group) it is a plain request.
   */
  private async requestWhileAlive(subject: string, bytes: Uint8Array, runnerId: string | undefined): Promise<Msg | "lost"> {
    const reply = this.nc.request(subject, bytes, { timeout: this.options.admissionTimeoutMs });
    if (!runnerId) return reply;
    let waiter!: { runnerId: string; resolve: (outcome: "lost" | "stopped") => void };
    const lost = new Promise<"lost" | "stopped">((resolve) => this.admissions.add((waiter = { runnerId, resolve })));
    // The reply abandoned may still fail later (its timeout): that is expected, not unhandled.
    reply.catch(() => {});
    try {
      const outcome = await Promise.race([reply, lost]);
      // Stopped: the client is closing; the request's own reply or timeout decides.
      return outcome === "stopped" ? await reply : outcome;
    } finally {
      this.admissions.delete(waiter);
    }
  }

  /** How often runners' liveness is checked: a quarter of the runner timeout, within 0.1 to 1 s. */
  private get watchPeriodMs(): number {
    return Math.max(100, Math.min(1000, this.options.runnerTimeoutMs / 4));
  }

  private noRunnerError(model: string): NoRunner {
    const known = this.directory.all(model);
    if (known.some((r) => r.state === State.STATE_LOADING)) return new NoRunner({ model, state: "loading", retryAfterSeconds: 5 });
    if (known.some((r) => r.state === State.STATE_FAILED)) return new NoRunner({ model, state: "failed", retryAfterSeconds: 10 });
    return new NoRunner({ model, state: "none", retryAfterSeconds: 5 });
  }

  private readonly onGap = (stream: GenerationStream, expected: number, got: number, repairable: boolean) => {
    if (!repairable) return this.lose(stream, "runner events lost, too many to hold back", { expected, got });
    this.log.warn("runner events lost; asking the runner to send them again", { requestId: stream.requestId, expected, got });
    this.resend(stream, 1);
  };

  /**
   * Asks the stream's runner for its events from where the stream waits (ResendQuery): core NATS
   * drops messages while a connection moves to another server (a NATS node in lame duck hands its
   * clients on), and the runner keeps each request's events a while. A stream whose runner no
   * longer has them, or does not answer, ends as interrupted.
   */
  private resend(stream: GenerationStream, attempt: number): void {
    const runnerId = stream.admitted?.runnerId;
    if (!runnerId) return this.lose(stream, "runner events lost before the admission was known", { expected: stream.nextSeq });
    const fromSeq = stream.nextSeq;
    this.nc
      .request(subjects.runnerResend(runnerId), ResendQuery.encode({ requestId: stream.requestId, fromSeq }).finish(), { timeout: Math.min(this.options.runnerTimeoutMs, 5_000) })
      .then((msg) => {
        const reply = ResendReply.decode(msg.data);
        if (!reply.kept) return this.lose(stream, "runner events lost; the runner no longer has them", { fromSeq, runnerId });
        if (stream.resent(reply.events)) return this.log.info("runner events lost and sent again", { requestId: stream.requestId, fromSeq, events: reply.events.length });
        if (attempt < MAX_RESENDS) return this.resend(stream, attempt + 1);
        this.lose(stream, "runner events lost; a gap remained after resends", { fromSeq, runnerId });
      })
      .catch((err: unknown) => this.lose(stream, "runner events lost; the runner did not send them again", { fromSeq, runnerId, err: String(err) }));
  }

  private lose(stream: GenerationStream, why: string, fields: Record<string, unknown>): void {
    if (stream.done) return;
    this.log.error(why, { requestId: stream.requestId, ...fields });
    stream.abandon(new StreamInterrupted({ message: "The stream from the model runner lost messages; the request was stopped." }));
  }

  /**
   * The watchdog's one pass over what waits on runners: admissions to a runner declared lost end
   * at once; streams whose runner went silent (no event and no heartbeat within the runner
   * timeout) fail; streams merely quiet that long are gathered for a HeldQuery to their runner.
   */
  private watch(): void {
    for (const waiter of this.admissions) if (this.directory.isLost(waiter.runnerId)) waiter.resolve("lost");
    const now = performance.now();
    const limit = this.options.runnerTimeoutMs;
    let quiet: Map<string, GenerationStream[]> | undefined;
    let silent: GenerationStream[] | undefined;
    for (const stream of this.streams.values()) {
      const runnerId = stream.admitted?.runnerId;
      if (!runnerId || now - stream.lastEventAt < limit) continue;
      const seen = Math.max(stream.lastEventAt, this.directory.get(runnerId)?.lastSeen ?? 0);
      if (now - seen > limit) {
        (silent ??= []).push(stream);
        continue;
      }
      if (this.probing.has(runnerId)) continue;
      quiet ??= new Map();
      let list = quiet.get(runnerId);
      if (!list) quiet.set(runnerId, (list = []));
      if (list.length < MAX_HELD_QUERY_IDS) list.push(stream);
    }
    // Failed after the walk: failing a stream removes it from the map being walked.
    for (const stream of silent ?? []) {
      const seen = Math.max(stream.lastEventAt, this.directory.get(stream.admitted!.runnerId)?.lastSeen ?? 0);
      this.log.warn("runner lost mid-request", { requestId: stream.requestId, runnerId: stream.admitted!.runnerId, silentMs: Math.round(now - seen) });
      stream.fail(new RunnerLost({ message: `The model runner stopped responding (nothing heard for ${((now - seen) / 1000).toFixed(1)} s). Please retry the request.` }));
    }
    if (quiet) this.probeQuietStreams(quiet);
  }

  /**
   * A runner that keeps sending heartbeats may still have lost a stream's last events (core NATS
   * drops messages across a server failover), and that stream would wait forever. Streams quiet
   * for the runner timeout ask their runner which requests it still holds; a request not held in
   * two answers in a row, with no event between them, has ended unseen. Its stream is abandoned
   * as interrupted, so a caller that has sent nothing yet can run it again elsewhere.
   */
  private probeQuietStreams(quiet: ReadonlyMap<string, GenerationStream[]>): void {
    for (const [runnerId, streams] of quiet) {
      this.probing.add(runnerId);
      const askedAt = performance.now();
      const query = HeldQuery.encode({ requestIds: streams.map((s) => s.requestId) }).finish();
      this.nc
        .request(subjects.runnerHeld(runnerId), query, { timeout: Math.min(this.options.runnerTimeoutMs, 5_000) })
        .then((msg) => {
          const held = new Set(HeldReply.decode(msg.data).heldRequestIds);
          for (const stream of streams) {
            if (stream.done || held.has(stream.requestId)) {
              stream.notHeldSince = 0;
            } else if (stream.notHeldSince > 0 && stream.lastEventAt < stream.notHeldSince) {
              // Its last events were lost on the way: the runner keeps them a while after the end.
              this.log.warn("runner no longer holds a quiet request: asking it for its last events", { requestId: stream.requestId, runnerId });
              this.resend(stream, 1);
            } else {
              stream.notHeldSince = askedAt;
            }
          }
        })
        // No answer (an older runner, a timeout): nothing is concluded; the heartbeat watch stays.
        .catch(() => {})
        .finally(() => this.probing.delete(runnerId));
    }
  }
}
