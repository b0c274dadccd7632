import {
  ErrorCode,
  FinishReason,
  Priority,
  type Error as ProtoError,
  type TokenLogprob,
  type ToolCallDelta,
} from "../../proto/gen/tributary/v1/inference.js";
import type { Logger } from "../../lib/log.js";
import type { Engine, PreparedRequest } from "../engines/engine.js";
import { PriorityFifo } from "./job-queue.js";

/** Receives everything that happens to one request, in order. */
export interface RequestObserver {
  delta(choiceIndex: number, text: string, tokens: number, logprobs?: TokenLogprob[]): void;
  /** Reasoning text (an observer that leaves it out, such as a benchmark's, does not get it). */
  reasoning?(choiceIndex: number, text: string, tokens: number): void;
  toolCall(choiceIndex: number, delta: ToolCallDelta): void;
  choiceEnd(choiceIndex: number, finishReason: FinishReason, completionTokens: number, reasoningTokens?: number): void;
  /** A preempted batch choice will run again from the start: forget what it produced so far. */
  choiceReset(choiceIndex: number): void;
  /** A choice of the request got a slot (called for each choice; the first call ends its queue wait). */
  slotStarted?(): void;
  /** Called once, last. `error` is set when the request failed or was abandoned. */
  /**
   * `cachedPromptTokens`: of the prompt, the tokens the engine found cached (the least over its
   * choices); `reasoningTokens`: of the completion tokens, the reasoning ones.
   */
  final(promptTokens: number, completionTokens: number, error?: ProtoError, cachedPromptTokens?: number, reasoningTokens?: number): void;
}

export class AdmissionError extends Error {
  override name = "AdmissionError";
  constructor(readonly code: ErrorCode, message: string) {
    super(message);
  }
}

interface RequestState {
  readonly id: string;
  readonly prepared: PreparedRequest;
  readonly observer: RequestObserver;
  readonly controller: AbortController;
  readonly deadlineTimer: NodeJS.Timeout | undefined;
  choicesLeft: number;
  /** Choices holding a slot right now. */
  running: number;
  completionTokens: number;
  reasoningTokens: number;
  /** The least number of cached prompt tokens over the choices that ran (undefined before one did). */
  cachedPromptTokens?: number;
  error: ProtoError | undefined;
  /** True once any choice holds a slot: the request no longer counts against the queue bound. */
  started: boolean;
  finished: boolean;
  /** 0 interactive, 1 batch. */
  readonly lane: 0 | 1;
}

interface ChoiceJob {
  readonly request: RequestState;
  readonly choiceIndex: number;
  readonly cancelled: boolean;
}

/** One choice holding a slot. */
interface RunningChoice {
  readonly job: ChoiceJob;
  /** Aborts this choice alone (preemption); the request's own abort reaches it too. */
  readonly controller: AbortController;
  preempted: boolean;
}

export interface SchedulerStats {
  slotsTotal: number;
  slotsBusy: number;
  queueLength: number;
  queueLimit: number;
  /** Of slotsBusy: slots decoding batch choices. */
  batchRunning: number;
  /** Of queueLength: waiting batch requests. */
  batchQueueLength: number;
}

/**
 * Continuous batching over the engine's slots: a choice takes a free slot as soon as one frees
 * (between decode steps, since the engine batches whatever sequences are active each step),
 * otherwise it waits in a bounded FIFO queue. Cancels and deadlines abort running choices,
 * which free their slot within one decode step.
 *
 * Two classes of work: interactive requests go before batch requests, and each class has its
 * own queue bound, so batch work can never make an interactive request bounce with QueueFull. When
 * an interactive choice waits and no slot is free, the most recently started batch choice is
 * preempted: aborted (its slot frees within a decode step), announced with choiceReset, and put
 * back at the head of the batch lane to run again from the start. Batch work thus fills every
 * idle slot without adding more than a decode step to an interactive request's wait.
 */
export class Scheduler {
  private readonly freeSlots: number[] = [];
  private readonly queue = new PriorityFifo<ChoiceJob>();
  private readonly requests = new Map<string, RequestState>();
  private readonly running = new Set<RunningChoice>();
  /** Requests waiting for their first slot, per lane. */
  private readonly queued: [number, number] = [0, 0];
  private draining = false;
  private idleWaiters: Array<() => void> = [];

  constructor(
    private readonly engine: Engine,
    private readonly queueLimit: number,
    private readonly log: Logger,
  ) {
    for (let s = engine.slots - 1; s >= 0; s--) this.freeSlots.push(s);
  }

  get stats(): SchedulerStats {
    return {
      slotsTotal: this.engine.slots,
      slotsBusy: this.engine.slots - this.freeSlots.length,
      queueLength: this.queued[0] + this.queued[1],
      queueLimit: this.queueLimit,
      batchRunning: [...this.running].filter((r) => r.job.request.lane === 1).length,
      batchQueueLength: this.queued[1],
    };
  }

  /**
   * Admits a prepared request: it starts at once when slots are free, else it queues.
   * Returns its queue position (0 = started). Throws AdmissionError when the queue is full.
   */
  submit(prepared: PreparedRequest, observer: RequestObserver): number {
    const id = prepared.request.requestId;
    if (this.draining) throw new AdmissionError(ErrorCode.ERROR_CODE_DRAINING, "runner is shutting down");
    if (this.requests.has(id)) throw new AdmissionError(ErrorCode.ERROR_CODE_INVALID_REQUEST, `request ${id} is already running`);
    const lane = prepared.request.priority === Priority.PRIORITY_BATCH ? 1 : 0;
    // Interactive work queues behind interactive work only; batch work behind everything.
    const mustQueue = this.freeSlots.length < 1 || this.queued[0] > 0 || (lane === 1 && this.queued[1] > 0);
    if (mustQueue && this.queued[lane] >= this.queueLimit)
      throw new AdmissionError(
        ErrorCode.ERROR_CODE_QUEUE_FULL,
        `the model's ${lane === 1 ? "batch " : ""}queue is full (${this.queueLimit} waiting requests)`,
      );

    const deadline = prepared.request.deadlineUnixMs;
    const state: RequestState = {
      id,
      prepared,
      observer,
      controller: new AbortController(),
      deadlineTimer: deadline > 0
        ? setTimeout(() => this.abort(id, ErrorCode.ERROR_CODE_DEADLINE_EXCEEDED, "the request's deadline passed"), Math.max(0, deadline - Date.now()))
        : undefined,
      choicesLeft: prepared.choices,
      running: 0,
      completionTokens: 0,
      reasoningTokens: 0,
      error: undefined,
      started: false,
      finished: false,
      lane,
    };
    state.deadlineTimer?.unref();
    this.requests.set(id, state);
    for (let c = 0; c < prepared.choices; c++) {
      const job: ChoiceJob = { request: state, choiceIndex: c, get cancelled() { return state.finished || state.controller.signal.aborted; } };
      this.queue.push(job, lane);
    }
    this.queued[lane]++;
    const position = this.queued[0] + (lane === 1 ? this.queued[1] : 0);
    this.pump();
    return state.started ? 0 : position;
  }

  /** Whether a request is still here, queued or running (not yet finished). */
  holds(requestId: string): boolean {
    const state = this.requests.get(requestId);
    return state !== undefined && !state.finished;
  }

  /** Cancels a request wherever it is; unknown ids are ignored (it may have just finished). */
  cancel(requestId: string): boolean {
    return this.abort(requestId, ErrorCode.ERROR_CODE_CANCELLED, "the request was cancelled");
  }

  /** Stops admitting; waits for in-flight work up to `timeoutMs`, then aborts what is left. */
  async drain(timeoutMs: number): Promise<void> {
    this.draining = true;
    if (this.requests.size === 0) return;
    const idle = new Promise<void>((resolve) => this.idleWaiters.push(resolve));
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(true), timeoutMs)));
    const expired = await Promise.race([idle.then(() => false), timedOut]);
    clearTimeout(timer);
    if (expired) {
      this.log.warn("drain timeout: aborting in-flight requests", { requests: this.requests.size });
      for (const id of [...this.requests.keys()]) this.abort(id, ErrorCode.ERROR_CODE_DRAINING, "the runner shut down before the request finished");
      await idle;
    }
  }

  private abort(requestId: string, code: ErrorCode, message: string): boolean {
    const state = this.requests.get(requestId);
    if (!state || state.finished) return false;
    state.error ??= { code, message, param: "" };
    state.controller.abort();
    // Queued choices of an aborted request are skipped lazily by the queue.
    if (!state.started) {
      state.started = true;
      this.queued[state.lane]--;
    }
    // Running choices see the signal and settle the request when the last one returns.
    if (state.running === 0) this.finish(state);
    return true;
  }

  private pump(): void {
    while (this.freeSlots.length > 0) {
      const job = this.queue.shift();
      if (!job) break;
      const state = job.request;
      if (!state.started) {
        state.started = true;
        this.queued[state.lane]--;
      }
      const slot = this.takeSlot(state.prepared);
      state.running++;
      void this.run(job, slot);
    }
    this.preemptForInteractive();
  }

  /**
   * A free slot for a choice of `prepared`: the one the engine says holds most of its prompt
   * (its cached prefix is reused), else the one freed last.
   */
  private takeSlot(prepared: PreparedRequest): number {
    const index = this.freeSlots.length > 1 && this.engine.preferredSlot ? this.engine.preferredSlot(prepared, this.freeSlots) : -1;
    if (index < 0 || index >= this.freeSlots.length) return this.freeSlots.pop()!;
    return this.freeSlots.splice(index, 1)[0]!;
  }

  /** Frees a slot for each waiting interactive choice by preempting running batch choices. */
  private preemptForInteractive(): void {
    if (this.freeSlots.length > 0) return;
    let waiting = this.queue.live(0);
    if (waiting === 0) return;
    const running = [...this.running];
    for (const r of running) if (r.preempted) waiting--;
    for (let i = running.length - 1; i >= 0 && waiting > 0; i--) {
      const r = running[i]!;
      if (r.preempted || r.job.request.lane !== 1) continue;
      r.preempted = true;
      r.controller.abort();
      waiting--;
    }
  }

  private async run(job: ChoiceJob, slot: number): Promise<void> {
    const state = job.request;
    const choice = job.choiceIndex;
    const current: RunningChoice = { job, controller: new AbortController(), preempted: false };
    const forward = () => current.controller.abort();
    state.controller.signal.addEventListener("abort", forward, { once: true });
    if (state.controller.signal.aborted) current.controller.abort();
    this.running.add(current);
    state.observer.slotStarted?.();
    const sink = {
      text: (text: string, tokens: number, logprobs?: TokenLogprob[]) => state.observer.delta(choice, text, tokens, logprobs),
      reasoning: (text: string, tokens: number) => state.observer.reasoning?.(choice, text, tokens),
      toolCall: (delta: ToolCallDelta) => state.observer.toolCall(choice, delta),
    };
    let preempted = false;
    try {
      const outcome = await this.engine.runChoice(state.prepared, choice, slot, sink, current.controller.signal);
      preempted = current.preempted && !state.controller.signal.aborted;
      if (!preempted) {
        state.completionTokens += outcome.completionTokens;
        state.reasoningTokens += outcome.reasoningTokens ?? 0;
        state.cachedPromptTokens = Math.min(state.cachedPromptTokens ?? Infinity, outcome.cachedPromptTokens ?? 0);
        if (!state.controller.signal.aborted) state.observer.choiceEnd(choice, outcome.finishReason, outcome.completionTokens, outcome.reasoningTokens ?? 0);
      }
    } catch (err) {
      preempted = current.preempted && !state.controller.signal.aborted;
      if (!preempted) {
        this.log.error("engine failed while decoding", { requestId: state.id, err });
        state.error ??= { code: ErrorCode.ERROR_CODE_ENGINE_FAILURE, message: "the engine failed while generating", param: "" };
        state.controller.abort();
      }
    } finally {
      state.controller.signal.removeEventListener("abort", forward);
      this.running.delete(current);
      this.freeSlots.push(slot);
      state.running--;
      if (preempted) {
        // Runs again from the start, ahead of batch work that has not started yet.
        state.observer.choiceReset(choice);
        this.queue.unshift(job, 1);
      } else {
        state.choicesLeft--;
        if (state.choicesLeft === 0 || (state.controller.signal.aborted && state.running === 0)) this.finish(state);
      }
      this.pump();
    }
  }

  private finish(state: RequestState): void {
    if (state.finished) return;
    state.finished = true;
    if (state.deadlineTimer) clearTimeout(state.deadlineTimer);
    this.requests.delete(state.id);
    state.observer.final(state.prepared.promptTokens, state.completionTokens, state.error, state.cachedPromptTokens ?? 0, state.reasoningTokens);
    if (this.requests.size === 0 && this.idleWaiters.length > 0) {
      const waiters = this.idleWaiters;
      this.idleWaiters = [];
      for (const w of waiters) w();
    }
  }
}
