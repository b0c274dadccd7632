import t from "tap";
import { readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";
import { repoRoot } from "../../lib/paths.js";
import { readGgufHeader, tensorBytes, TensorType, ValueType, writeGguf, type TensorInfo } from "../../bench/gguf/gguf.js";
import { ensureRandomLlama, llamaMetadata, llamaTensors, parameterCount, SHAPES, toHalfBits, vocabularySize } from "../../bench/gguf/random-llama.js";

// The benchmark models' GGUF writer: what it writes reads back as written, and node-llama-cpp
// (llama.cpp's own loader) loads the random llama model and generates from it.
const tokenizerSource = join(repoRoot, "..", "shared", "models", "stories260K.gguf");
const plain = (v: unknown) => JSON.parse(JSON.stringify(v, (_k, x) => (typeof x === "bigint" ? `${x}n` : x)));

t.test("metadata read from a real model writes and reads back unchanged", async (t) => {
  const source = readGgufHeader(tokenizerSource);
  t.equal(source.metadata.get("general.architecture")?.type, ValueType.STRING);
  const path = join(t.testdir(), "copy.gguf");
  writeGguf(path, source.metadata, []);
  const copy = readGgufHeader(path);
  t.equal(copy.version, 3);
  t.same(plain([...copy.metadata]), plain([...source.metadata]));
  t.same(copy.tensors, []);
});

t.test("a vocabulary padded to Qwen3's size: metadata far past the writer's first buffer reads back as written", async (t) => {
  const metadata = llamaMetadata(SHAPES["100m-152k"], readGgufHeader(tokenizerSource).metadata);
  t.equal(vocabularySize(metadata), 151_936);
  const path = join(t.testdir(), "padded.gguf");
  writeGguf(path, metadata, []);
  const back = readGgufHeader(path).metadata;
  t.same([...back.keys()], [...metadata.keys()], "every key, in order");
  const tokenizer = (m: Map<string, unknown>) => plain([...m].filter(([k]) => k.startsWith("tokenizer.")));
  t.same(tokenizer(back), tokenizer(metadata), "the vocabulary, item for item (the floats of other keys round to float32)");
  t.ok(statSync(path).size > 1 << 20, "megabytes of metadata");
});

t.test("half-precision scales", async (t) => {
  t.equal(toHalfBits(1), 0x3c00);
  t.equal(toHalfBits(0.5), 0x3800);
  t.equal(toHalfBits(2 ** -14), 0x0400); // the smallest normal half
  t.equal(toHalfBits(2 ** -15), 0x0200); // subnormal
  t.equal(toHalfBits(3 * 2 ** -24), 3);
  t.throws(() => toHalfBits(2 ** -26));
  t.throws(() => toHalfBits(65536));
});

t.test("the random llama model: layout, header, loads and generates", async (t) => {
  const home = t.testdir();
  const shape = SHAPES.tiny;
  const path = ensureRandomLlama(home, shape, tokenizerSource);
  t.equal(ensureRandomLlama(home, shape, tokenizerSource), path, "a second call finds the cached file");

  const header = readGgufHeader(path);
  const scalar = (key: string) => { const v = header.metadata.get(key); return v?.type === ValueType.ARRAY ? undefined : v?.value; };
  t.equal(scalar("general.architecture"), "llama");
  t.equal(scalar("llama.embedding_length"), shape.embedding);
  t.equal(scalar("llama.block_count"), shape.layers);
  t.equal(scalar("llama.attention.head_count_kv"), shape.kvHeads);
  t.equal(scalar("tokenizer.ggml.model"), "llama");
  const vocab = vocabularySize(header.metadata);
  t.equal(vocab, 512);

  // Tensor infos as planned, laid out back to back at 32-byte alignment, and the file ends with the last one.
  const planned = llamaTensors(shape, vocab);
  t.same(header.tensors.map((x) => [x.name, x.dims, x.type]), planned.map((x) => [x.name, x.dims, x.type]));
  let offset = 0n;
  for (const info of header.tensors) {
    t.equal(info.offset, offset, `${info.name} offset`);
    offset += BigInt(Math.ceil(tensorBytes(info.dims, info.type) / 32) * 32);
  }
  t.equal(statSync(path).size, header.dataOffset + Number(offset));
  const elements = (x: TensorInfo) => Number(x.dims.reduce((a, b) => a * b, 1n));
  t.equal(header.tensors.reduce((n, x) => n + elements(x), 0), parameterCount(shape, vocab));

  // Every Q8_0 block of a tensor carries its scale: for attn_q, 1/sqrt(64) / 73.9.
  const q = header.tensors.find((x) => x.name === "blk.0.attn_q.weight")!;
  t.equal(q.type, TensorType.Q8_0);
  const data = readFileSync(path).subarray(header.dataOffset + Number(q.offset));
  const blocks = elements(q) / 32;
  const scales = new Set(Array.from({ length: blocks }, (_, i) => data.readUInt16LE(i * 34)));
  t.same([...scales], [toHalfBits(1 / 8 / 73.9)]);

  const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error, progressLogs: false });
  t.teardown(() => llama.dispose());
  const model = await llama.loadModel({ modelPath: path });
  t.equal(model.fileInfo.metadata.general.architecture, "llama");
  const context = await model.createContext({ contextSize: 128, threads: 1 });
  const sequence = context.getSequence();
  const generated: number[] = [];
  for await (const token of sequence.evaluate(model.tokenize("Once upon a time"), { temperature: 0.8, seed: 1 })) {
    generated.push(token);
    if (generated.length === 16) break;
  }
  t.equal(generated.length, 16, "16 tokens generated");
  t.ok(generated.every((token) => token >= 0 && token < vocab), "every token is in the vocabulary");

  // Random weights sample every token alone: each must be text on its own (valid UTF-8), or
  // servers hold tokens back and llama-server ends streams with a parse error.
  const types = header.metadata.get("tokenizer.ggml.token_type");
  const tokens = header.metadata.get("tokenizer.ggml.tokens");
  if (types?.type !== ValueType.ARRAY || tokens?.type !== ValueType.ARRAY) throw new Error("no vocabulary");
  const byteTokens = tokens.items.filter((_, i) => types.items[i] === 6);
  t.equal(byteTokens.length, 128, "byte fallback tokens kept for 0x00-0x7F only");
  t.equal(byteTokens.at(-1), "<0x7F>");
  const invalid = Array.from({ length: vocab }, (_, id) => id).filter((id) => model.detokenize([id as never]).includes("\uFFFD"));
  t.same(invalid, [], "every token alone detokenizes to valid UTF-8");
});
