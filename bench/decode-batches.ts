// The llama engine's decode steps in process: which sequences each batch holds (in sequence id
// order or not), how long the steps take, and a new request's TTFT counted in steps, with closed-
// loop streams whose next request comes `--turnaround-ms` (x 0.5-1.5) after the last one ended, as
// through the stack. Figures in steps hold on a busy machine, where milliseconds do not.
//   node dist/bench/decode-batches.js [--model 500m] [--threads 2] [--streams 8] [--max-tokens 32]
//     [--seconds 50] [--turnaround-ms 3] [--linger-ms 10]
// --linger-ms 0: no linger. Wraps the engine's native context (DecodeSteps' batch calls) to
// observe each batch: a measuring tool, not a pattern.
import { mkdirSync, writeFileSync } from "node:fs";
import { loadavg } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { commonConfig, readConfig } from "../lib/config.js";
import { loadCatalog } from "../modules/catalog/mod.js";
import { ensureRandomLlama, SHAPES, type ShapeName } from "./gguf/random-llama.js";
import { InProcessEngine } from "./lib/engine-baseline.js";
import { TEST_MODEL, testCatalog } from "./lib/processes.js";
import { fmt, percentile } from "./lib/stats.js";

const { values } = parseArgs({
  options: {
    model: { type: "string", default: "500m" },
    threads: { type: "string", default: "2" },
    streams: { type: "string", default: "8" },
    "max-tokens": { type: "string", default: "32" },
    seconds: { type: "string", default: "50" },
    "turnaround-ms": { type: "string", default: "3" },
    "linger-ms": { type: "string", default: "10" },
  },
});
const streams = Number(values.streams);
const maxTokens = Number(values["max-tokens"]);
const turnaroundMs = Number(values["turnaround-ms"]);
/** Batches before this many are the start (first prompts, page-in of the weights): not counted. */
const SKIP_BATCHES = 40;

interface Batch {
  sequences: number[];
  started: number;
  ended: number;
}

async function main(): Promise<void> {
  const { home } = readConfig(commonConfig);
  const tokenizer = loadCatalog(testCatalog).find((m) => m.id === TEST_MODEL)!.source;
  const path = ensureRandomLlama(home, SHAPES[values.model as ShapeName], tokenizer);
  const dir = join(home, "bench-catalogs");
  mkdirSync(dir, { recursive: true });
  const catalog = join(dir, `decode-batches-${values.model}.yaml`);
  writeFileSync(catalog, `models:\n  - id: bench/${values.model}\n    engine: llama\n    source: ${JSON.stringify(path)}\n    context_length: 256\n    max_output_tokens: ${maxTokens}\n` +
    `    slots: ${streams}\n    queue_limit: ${streams * 4}\n    threads: ${values.threads}\n`);
  const spec = loadCatalog(catalog)[0]!;
  const loadStart = loadavg()[0]!;
  const engine = new InProcessEngine(spec);
  const internals = engine as unknown as { engine: { options: { lingerMaxMs?: number }; steps: { native: Record<string, unknown> } } };
  internals.engine.options.lingerMaxMs = Number(values["linger-ms"]);
  await engine.load();
  const steps = internals.engine.steps;

  // Every batch: the sequences in the order they went to llama.cpp, and when it decoded.
  const batches: Batch[] = [];
  let current: Batch = { sequences: [], started: 0, ended: 0 };
  const native = steps.native;
  const call = (name: string, args: unknown[]) => (native[name] as (...a: unknown[]) => unknown).apply(native, args);
  const observed: Record<string, (...args: unknown[]) => unknown> = {
    initBatch: (...args) => {
      current = { sequences: [], started: 0, ended: 0 };
      return call("initBatch", args);
    },
    addToBatch: (...args) => {
      current.sequences.push(args[0] as number);
      return call("addToBatch", args);
    },
    decodeBatch: async (...args) => {
      const batch = current;
      batch.started = performance.now();
      const result = await call("decodeBatch", args);
      batch.ended = performance.now();
      batches.push(batch);
      return result;
    },
  };
  steps.native = new Proxy(native, {
    get: (target, key: string) => observed[key] ?? (typeof target[key] === "function" ? (target[key] as (...a: unknown[]) => unknown).bind(target) : target[key]),
  });

  const ttftMs: number[] = [];
  let stop = false;
  setTimeout(() => (stop = true), Number(values.seconds) * 1000);
  const prompt = "Once upon a time, in a small village by the river,";
  await Promise.all(Array.from({ length: streams }, async () => {
    while (!stop) {
      const counted = batches.length > SKIP_BATCHES;
      const r = await engine.chat(prompt, maxTokens);
      if (counted) ttftMs.push(r.ttftMs);
      await new Promise((resolve) => setTimeout(resolve, turnaroundMs * (0.5 + Math.random())));
    }
  }));
  // The last batches ran while the streams were stopping.
  const window = batches.slice(SKIP_BATCHES, -streams * 2);
  const sizes = new Map<number, number>();
  for (const b of window) sizes.set(b.sequences.length, (sizes.get(b.sequences.length) ?? 0) + 1);
  const inOrder = window.filter((b) => b.sequences.every((s, i) => i === 0 || s > b.sequences[i - 1]!)).length;
  const fullStepMs = percentile(window.filter((b) => b.sequences.length === streams).map((b) => b.ended - b.started), 50);
  const tokens = window.reduce((a, b) => a + b.sequences.length, 0);
  const result = {
    model: values.model, threads: Number(values.threads), streams, maxTokens, turnaroundMs, lingerMs: Number(values["linger-ms"]),
    batches: window.length, batchesInSequenceOrder: inOrder,
    sequencesPerBatch: Object.fromEntries([...sizes].sort((a, b) => b[0] - a[0])),
    tokensPerBatch: fmt(tokens / window.length, 2),
    fullStepMsP50: fmt(fullStepMs, 1),
    ttftMsP50: fmt(percentile(ttftMs, 50), 0),
    ttftFullStepsP50: fmt(percentile(ttftMs, 50) / fullStepMs, 2),
    ttftFullStepsP90: fmt(percentile(ttftMs, 90) / fullStepMs, 2),
    requests: ttftMs.length,
    loadAverage: `${loadStart.toFixed(1)}, ${loadavg()[0]!.toFixed(1)}`,
  };
  process.stdout.write(JSON.stringify(result) + "\n");
  await engine.dispose();
  process.exit(0);
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
