import type { LlamaModel, Token } from "node-llama-cpp";

const CONTEXT_TOKENS = 4;
const MAX_PENDING = 4;

/**
 * Turns tokens into text one at a time. The tokens before are passed as context (SentencePiece
 * vocabularies decide leading spaces from them), and a token that ends inside a multi-byte UTF-8
 * character is held until the character completes. Control tokens in `shown` (a template's
 * markers, see thoughtSegment) come out as their text; other control tokens are left out.
 */
export class IncrementalDetokenizer {
  private context: Token[];
  private pending: Token[] = [];

  constructor(private readonly model: LlamaModel, precedingTokens: readonly Token[], private readonly shown?: ReadonlySet<Token>) {
    this.context = precedingTokens.slice(-CONTEXT_TOKENS);
  }

  push(token: Token): string {
    if (this.shown?.has(token)) {
      const text = this.flush() + this.model.detokenize([token], true);
      this.context = this.context.concat(token).slice(-CONTEXT_TOKENS);
      return text;
    }
    this.pending.push(token);
    const text = this.model.detokenize(this.pending, false, this.context);
    if (text.endsWith("\uFFFD") && this.pending.length < MAX_PENDING) return "";
    this.context = this.context.concat(this.pending).slice(-CONTEXT_TOKENS);
    this.pending = [];
    return text;
  }

  flush(): string {
    if (this.pending.length === 0) return "";
    const text = this.model.detokenize(this.pending, false, this.context);
    this.context = this.context.concat(this.pending).slice(-CONTEXT_TOKENS);
    this.pending = [];
    return text;
  }
}
