import type { ChoiceEnd, Final, GenerateRequest, RunnerEvent, TokenDelta } from "../../proto/gen/tributary/v1/inference.js";
import type { DomainError } from "../errors/mod.js";

/** Receives one request's events, in order. Exactly one of `final` or `failure` ends it. */
export interface GenerationListener {
  delta(delta: TokenDelta): void;
  choiceEnd(end: ChoiceEnd): void;
  /** A preempted batch choice restarts: drop what was received for it (batch requests only). */
  choiceReset?(choiceIndex: number): void;
  final(final: Final): void;
  failure(error: DomainError): void;
}

/**
 * What the routes, services and workers need of a generation client: a request handed to a
 * runner of its model, resolved once one admitted it (its stream then delivers the events), or
 * the domain error of the refusal. GenerationClient is the one over NATS; tests script one.
 */
export interface GenerationSource {
  generate(request: GenerateRequest): Promise<GenerationStream>;
}

/** What a stream needs of the client that owns it (GenerationClient: its map of streams and NATS). */
export interface StreamOwner {
  /** The stream ended: its events are no longer routed to it. */
  release(stream: GenerationStream): void;
  /** Tells the runner that admitted the request (or, not known yet, every runner of the model) to stop it. */
  cancel(requestId: string, model: string, runnerId: string | undefined): void;
}

export interface Admitted {
  runnerId: string;
  promptTokens: number;
  maxTokens: number;
  queuePosition: number;
  /** The prompt as the engine rendered it, when the request asked for it (traces). */
  renderedPrompt?: string;
}

/**
 * Told that `stream` missed events from `expected` on (it got `got`): `repairable` when the events
 * after the gap are held back for a resend to complete; false when the stream is too far behind.
 */
export type GapHandler = (stream: GenerationStream, expected: number, got: number, repairable: boolean) => void;

/** Events held back after a gap while the missing ones are asked for again (a few seconds of a long stream). */
const MAX_HELD_BACK = 4096;

/**
 * The gateway's end of one generation. Events may arrive before the admission reply (they use
 * different subjects), so they are buffered until a listener attaches. Sequence numbers are
 * checked: a gap means core NATS dropped a message. The events after it are held back, the
 * client asks the runner for the missing ones (`onGap`) and hands them to `resent`; a gap that
 * cannot be filled fails the stream rather than lie.
 */
export class GenerationStream {
  admitted: Admitted | undefined;
  /** performance.now() of the last event. */
  lastEventAt = performance.now();
  /** When the runner, asked, last said it no longer holds this request (0: it holds it, or not asked). */
  notHeldSince = 0;
  private listener: GenerationListener | undefined;
  private buffered: Array<RunnerEvent | DomainError> = [];
  private expectedSeq = 1;
  /** Events that came after a gap, by seq, until the missing ones arrive (at most MAX_HELD_BACK). */
  private heldBack: Map<number, RunnerEvent> | undefined;
  /** A gap was reported and its repair is under way. */
  private repairing = false;
  private ended = false;
  private cancelRequested = false;
  /** Runners given up on during admission (lost): whatever they still send belongs to no stream. */
  private ignoredRunners: Set<string> | undefined;

  constructor(
    readonly requestId: string,
    readonly model: string,
    private readonly owner: StreamOwner,
  ) {}

  get done(): boolean {
    return this.ended;
  }

  /** Attaches the consumer; buffered events are delivered at once. */
  listen(listener: GenerationListener): void {
    this.listener = listener;
    const pending = this.buffered;
    this.buffered = [];
    for (const item of pending) {
      if (item instanceof Error) listener.failure(item);
      else this.dispatch(item, listener);
    }
  }

  /** Drops, from now on, every event of `runnerId` for this request (it was abandoned as lost). */
  ignoreRunner(runnerId: string): void {
    (this.ignoredRunners ??= new Set()).add(runnerId);
  }

  ignores(runnerId: string): boolean {
    return this.ignoredRunners?.has(runnerId) ?? false;
  }

  /** The next sequence number this stream waits for (a resend starts there). */
  get nextSeq(): number {
    return this.expectedSeq;
  }

  /** Called by the client with each event addressed to this request. */
  receive(event: RunnerEvent, onGap: GapHandler, now = performance.now()): void {
    if (this.ended) return;
    this.lastEventAt = now;
    if (event.seq < this.expectedSeq) return; // duplicate
    if (event.seq > this.expectedSeq) return this.holdBack(event, onGap);
    this.expectedSeq++;
    this.deliver(event);
    if (this.heldBack) this.catchUp();
  }

  /** `receive` for a text delta read without its RunnerEvent (the batch reader's common case). */
  receiveDelta(seq: number, delta: TokenDelta, onGap: GapHandler, now: number): void {
    if (this.ended) return;
    this.lastEventAt = now;
    if (seq < this.expectedSeq) return; // duplicate
    // The hot path of every token: no closure or event object unless one is kept.
    if (seq > this.expectedSeq) return this.holdBack(this.deltaEvent(seq, delta), onGap);
    this.expectedSeq++;
    if (this.listener) this.listener.delta(delta);
    else this.buffered.push(this.deltaEvent(seq, delta));
    if (this.heldBack) this.catchUp();
  }

  private deltaEvent(seq: number, delta: TokenDelta): RunnerEvent {
    return { requestId: this.requestId, seq, runnerId: "", event: { $case: "delta", value: delta } };
  }

  /**
   * The runner sent the events again from `nextSeq` on (the gap's repair; none: it no longer had
   * them). True when no gap is left; false when one is (the client then asks again, or fails).
   */
  resent(events: readonly RunnerEvent[]): boolean {
    this.repairing = false;
    if (this.ended) return true;
    for (const event of events) if (event.seq >= this.expectedSeq) (this.heldBack ??= new Map()).set(event.seq, event);
    if (this.heldBack) this.catchUp();
    if (this.heldBack === undefined) return true;
    this.repairing = true;
    return false;
  }

  private holdBack(event: RunnerEvent, onGap: GapHandler): void {
    const held = (this.heldBack ??= new Map());
    if (held.size >= MAX_HELD_BACK) {
      // Too far behind to catch up from memory: as a gap that cannot be filled.
      this.repairing = false;
      onGap(this, this.expectedSeq, event.seq, false);
      return;
    }
    held.set(event.seq, event);
    if (this.repairing) return;
    this.repairing = true;
    onGap(this, this.expectedSeq, event.seq, true);
  }

  /** Delivers the held-back events that follow on without a gap now. */
  private catchUp(): void {
    const held = this.heldBack!;
    for (let next = held.get(this.expectedSeq); next && !this.ended; next = held.get(this.expectedSeq)) {
      held.delete(this.expectedSeq);
      this.expectedSeq++;
      this.deliver(next);
    }
    if (held.size === 0 || this.ended) this.heldBack = undefined;
  }

  private deliver(event: RunnerEvent): void {
    if (this.listener) this.dispatch(event, this.listener);
    else this.buffered.push(event);
  }

  /** Ends the stream with an error (runner lost, gap, shutdown). */
  fail(error: DomainError): void {
    if (this.ended) return;
    this.ended = true;
    this.owner.release(this);
    if (this.listener) this.listener.failure(error);
    else this.buffered.push(error);
  }

  /** Ends the stream with an error and tells the runner to stop working on it. */
  abandon(error: DomainError): void {
    if (this.ended) return;
    this.fail(error);
    this.cancelRequested = true;
    this.sendCancel();
  }

  /** Asks the runner to stop (client went away); the stream ends silently. */
  cancel(): void {
    if (this.ended) return;
    this.ended = true;
    this.cancelRequested = true;
    this.owner.release(this);
    this.sendCancel();
  }

  /** Sends the cancel that was requested before the runner was known. */
  sendCancel(): void {
    if (this.cancelRequested) this.owner.cancel(this.requestId, this.model, this.admitted?.runnerId);
  }

  private dispatch(event: RunnerEvent, listener: GenerationListener): void {
    const e = event.event;
    if (!e) return;
    switch (e.$case) {
      case "delta":
        listener.delta(e.value);
        break;
      case "choiceEnd":
        listener.choiceEnd(e.value);
        break;
      case "choiceReset":
        listener.choiceReset?.(e.value.choiceIndex);
        break;
      case "final":
        if (!this.ended) {
          this.ended = true;
          this.owner.release(this);
        }
        listener.final(e.value);
        break;
    }
  }
}
