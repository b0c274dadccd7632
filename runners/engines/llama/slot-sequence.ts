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

  /** Evaluates `input` (after any pending token) and yields generated tokens. */
  async *generate(input: readonly Token[], options: SequenceEvaluateOptions): AsyncGenerator<Token> {
    const tokens = this.pending.length > 0 ? [...this.pending, ...input] : [...input];
    this.pending = [];
    if (tokens.length === 0) return;
    const tokensOut = this.sequence.evaluate(tokens, options)[Symbol.asyncIterator]();
    // The first call evaluates the input (a prompt may take several batches); every later one
    // decodes one token, as a step with the other generating sequences.
    let member = false;
    // A release held for a new request (DecodeSteps) goes now: this prompt joins the step.
    this.steps?.arriving();
    try {
      for (;;) {
        if (member) {
          await this.steps?.ready(this.order);
          // Asking for the next token queues a decode: wait while a slot's cache is being edited.
          if (this.gate.closed) await this.gate.wait();
          this.steps?.started();
        }
        let next: IteratorResult<Token>;
        try {
          next = await tokensOut.next();
        } finally {
          if (member) this.steps?.finished();
        }
        if (next.done) return;
        if (!member) {
          member = true;
          this.steps?.join();
        }
        this.pending = [next.value];
        yield next.value;
        this.pending = [];
      }
    } finally {
      if (member) this.steps?.leave();
      await tokensOut.return?.();
    }
  }
}
