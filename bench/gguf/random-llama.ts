import { createHash } from "node:crypto";
import { existsSync, mkdirSync, renameSync, rmSync } from "node:fs";
import { join } from "node:path";
import { readGgufHeader, TensorType, ValueType, writeGguf, type Scalar, type TensorToWrite, type Value } from "./gguf.js";

// Llama-architecture GGUF models with random Q8_0 weights, for benchmarks where decode must be
// dominated by matrix work (as with real models) rather than by per-token overhead (as with the
// 260K-parameter test model). The tokenizer (a 512-token SentencePiece vocabulary) is copied from
// a real model file, so prompts tokenize and chat templates render as they do for that model.
// The text generated is noise; only its cost matters.

export interface LlamaShape {
  /** File name stem, e.g. "random-llama-500m". */
  name: string;
  embedding: number;
  layers: number;
  feedForward: number;
  heads: number;
  kvHeads: number;
  contextLength: number;
  /**
   * Tokens of the vocabulary, when more than the tokenizer source has: the rest are filler pieces
   * no text tokenizes to (the model can still emit them), so that the per-token cost of a large
   * vocabulary (sampling, logprobs: about 152k tokens for Qwen3) can be measured.
   */
  vocabulary?: number;
}

export const SHAPES = {
  /** ~0.2M parameters: a few hundred KB; loads and generates in tests. */
  tiny: { name: "random-llama-tiny", embedding: 64, layers: 2, feedForward: 128, heads: 2, kvHeads: 1, contextLength: 512 },
  /** ~100M parameters (~107 MB as Q8_0). */
  "100m": { name: "random-llama-100m", embedding: 768, layers: 16, feedForward: 2048, heads: 12, kvHeads: 4, contextLength: 4096 },
  /** ~500M parameters (~527 MB as Q8_0), about the shape of a 0.5B chat model. */
  "500m": { name: "random-llama-500m", embedding: 1536, layers: 20, feedForward: 4096, heads: 24, kvHeads: 6, contextLength: 4096 },
  /** The ~100M shape with Qwen3's vocabulary size (151,936 tokens): ~333M parameters, ~355 MB. */
  "100m-152k": { name: "random-llama-100m-152k", embedding: 768, layers: 16, feedForward: 2048, heads: 12, kvHeads: 4, contextLength: 4096, vocabulary: 151_936 },
} as const satisfies Record<string, LlamaShape>;

export type ShapeName = keyof typeof SHAPES;

/** Bump when the bytes written for a shape change, so that cached files are rewritten. */
const WRITER_VERSION = 2;

/** llama.cpp's token types (llama_token_type): NORMAL text pieces and BYTE fallback tokens. */
const TOKEN_NORMAL = 1;
const TOKEN_BYTE = 6;

/** Parameters of a shape with a vocabulary of `vocab` tokens (embeddings and output untied). */
export function parameterCount(s: LlamaShape, vocab: number): number {
  const kv = (s.embedding / s.heads) * s.kvHeads;
  const perLayer = 2 * s.embedding * s.embedding + 2 * s.embedding * kv + 3 * s.embedding * s.feedForward + 2 * s.embedding;
  return s.layers * perLayer + 2 * vocab * s.embedding + s.embedding;
}

/** xorshift32: fast, seeded, and good enough to make weights without structure. */
function randomWords(seed: number): (out: Uint32Array) => void {
  let x = seed >>> 0 || 1;
  return (out) => {
    for (let i = 0; i < out.length; i++) {
      x ^= x << 13; x >>>= 0;
      x ^= x >>> 17;
      x ^= x << 5; x >>>= 0;
      out[i] = x;
    }
  };
}

/** IEEE half-precision bits of a positive float in half's range (enough for Q8_0 scales). */
export function toHalfBits(v: number): number {
  // Subnormal halves: multiples of 2^-24 below 2^-14.
  if (v > 0 && v < 2 ** -14) {
    const units = Math.round(v / 2 ** -24);
    if (units === 0) throw new Error(`${v} is below the half range`);
    return units;
  }
  const f = new Float32Array([v]);
  const bits = new Uint32Array(f.buffer)[0]!;
  const exponent = ((bits >>> 23) & 0xff) - 127 + 15;
  if (exponent <= 0 || exponent >= 31) throw new Error(`${v} is out of the normal half range`);
  return (exponent << 10) | ((bits >>> 13) & 0x3ff);
}

/**
 * A Q8_0 tensor of uniform random int8 values, scaled so that its elements have a standard
 * deviation of about `std` (uniform int8 has a standard deviation of ~73.9).
 */
function q8Tensor(name: string, dims: number[], std: number, seed: number): TensorToWrite {
  const scale = toHalfBits(std / 73.9);
  const next = randomWords(seed);
  let words = new Uint32Array(0);
  return {
    name,
    dims: dims.map(BigInt),
    type: TensorType.Q8_0,
    fill: (chunk) => {
      // Chunks are whole blocks (34 bytes) except perhaps the last one; fill the values with
      // random bytes, then write each block's scale over its first two.
      const wordCount = Math.ceil(chunk.length / 4);
      if (words.length < wordCount) words = new Uint32Array(wordCount);
      next(words.subarray(0, wordCount));
      Buffer.from(words.buffer, 0, chunk.length).copy(chunk);
      for (let at = 0; at + 1 < chunk.length; at += 34) chunk.writeUInt16LE(scale, at);
    },
  };
}

function onesTensor(name: string, length: number): TensorToWrite {
  return {
    name,
    dims: [BigInt(length)],
    type: TensorType.F32,
    fill: (chunk) => {
      for (let at = 0; at + 3 < chunk.length; at += 4) chunk.writeFloatLE(1, at);
    },
  };
}

/** The tensors of a llama model of `shape`, in llama.cpp's names and ggml dimension order. */
export function llamaTensors(shape: LlamaShape, vocab: number): TensorToWrite[] {
  const d = shape.embedding;
  const kv = (d / shape.heads) * shape.kvHeads;
  const ff = shape.feedForward;
  let seed = 1;
  const q8 = (name: string, dims: number[], std: number) => q8Tensor(name, dims, std, 0x9e3779b1 * seed++);
  const tensors = [q8("token_embd.weight", [d, vocab], 1)];
  for (let i = 0; i < shape.layers; i++) {
    const b = `blk.${i}`;
    tensors.push(
      onesTensor(`${b}.attn_norm.weight`, d),
      q8(`${b}.attn_q.weight`, [d, d], 1 / Math.sqrt(d)),
      q8(`${b}.attn_k.weight`, [d, kv], 1 / Math.sqrt(d)),
      q8(`${b}.attn_v.weight`, [d, kv], 1 / Math.sqrt(d)),
      // Scaled down with depth so that the residual stream stays of order one.
      q8(`${b}.attn_output.weight`, [d, d], 1 / Math.sqrt(d * shape.layers)),
      onesTensor(`${b}.ffn_norm.weight`, d),
      q8(`${b}.ffn_gate.weight`, [d, ff], 1 / Math.sqrt(d)),
      q8(`${b}.ffn_up.weight`, [d, ff], 1 / Math.sqrt(d)),
      q8(`${b}.ffn_down.weight`, [ff, d], 1 / Math.sqrt(ff * shape.layers)),
    );
  }
  tensors.push(onesTensor("output_norm.weight", d), q8("output.weight", [d, vocab], 1 / Math.sqrt(d)));
  return tensors;
}

/** The metadata of a llama model of `shape`, with the `tokenizer.*` keys of `tokenizerFrom`. */
export function llamaMetadata(shape: LlamaShape, tokenizerFrom: Map<string, Value>): Map<string, Value> {
  const u32 = (value: number): Value => ({ type: ValueType.U32, value });
  const str = (value: string): Value => ({ type: ValueType.STRING, value });
  const metadata = new Map<string, Value>([
    ["general.architecture", str("llama")],
    ["general.name", str(shape.name)],
    ["general.file_type", u32(7)], // LLAMA_FTYPE_MOSTLY_Q8_0
    ["general.alignment", u32(32)],
    ["llama.context_length", u32(shape.contextLength)],
    ["llama.embedding_length", u32(shape.embedding)],
    ["llama.block_count", u32(shape.layers)],
    ["llama.feed_forward_length", u32(shape.feedForward)],
    ["llama.rope.dimension_count", u32(shape.embedding / shape.heads)],
    ["llama.attention.head_count", u32(shape.heads)],
    ["llama.attention.head_count_kv", u32(shape.kvHeads)],
    ["llama.attention.layer_norm_rms_epsilon", { type: ValueType.F32, value: 1e-5 }],
    ["llama.rope.freq_base", { type: ValueType.F32, value: 10000 }],
  ]);
  for (const [key, value] of tokenizerFrom) if (key.startsWith("tokenizer.")) metadata.set(key, value);
  if (!metadata.has("tokenizer.ggml.tokens")) throw new Error("the tokenizer source has no tokenizer.ggml.tokens");
  if (shape.vocabulary) padVocabulary(metadata, shape.vocabulary);
  const types = metadata.get("tokenizer.ggml.token_type");
  if (types?.type === ValueType.ARRAY) metadata.set("tokenizer.ggml.token_type", { ...types, items: textOnlyTokenTypes(metadata, types.items) });
  return metadata;
}

/**
 * The token types with the byte-fallback tokens of bytes 0x80-0xFF made NORMAL tokens, whose text
 * is their name ("<0x80>"). Random weights sample any token: a real model emits those bytes only
 * in sequences that form UTF-8 characters, a random one emits them alone, and the invalid UTF-8
 * made llama-server end half its streams with an error ("does not match the expected peg-native
 * format") and servers hold incomplete characters back (fewer deltas than tokens).
 */
function textOnlyTokenTypes(metadata: Map<string, Value>, types: readonly Scalar[]): Scalar[] {
  const tokens = metadata.get("tokenizer.ggml.tokens");
  if (tokens?.type !== ValueType.ARRAY) throw new Error("tokenizer.ggml.tokens is missing");
  return types.map((type, i) => {
    const byte = /^<0x([0-9A-F]{2})>$/.exec(String(tokens.items[i]));
    return type === TOKEN_BYTE && byte && parseInt(byte[1]!, 16) >= 0x80 ? TOKEN_NORMAL : type;
  });
}

/** Fills the vocabulary up to `size` tokens with filler pieces (lowest scores, NORMAL type). */
function padVocabulary(metadata: Map<string, Value>, size: number): void {
  const tokens = metadata.get("tokenizer.ggml.tokens");
  if (tokens?.type !== ValueType.ARRAY) throw new Error("tokenizer.ggml.tokens is missing");
  const have = tokens.items.length;
  if (size <= have) return;
  const extend = (key: string, item: (i: number) => Scalar) => {
    const v = metadata.get(key);
    if (v?.type === ValueType.ARRAY) metadata.set(key, { ...v, items: [...v.items, ...Array.from({ length: size - have }, (_, i) => item(i))] });
  };
  extend("tokenizer.ggml.tokens", (i) => `<filler-${i}>`);
  extend("tokenizer.ggml.scores", (i) => -1e6 - i);
  extend("tokenizer.ggml.token_type", () => TOKEN_NORMAL);
}

export function vocabularySize(metadata: Map<string, Value>): number {
  const tokens = metadata.get("tokenizer.ggml.tokens");
  if (tokens?.type !== ValueType.ARRAY) throw new Error("tokenizer.ggml.tokens is missing");
  return tokens.items.length;
}

/** Writes a random llama model of `shape` to `path` (through a temporary file). */
export function writeRandomLlama(path: string, shape: LlamaShape, tokenizerPath: string): void {
  const metadata = llamaMetadata(shape, readGgufHeader(tokenizerPath).metadata);
  const partial = `${path}.partial-${process.pid}`;
  try {
    writeGguf(partial, metadata, llamaTensors(shape, vocabularySize(metadata)));
    renameSync(partial, path);
  } finally {
    rmSync(partial, { force: true });
  }
}

/**
 * The path of the model of `shape` under `<home>/bench-models`, written on first use (the name
 * carries a hash of the shape, the writer version and the tokenizer file, so a change rewrites it).
 */
export function ensureRandomLlama(home: string, shape: LlamaShape, tokenizerPath: string): string {
  const dir = join(home, "bench-models");
  const key = createHash("sha256").update(JSON.stringify({ shape, WRITER_VERSION, tokenizerPath })).digest("hex").slice(0, 12);
  const path = join(dir, `${shape.name}-q8_0-${key}.gguf`);
  if (existsSync(path)) return path;
  mkdirSync(dir, { recursive: true });
  writeRandomLlama(path, shape, tokenizerPath);
  return path;
}
