import { renameSync, rmSync } from "node:fs";
import { TensorType, ValueType, writeGguf, type TensorToWrite, type Value } from "./gguf.js";

// Tiny models whose replies are scripted, for tests of what a serving stack does with a model's
// output (splitting reasoning from the answer, tool calls after it, streaming boundaries), with a
// real llama.cpp forward pass and a real tokenizer. A qwen3-architecture GGUF with a byte-level BPE
// vocabulary and the special tokens of a chat format (Qwen3's: <|im_start|>, <|im_end|>, <think>,
// </think>, <tool_call>, ...; or gpt-oss's harmony tokens: <|start|>, <|channel|>, <|message|>,
// <|end|>, <|return|>, ...) whose one transformer layer is all zeros: what reaches the output is the
// current token's embedding, so the next token depends on the current one only (a bigram
// machine). Each scripted token's embedding is a one-hot vector of its own, and the output matrix
// maps it to its successor with a margin that makes the successor certain at any temperature.
// A script starts after the token a generation prompt ends with: Qwen's "\n"
// (`<|im_start|>assistant\n`) or "\n\n" (one merged token; the empty thought
// `<think>\n\n</think>\n\n` of thinking turned off); harmony's "t" (`<|start|>assistant`, which
// the vocabulary, with no merges but "\n\n", tokenizes byte by byte). A token has one successor:
// a token a reply needs twice with different successors (harmony's `<|channel|>` of each
// message) must be spelled the second time in plain pieces ("<|chan", "nel|>").

/** GPT-2's bytes_to_unicode: how byte-level BPE vocabularies write each byte as a character. */
const BYTE_CHARS: readonly string[] = (() => {
  const chars: string[] = [];
  let shifted = 0;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    chars.push(String.fromCharCode(printable ? b : 256 + shifted++));
  }
  return chars;
})();

/** A text as a byte-level BPE piece ("\n\nHi" -> "ĊĊHi"). */
export function bytePiece(text: string): string {
  return Array.from(Buffer.from(text, "utf8"), (b) => BYTE_CHARS[b]).join("");
}

const TOKEN_NORMAL = 1;
const TOKEN_CONTROL = 3;
const TOKEN_USER_DEFINED = 4;

/** A chat format's special tokens, and the token its generation prompt ends with. */
export interface ScriptedFormat {
  /** general.name of the model. */
  name: string;
  /** Control tokens (the detokenizer leaves them out of text, unless llama.cpp renders them by name). */
  control: readonly string[];
  /** User-defined tokens (shown as written). */
  userDefined: readonly string[];
  eos: string;
  bos: string;
  padding: string;
  /** The text of the token a generation prompt ends with: a reply's script starts after it. */
  promptEnd: string;
}

export const QWEN3_FORMAT: ScriptedFormat = {
  name: "scripted-qwen3",
  control: ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
  userDefined: ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"],
  eos: "<|im_end|>",
  bos: "<|endoftext|>",
  padding: "<|endoftext|>",
  promptEnd: "\n",
};

/**
 * gpt-oss's harmony tokens, all control tokens as in its GGUF files (llama.cpp itself renders
 * <|start|>, <|channel|>, <|message|>, <|constrain|> and, with <|return|> and <|call|> present,
 * <|end|>, which it then no longer takes for an end of generation).
 */
export const HARMONY_FORMAT: ScriptedFormat = {
  name: "scripted-gpt-oss",
  control: ["<|startoftext|>", "<|endoftext|>", "<|return|>", "<|constrain|>", "<|channel|>", "<|start|>", "<|end|>", "<|message|>", "<|call|>"],
  userDefined: [],
  eos: "<|return|>",
  bos: "<|startoftext|>",
  padding: "<|endoftext|>",
  promptEnd: "t",
};

export interface ScriptedModel {
  /** Its special tokens and prompt end (QWEN3_FORMAT when not given). */
  format?: ScriptedFormat;
  /** The reply after a generation prompt (after its format's promptEnd): special tokens by name, other tokens by their text. */
  reply: readonly string[];
  /** The reply after a prompt ending "\n\n" (Qwen3 with thinking turned off), if any. */
  afterBlankLine?: readonly string[];
  /** A Jinja chat template to carry (tokenizer.chat_template); none by default. */
  chatTemplate?: string;
}

const EMBEDDING = 64;
const HEAD_DIM = 32;
const FEED_FORWARD = 64;
/** Logit of a scripted successor: 4 x sqrt(64) after the RMS norm of a one-hot vector, against 0. */
const SUCCESSOR_WEIGHT = 4;

/** The vocabulary and the successor of each scripted token, as token ids. */
export function scriptedVocabulary(model: ScriptedModel): { pieces: string[]; types: number[]; merges: string[]; next: Map<number, number> } {
  const format = model.format ?? QWEN3_FORMAT;
  const isSpecial = (t: string) => format.control.includes(t) || format.userDefined.includes(t);
  const pieces = [...BYTE_CHARS];
  const types = pieces.map(() => TOKEN_NORMAL);
  const ids = new Map<string, number>();
  pieces.forEach((p, i) => ids.set(p, i));
  const add = (piece: string, type: number) => {
    const known = ids.get(piece);
    if (known !== undefined) return known;
    ids.set(piece, pieces.length);
    pieces.push(piece);
    types.push(type);
    return pieces.length - 1;
  };
  const blankLine = add(bytePiece("\n\n"), TOKEN_NORMAL);
  for (const t of format.control) add(t, TOKEN_CONTROL);
  for (const t of format.userDefined) add(t, TOKEN_USER_DEFINED);
  const next = new Map<number, number>();
  const chain = (start: number, script: readonly string[]) => {
    let from = start;
    for (const t of script) {
      if (t === format.promptEnd || t === "\n\n") throw new Error(`a script token cannot be ${JSON.stringify(format.promptEnd)} or "\\n\\n": scripts start after them`);
      const id = isSpecial(t) ? ids.get(t)! : add(bytePiece(t), TOKEN_NORMAL);
      if (next.has(from)) throw new Error(`token ${JSON.stringify(pieces[from])} would have two successors: each scripted token may appear once`);
      next.set(from, id);
      from = id;
    }
  };
  chain(ids.get(bytePiece(format.promptEnd))!, model.reply);
  if (model.afterBlankLine) chain(blankLine, model.afterBlankLine);
  // "\n\n" is one token, as in Qwen's vocabulary, so a prompt with thinking turned off ends on it.
  return { pieces, types, merges: [`${bytePiece("\n")} ${bytePiece("\n")}`], next };
}

function f32Tensor(name: string, dims: number[], values: (index: number) => number): TensorToWrite {
  return {
    name,
    dims: dims.map(BigInt),
    type: TensorType.F32,
    fill: (chunk, at) => {
      for (let i = 0; i + 3 < chunk.length; i += 4) chunk.writeFloatLE(values((at + i) / 4), i);
    },
  };
}

/** Writes the scripted model to `path` (through a temporary file). */
export function writeScriptedModel(path: string, model: ScriptedModel): void {
  const { pieces, types, merges, next } = scriptedVocabulary(model);
  const vocab = pieces.length;
  const sources = [...next.keys()];
  if (sources.length > EMBEDDING) throw new Error(`at most ${EMBEDDING} scripted tokens`);
  const slot = new Map(sources.map((id, i) => [id, i]));
  // Output row t has a weight at the slot of every token whose successor is t (several scripts may end alike).
  const predecessors = new Map<number, Set<number>>();
  for (const [from, to] of next) {
    if (!predecessors.has(to)) predecessors.set(to, new Set());
    predecessors.get(to)!.add(slot.get(from)!);
  }
  const format = model.format ?? QWEN3_FORMAT;
  const id = (t: string) => pieces.indexOf(t);
  const u32 = (value: number): Value => ({ type: ValueType.U32, value });
  const f32 = (value: number): Value => ({ type: ValueType.F32, value });
  const str = (value: string): Value => ({ type: ValueType.STRING, value });
  const metadata = new Map<string, Value>([
    ["general.architecture", str("qwen3")],
    ["general.name", str(format.name)],
    ["general.file_type", u32(0)], // all F32
    ["general.alignment", u32(32)],
    ["qwen3.context_length", u32(2048)],
    ["qwen3.embedding_length", u32(EMBEDDING)],
    ["qwen3.block_count", u32(1)],
    ["qwen3.feed_forward_length", u32(FEED_FORWARD)],
    ["qwen3.attention.head_count", u32(2)],
    ["qwen3.attention.head_count_kv", u32(1)],
    ["qwen3.attention.key_length", u32(HEAD_DIM)],
    ["qwen3.attention.value_length", u32(HEAD_DIM)],
    ["qwen3.attention.layer_norm_rms_epsilon", f32(1e-6)],
    ["qwen3.rope.freq_base", f32(1e6)],
    ["tokenizer.ggml.model", str("gpt2")],
    ["tokenizer.ggml.pre", str("qwen2")],
    ["tokenizer.ggml.tokens", { type: ValueType.ARRAY, itemType: ValueType.STRING, items: pieces }],
    ["tokenizer.ggml.token_type", { type: ValueType.ARRAY, itemType: ValueType.I32, items: types }],
    ["tokenizer.ggml.merges", { type: ValueType.ARRAY, itemType: ValueType.STRING, items: merges }],
    ["tokenizer.ggml.eos_token_id", u32(id(format.eos))],
    ["tokenizer.ggml.padding_token_id", u32(id(format.padding))],
    ["tokenizer.ggml.bos_token_id", u32(id(format.bos))],
    ["tokenizer.ggml.add_bos_token", { type: ValueType.BOOL, value: false }],
  ]);
  if (model.chatTemplate) metadata.set("tokenizer.chat_template", str(model.chatTemplate));
  const zeros = () => 0;
  const ones = () => 1;
  const d = EMBEDDING;
  const tensors: TensorToWrite[] = [
    // Element (e, t) of a [d, vocab] tensor is at t * d + e.
    f32Tensor("token_embd.weight", [d, vocab], (i) => (slot.get(Math.floor(i / d)) === i % d ? 1 : 0)),
    f32Tensor("blk.0.attn_norm.weight", [d], ones),
    f32Tensor("blk.0.attn_q.weight", [d, 2 * HEAD_DIM], zeros),
    f32Tensor("blk.0.attn_k.weight", [d, HEAD_DIM], zeros),
    f32Tensor("blk.0.attn_v.weight", [d, HEAD_DIM], zeros),
    f32Tensor("blk.0.attn_output.weight", [2 * HEAD_DIM, d], zeros),
    f32Tensor("blk.0.attn_q_norm.weight", [HEAD_DIM], ones),
    f32Tensor("blk.0.attn_k_norm.weight", [HEAD_DIM], ones),
    f32Tensor("blk.0.ffn_norm.weight", [d], ones),
    f32Tensor("blk.0.ffn_gate.weight", [d, FEED_FORWARD], zeros),
    f32Tensor("blk.0.ffn_up.weight", [d, FEED_FORWARD], zeros),
    f32Tensor("blk.0.ffn_down.weight", [FEED_FORWARD, d], zeros),
    f32Tensor("output_norm.weight", [d], ones),
    f32Tensor("output.weight", [d, vocab], (i) => (predecessors.get(Math.floor(i / d))?.has(i % d) ? SUCCESSOR_WEIGHT : 0)),
  ];
  const partial = `${path}.partial-${process.pid}`;
  try {
    writeGguf(partial, metadata, tensors);
    renameSync(partial, path);
  } finally {
    rmSync(partial, { force: true });
  }
}
