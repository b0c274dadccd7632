import type { LlamaModel, Token } from "node-llama-cpp";

/** llama.cpp's token types (llama_token_type) that are not plain vocabulary pieces. */
const TOKEN_UNKNOWN = 2;
const TOKEN_CONTROL = 3;
const TOKEN_USER_DEFINED = 4;
const TOKEN_BYTE = 6;

const SPACE_MARK = "\u2581"; // SentencePiece's "▁": a space in the text

/**
 * The UTF-8 bytes each token stands for, as logprobs report them (`bytes`): a token may hold part
 * of a character, which a detokenized string cannot carry (the library turns it into U+FFFD). Read
 * from the vocabulary in the GGUF, the way llama.cpp's token_to_piece renders pieces:
 *   - SentencePiece ("llama", "t5"): `<0xNN>` byte tokens are that byte; "▁" is a space;
 *   - byte-level BPE ("gpt2": Qwen, Llama 3, ...): each character of a piece is one byte, through
 *     GPT-2's byte-to-character table;
 *   - control and user-defined tokens (`<|im_end|>`, `<think>`): their text;
 *   - other vocabularies: the detokenized text.
 * Tokens are looked up as they come, and kept.
 */
export class TokenBytes {
  private readonly known = new Map<number, Uint8Array>();
  private readonly kind: string;
  private readonly pieces: readonly string[];
  private readonly types: readonly number[];

  constructor(private readonly model: LlamaModel) {
    const ggml = (model.fileInfo.metadata as { tokenizer?: { ggml?: { model?: unknown; tokens?: unknown; token_type?: unknown } } }).tokenizer?.ggml;
    this.kind = typeof ggml?.model === "string" ? ggml.model : "";
    this.pieces = Array.isArray(ggml?.tokens) ? (ggml.tokens as string[]) : [];
    this.types = Array.isArray(ggml?.token_type) ? (ggml.token_type as number[]) : [];
  }

  of(token: number): Uint8Array {
    let bytes = this.known.get(token);
    if (!bytes) this.known.set(token, (bytes = this.read(token)));
    return bytes;
  }

  private read(token: number): Uint8Array {
    const piece = this.pieces[token];
    if (typeof piece !== "string") return utf8(this.model.detokenize([token as Token], true));
    const type = this.types[token] ?? 1;
    if (type === TOKEN_CONTROL || type === TOKEN_USER_DEFINED || type === TOKEN_UNKNOWN) return utf8(piece);
    if (this.kind === "llama" || this.kind === "t5") {
      if (type === TOKEN_BYTE) {
        const byte = /^<0x([0-9A-Fa-f]{2})>$/.exec(piece);
        if (byte) return Uint8Array.of(parseInt(byte[1]!, 16));
      }
      return utf8(piece.replaceAll(SPACE_MARK, " "));
    }
    if (this.kind === "gpt2") {
      const out = new Uint8Array(piece.length);
      for (let i = 0; i < piece.length; i++) {
        const byte = BYTE_OF_CHAR.get(piece.charCodeAt(i));
        // Not a byte-level piece after all: render it as llama.cpp's detokenizer does.
        if (byte === undefined) return utf8(this.model.detokenize([token as Token], true));
        out[i] = byte;
      }
      return out;
    }
    return utf8(this.model.detokenize([token as Token], true));
  }
}

const encoder = new TextEncoder();
const utf8 = (text: string) => encoder.encode(text);

/** GPT-2's bytes_to_unicode, inverted: printable bytes stand for themselves, the others for 256 + n. */
const BYTE_OF_CHAR: ReadonlyMap<number, number> = (() => {
  const map = new Map<number, number>();
  let shifted = 0;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    map.set(printable ? b : 256 + shifted++, b);
  }
  return map;
})();
