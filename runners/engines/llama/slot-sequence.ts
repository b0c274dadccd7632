import type { LlamaContextSequence, SequenceEvaluateOptions, Token } from "node-llama-cpp";
import type { DecodeGate } from "./decode-gate.js";
import type { DecodeSteps } from "./decode-steps.js";

let useCounter = 0;

/**
 * One decoding slot: a context sequence plus the bookkeeping node-llama-cpp leaves to callers.
 * `evaluate` yields a token before feeding it back, so the last token a loop received and
 * stopped on is not in the context yet: it is kept as `pending` and fed first next time.
 */
export class SlotSequence {
  private pending: Token[] = [];
  /** When a prompt was last put in this slot (a counter shared by the engine's slots; 0: never). */
  lastUsed = 0;

  /**
   * `order`: the sequence's id in its context (the index it was created at), by which steps
   * release their members.
   */
  constructor(readonly sequence: LlamaContextSequence, private readonly gate: DecodeGate, private readonly steps?: DecodeSteps, private readonly order = 0) {}

  /** Tokens in the context plus the pending one: what the model has "said" so far. */
  get length(): number {
    return this.sequence.nextTokenIndex + this.pending.length;
  }

  /** How many leading tokens of `prompt` this slot's context holds already (what reset would keep). */
  sharedPrefix(prompt: readonly Token[]): number {
    const held = this.sequence.contextTokens;
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
    const held = this.sequence.contextTokens;
    let common = 0;
    const limit = reuseCache ? Math.min(held.length, prompt.length) : 0;
    while (common < limit && held[common] === prompt[common]) common++;
    // The last prompt token must be evaluated again to get logits for the first new token.
    if (common > 0 && common === prompt.length) common--;
    if (common < this.sequence.nextTokenIndex) await this.erase(common);
    return prompt.slice(common);
  }

  /** Drops everything after the first `length` tokens (pending included). */
  async truncate(length: number): Promise<void> {
    const inContext = this.sequence.nextTokenIndex;
    if (length >= inContext) {
      this.pending = this.pending.slice(0, length - inContext);
      return;
    }
    this.pending = [];
    await this.erase(length);
  }

  private erase(from: number): Promise<void> {
    return this.gate.during(() => this.sequence.eraseContextTokenRanges([{ start: from, end: this.sequence.nextTokenIndex }]));
  }

  /**
   * Evaluates `input` (after any pending token) and returns the stream of generated tokens. The
   * caller reads it with `next()` until it returns undefined or it stops, and then calls `close()`
   * (in a finally). A hand-written stream rather than an async generator, over node-llama-cpp's
   * `evaluateWithMetadata` rather than `evaluate` (an async generator around it that only maps
   * each item to its token): every layer of async generator costs a chain of promises and
   * generator resumptions per token, on the thread that also prepares the next decode.
   */
  generate(input: readonly Token[], options: SequenceEvaluateOptions): TokenStream {
    const tokens = this.pending.length > 0 ? [...this.pending, ...input] : [...input];
    this.pending = [];
    return new TokenStream(this, tokens.length > 0 ? this.sequence.evaluateWithMetadata(tokens, {}, options) : undefined, this.gate, this.steps, this.order);
  }

  /** @internal The token a stream returned last, not fed back yet (see `pending`). */
  holdPending(token: Token | undefined): void {
    this.pending = token === undefined ? [] : [token];
  }
}

type EvaluationOutput = ReturnType<LlamaContextSequence["evaluateWithMetadata"]>;

/** Generated tokens of one `SlotSequence.generate` call. */
export class TokenStream {
  /** Past the first token: the sequence takes part in decode steps. */
  private member = false;
  private done = false;

  constructor(
    private readonly slot: SlotSequence,
    private tokensOut: EvaluationOutput | undefined,
    private readonly gate: DecodeGate,
    private readonly steps: DecodeSteps | undefined,
    private readonly order: number,
  ) {
    if (!tokensOut) this.done = true;
  }

  /**
   * The next generated token, or undefined when generation ended. The first call evaluates the
   * input (a prompt may take several batches); every later one decodes one token, as a step
   * with the other generating sequences.
   */
  async next(): Promise<Token | undefined> {
    if (this.done) return undefined;
    // Coming back for another token: the last one is fed back by this evaluation.
    this.slot.holdPending(undefined);
    const member = this.member;
    let item: Awaited<ReturnType<EvaluationOutput["next"]>>;
    try {
      if (member) {
        const ready = this.steps?.ready(this.order);
        if (ready) await ready;
        // Asking for the next token queues a decode: wait while a slot's cache is being edited.
        if (this.gate.closed) await this.gate.wait();
        this.steps?.started();
      }
      try {
        item = await this.tokensOut!.next();
      } finally {
        if (member) this.steps?.finished();
      }
    } catch (err) {
      await this.close();
      throw err;
    }
    if (item.done) {
      await this.close();
      return undefined;
    }
    if (!member) {
      this.member = true;
      this.steps?.join();
    }
    // Kept as pending until the caller asks for more: a caller that stops here has it unfed.
    this.slot.holdPending(item.value.token);
    return item.value.token;
  }

  /** Ends the evaluation (idempotent); the last token returned stays pending in the slot. */
  async close(): Promise<void> {
    this.done = true;
    if (this.member) {
      this.member = false;
      this.steps?.leave();
    }
    const tokensOut = this.tokensOut;
    this.tokensOut = undefined;
    await tokensOut?.return();
  }
}
