import type { FinishReason, GenerateRequest, TokenLogprob, ToolCallDelta } from "../../proto/gen/tributary/v1/inference.js";
import type { ErrorCode } from "../../proto/gen/tributary/v1/inference.js";

/** What an engine emits while it decodes one choice. Calls happen on the runner's event loop. */
export interface ChoiceSink {
  /** Answer text; `logprobs` (when the request asked for them): one per token of `text`. */
  text(text: string, tokens: number, logprobs?: TokenLogprob[]): void;
  /** Reasoning text (the model's thought segment), kept apart from the answer. */
  reasoning(text: string, tokens: number): void;
  toolCall(delta: ToolCallDelta): void;
}

export interface ChoiceOutcome {
  finishReason: FinishReason;
  completionTokens: number;
  /** Prompt tokens found in the slot's cache (not evaluated again). */
  cachedPromptTokens?: number;
  /** Of completionTokens: those of the reasoning. */
  reasoningTokens?: number;
}

/** A request the engine has checked and tokenized, ready to be scheduled. */
export interface PreparedRequest {
  readonly request: GenerateRequest;
  readonly promptTokens: number;
  /** Output budget per choice after defaults and limits. */
  readonly maxTokens: number;
  readonly choices: number;
  /** Messages dropped from the front to fit the context (truncation auto). */
  readonly droppedMessages?: number;
  /** The prompt as the engine renders it (chat template applied), when the request asked for it. */
  readonly renderedPrompt?: string;
}

/** A request the engine refuses (bad parameter, too long): the runner rejects it at admission. */
export class EngineRequestError extends Error {
  override name = "EngineRequestError";
  constructor(readonly code: ErrorCode, message: string, readonly param = "") {
    super(message);
  }
}

/** The decode threads a CPU runner chose while serving (llama's ThreadTuner), for probes and metrics. */
export interface DecodeThreadsStatus {
  /** Threads by width class, for the classes seen: steps of `fromTokens` tokens and up (to the next class) decode on `threads`. */
  byWidth: Array<{ fromTokens: number; threads: number }>;
  probes: number;
  changes: number;
}

/**
 * An engine turns prepared requests into tokens, many sequences at once. It owns `slots`
 * decoding sequences; the scheduler decides which choice runs in which slot and when.
 */
export interface Engine {
  readonly kind: "llama" | "sim";
  readonly slots: number;
  /** Loads weights (or whatever the engine needs) before the runner reports ready. */
  load(): Promise<void>;
  /** Validates and tokenizes; throws EngineRequestError for requests that can never run. */
  prepare(request: GenerateRequest): Promise<PreparedRequest>;
  /**
   * Of the free slots `free`, the index of the one to run a choice of `prepared` in (the one whose
   * cache holds the longest prefix of its prompt), or -1 when none is better than another.
   */
  preferredSlot?(prepared: PreparedRequest, free: readonly number[]): number;
  /** Decodes one choice in slot `slot` until a finish condition or until `signal` aborts. */
  runChoice(prepared: PreparedRequest, choiceIndex: number, slot: number, sink: ChoiceSink, signal: AbortSignal): Promise<ChoiceOutcome>;
  dispose(): Promise<void>;
  /** The decode threads chosen while serving (CPU runners of threads > 1 whose threads are tuned). */
  decodeThreads?(): DecodeThreadsStatus | undefined;
}
