import type { SequenceEvaluateOptions, Token } from "node-llama-cpp";
import type { NativeContext, NativeSampler } from "./addon-context.js";
import type { DecodeSteps } from "./decode-steps.js";
import { PROBE_OPTIONS, type LogprobProbe, type LogprobRead } from "./logprob-reads.js";

let useCounter = 0;

/** The sequence has no room for the next input: the choice ends with `length`. */
export class ContextFullError extends Error {
  constructor() {
    super("the slot's context is full");
    this.name = "ContextFullError";
  }
}

/** What a slot needs from its context: the step owner, KV edits, samplers, end-of-generation tokens. */
export interface SlotContext {
  native: NativeContext;
  steps: DecodeSteps;
  /** Tokens one sequence can hold. */
  contextSize: number;
  createSampler(options: SequenceEvaluateOptions): NativeSampler;
  isEogToken(token: Token): boolean;
}

/**
 * One decoding slot: a sequence of the context and the tokens its KV cells hold. `generate`
 * yields a token before feeding it back, so the last token a loop received and stopped on is
 * not in the context yet: it is kept as `pending` and fed first next time.
 */
export class SlotSequence {
  /** Tokens whose KV cells the sequence holds, by position. */
  private held: Token[] = [];
  private pending: Token[] = [];
  /** When a prompt was last put in this slot (a counter shared by the engine's slots; 0: never). */
  lastUsed = 0;
  /** With generate's `readLogprobs`: the logprobs read of the token it last yielded (logprob-reads.ts). */
  lastLogprobs: LogprobRead | undefined;

  constructor(private readonly context: SlotContext, readonly sequenceId: number) {}

  /** Tokens in the context plus the pending one: what the model has "said" so far. */
  get length(): number {
    return this.held.length + this.pending.length;
  }

  /** How many leading tokens of `prompt` this slot's context holds already (what reset would keep). */
  sharedPrefix(prompt: readonly Token[]): number {
    const held = this.held;
    const limit = Math.min(held.length, prompt.length);
    let common = 0;
    while (common < limit && held[common] === prompt[common]) common++;
    return common;
  }

  /**
   * Prepares the sequence for a new prompt and returns the tokens left to evaluate. With
   * `reuseCache`, the longest prefix the sequence already holds (the system prompt, earlier
   * turns of a conversation) is kept. Without it the whole prompt is evaluated again: logits of
   * a prompt evaluated in one piece can differ in the last bits from those of a cached prefix
   * plus the rest, so requests that must be reproducible (seeded ones) do not reuse the cache.
   */
  async reset(prompt: readonly Token[], reuseCache: boolean): Promise<Token[]> {
    this.pending = [];
    this.lastUsed = ++useCounter;
    let common = reuseCache ? this.sharedPrefix(prompt) : 0;
    // The last prompt token must be evaluated again to get logits for the first new token.
    if (common > 0 && common === prompt.length) common--;
    if (common < this.held.length) common = await this.erase(common);
    return prompt.slice(common);
  }

  /** Drops everything after the first `length` tokens (pending included). */
  async truncate(length: number): Promise<void> {
    const inContext = this.held.length;
    if (length >= inContext) {
      this.pending = this.pending.slice(0, length - inContext);
      return;
    }
    const kept = this.held.slice(0, length);
    const from = await this.erase(length);
    // A memory that cannot drop a partial range was cleared: its kept tokens are evaluated again.
    this.pending = kept.slice(from);
  }

  /** Drops the KV cells from `from` on; returns how many tokens the sequence still holds. */
  private erase(from: number): Promise<number> {
    return this.context.steps.edit(() => {
      if (!this.context.native.removeTokenCellsFromSequence(this.sequenceId, from, -1)) {
        this.context.native.removeTokenCellsFromSequence(this.sequenceId, 0, -1);
        from = 0;
      }
      this.held.length = from;
      return from;
    });
  }

  /**
   * Evaluates `input` (after any pending token) and yields generated tokens, until an
   * end-of-generation token (not yielded) or the caller stops. Samples with a sampler of its
   * own, configured once from `options` (seed, penalties over their window, grammar state).
   * With `readLogprobs`, each token's logprobs are read too (`lastLogprobs`).
   * Throws ContextFullError when the next input does not fit the sequence.
   */
  async *generate(input: readonly Token[], options: SequenceEvaluateOptions, readLogprobs = false): AsyncGenerator<Token> {
    let feed = this.pending.length > 0 ? [...this.pending, ...input] : [...input];
    this.pending = [];
    this.lastLogprobs = undefined;
    if (feed.length === 0) return;
    const context = this.context;
    const sampler = context.createSampler(options);
    const probe: LogprobProbe | undefined = readLogprobs
      ? { top: context.createSampler(PROBE_OPTIONS.top), whole: context.createSampler(PROBE_OPTIONS.whole), read: undefined }
      : undefined;
    // A step held for a new request (DecodeSteps' linger) goes now: this input joins it.
    context.steps.arriving();
    try {
      for (;;) {
        const position = this.held.length;
        if (position + feed.length > context.contextSize) {
          this.pending = feed;
          throw new ContextFullError();
        }
        let token: number;
        try {
          token = await context.steps.decode(this.sequenceId, position, Uint32Array.from(feed), sampler, probe);
        } catch (err) {
          // Whatever part of the input reached the cache is dropped with it.
          await this.erase(position);
          throw err;
        }
        for (const t of feed) this.held.push(t);
        if (token < 0) throw new Error("Failed to sample next token");
        if (context.isEogToken(token as Token)) return;
        this.pending = [token as Token];
        if (probe) this.lastLogprobs = probe.read;
        yield token as Token;
        feed = this.pending;
        this.pending = [];
      }
    } finally {
      sampler.dispose();
      probe?.top.dispose();
      probe?.whole.dispose();
      context.steps.vacated();
    }
  }
}
