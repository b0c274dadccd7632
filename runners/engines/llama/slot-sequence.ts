import type { LlamaContextSequence, SequenceEvaluateOptions, Token } from "node-llama-cpp";

/**
 * One decoding slot: a context sequence plus the bookkeeping node-llama-cpp leaves to callers.
 * `evaluate` yields a token before feeding it back, so the last token a loop received and
 * stopped on is not in the context yet: it is kept as `pending` and fed first next time.
 */
export class SlotSequence {
  private pending: Token[] = [];

  constructor(readonly sequence: LlamaContextSequence) {}

  /** Tokens in the context plus the pending one: what the model has "said" so far. */
  get length(): number {
    return this.sequence.nextTokenIndex + this.pending.length;
  }

  /**
   * Prepares the sequence for a new prompt, reusing the longest prefix it already holds (the
   * system prompt and earlier turns of a conversation) and returns the tokens left to evaluate.
   */
  async reset(prompt: readonly Token[]): Promise<Token[]> {
    this.pending = [];
    const held = this.sequence.contextTokens;
    let common = 0;
    const limit = Math.min(held.length, prompt.length);
    while (common < limit && held[common] === prompt[common]) common++;
    // The last prompt token must be evaluated again to get logits for the first new token.
    if (common === prompt.length) common--;
    if (common < this.sequence.nextTokenIndex)
      await this.sequence.eraseContextTokenRanges([{ start: common, end: this.sequence.nextTokenIndex }]);
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
    await this.sequence.eraseContextTokenRanges([{ start: length, end: inContext }]);
  }

  /** Evaluates `input` (after any pending token) and yields generated tokens. */
  async *generate(input: readonly Token[], options: SequenceEvaluateOptions): AsyncGenerator<Token> {
    const tokens = this.pending.length > 0 ? [...this.pending, ...input] : [...input];
    this.pending = [];
    if (tokens.length === 0) return;
    for await (const token of this.sequence.evaluate(tokens, options)) {
      this.pending = [token];
      yield token;
      this.pending = [];
    }
  }

  /** Feeds tokens into the context without generating (text the template requires). */
  async feed(tokens: readonly Token[]): Promise<void> {
    const all = this.pending.length > 0 ? [...this.pending, ...tokens] : [...tokens];
    this.pending = [];
    if (all.length > 0) await this.sequence.evaluateWithoutGeneratingNewTokens(all);
  }
}
