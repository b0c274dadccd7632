import type { Final, TokenDelta, ChoiceEnd } from "../../proto/gen/tributary/v1/inference.js";
import { finishReasonName } from "../openai/mod.js";
import type { DomainError } from "../errors/mod.js";
import type { GenerationListener } from "../inference/mod.js";

// What one inference request did, collected while it runs: every request has one (usage rollups
// and metrics read it), and a request with `log: true` also keeps its bodies and prompt for its
// trace. Recording is a few assignments per event; nothing here blocks or allocates per token
// beyond a counter.

export type TraceEndpoint = "/v1/chat/completions" | "/v1/responses" | "/v1/responses/{name}";

/** How a request ended. */
export type TraceStatus = "success" | "error" | "cancelled" | "client_disconnected";

export interface ObservedUsage {
  inputTokens: number;
  cachedInputTokens: number;
  outputTokens: number;
}

/** What rebuilds a streamed response from the runner's events (ChatCompletionAccumulator). */
export interface StreamReassembly {
  delta(d: TokenDelta): void;
  choiceEnd(e: ChoiceEnd): void;
  /** The choice starts over (a preempted choice runs again): what it had so far goes. */
  reset(choiceIndex: number): void;
}

export class RequestObservation {
  /** Unix ms when the request arrived. */
  readonly receivedAt: number;
  /** performance.now() at arrival: the origin of every timing below. */
  private readonly t0: number;
  model = "";
  stream = false;
  /** The request asked for a trace. */
  log = false;
  batch = false;
  runnerId = "";
  /** Milliseconds after arrival. */
  rateLimitAdmittedMs: number | undefined;
  runnerAdmittedMs: number | undefined;
  firstTokenMs: number | undefined;
  endMs: number | undefined;
  queueWaitMs: number | undefined;
  promptTokens = 0;
  /** Output tokens seen in deltas (the usage of a request that ends without a final). */
  streamedTokens = 0;
  usage: ObservedUsage | undefined;
  finishReasons: string[] = [];
  /** Chunks (SSE events) written for a streamed response. */
  chunks = 0;
  /** Set when the request failed: the domain error. */
  error: DomainError | undefined;
  cancelled = false;
  /** log: true only. */
  requestBody: Buffer | string | undefined;
  responseBody: unknown;
  /** Builds the response when the trace is written (a stream reassembled from its chunks). */
  responseOf: (() => unknown) | undefined;
  /**
   * A logged stream's response being rebuilt from its events as they pass `wrap` (the route
   * sets it, and reads it in `responseOf`).
   */
  reassembly: StreamReassembly | undefined;
  renderedPrompt: string | undefined;
  /** Sampling parameters for the GenAI attributes. */
  request: { maxTokens?: number | null; temperature?: number | null; topP?: number | null } = {};
  responseId: string | undefined;

  constructor(readonly endpoint: TraceEndpoint, readonly requestId: string, now = Date.now(), t0 = performance.now()) {
    this.receivedAt = now;
    this.t0 = t0;
  }

  /** Milliseconds since arrival. */
  elapsed(): number {
    return performance.now() - this.t0;
  }

  rateLimitAdmitted(): void {
    this.rateLimitAdmittedMs ??= this.elapsed();
  }

  runnerAdmitted(runnerId: string, promptTokens: number, renderedPrompt?: string): void {
    this.runnerAdmittedMs ??= this.elapsed();
    this.runnerId = runnerId;
    this.promptTokens = promptTokens;
    if (this.log && renderedPrompt) this.renderedPrompt = renderedPrompt;
  }

  firstToken(): void {
    this.firstTokenMs ??= this.elapsed();
  }

  end(): void {
    this.endMs ??= this.elapsed();
  }

  final(f: Final): void {
    if (f.usage) this.usage = { inputTokens: f.usage.promptTokens, cachedInputTokens: f.usage.cachedPromptTokens, outputTokens: f.usage.completionTokens };
    if (f.queueWaitMs !== undefined) this.queueWaitMs = f.queueWaitMs;
    this.end();
  }

  delta(d: TokenDelta): void {
    if (this.firstTokenMs === undefined) this.firstToken();
    this.streamedTokens += d.tokens;
  }

  choiceEnd(e: ChoiceEnd): void {
    this.finishReasons.push(finishReasonName(e.finishReason));
  }

  /** What counts: the final usage, else the prompt and what was streamed before the end. */
  effectiveUsage(): ObservedUsage {
    return this.usage ?? { inputTokens: this.promptTokens, cachedInputTokens: 0, outputTokens: this.streamedTokens };
  }

  /** Wraps a generation listener so that its events are recorded too. */
  wrap(listener: GenerationListener): GenerationListener {
    return new ObservedListener(this, listener);
  }

  fail(err: DomainError): void {
    if (err._tag === "Cancelled") this.cancelled = true;
    else this.error ??= err;
    this.end();
  }
}

/**
 * RequestObservation.wrap's listener. A class, not an object of closures: a token passes through
 * it, and each closure and its context would be two more objects to reach, cold, per token.
 */
class ObservedListener implements GenerationListener {
  constructor(private readonly obs: RequestObservation, private readonly listener: GenerationListener) {}

  delta(d: TokenDelta): void {
    this.obs.delta(d);
    this.obs.reassembly?.delta(d);
    this.listener.delta(d);
  }

  choiceEnd(e: ChoiceEnd): void {
    this.obs.choiceEnd(e);
    this.obs.reassembly?.choiceEnd(e);
    this.listener.choiceEnd(e);
  }

  // The reassembly starts the choice over too: otherwise a logged stream whose choice was
  // preempted and rerun would hold both runs' text glued together.
  choiceReset(i: number): void {
    this.obs.reassembly?.reset(i);
    this.listener.choiceReset?.(i);
  }

  final(f: Final): void {
    this.obs.final(f);
    this.listener.final(f);
  }

  failure(err: DomainError): void {
    this.obs.fail(err);
    this.listener.failure(err);
  }
}
