import type { LlamaModel, Token } from "node-llama-cpp";

const CONTEXT_TOKENS = 4;
const MAX_PENDING = 4;

/**
 * Turns tokens into text one at a time. The tokens before are passed as context (SentencePiece
 * vocabularies decide leading spaces from them), and a token that ends inside a multi-byte UTF-8
 * character is held until the character completes.
 */
export class IncrementalDetokenizer {
  private context: Token[];
  private pending: Token[] = [];

  constructor(private readonly model: LlamaModel, precedingTokens: readonly Token[]) {
    this.context = precedingTokens.slice(-CONTEXT_TOKENS);
  }

  push(token: Token): string {
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
    this.pending = [];
    return text;
  }
}
