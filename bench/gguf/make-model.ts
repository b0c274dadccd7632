import { commonConfig, readConfig } from "../../lib/config.js";
import { loadCatalog } from "../../modules/catalog/mod.js";
import { TEST_MODEL, testCatalog } from "../lib/processes.js";
import { parameterCount, SHAPES, ensureRandomLlama, type ShapeName } from "./random-llama.js";
import { readGgufHeader } from "./gguf.js";

// Writes (or finds cached) the random llama benchmark models and prints their paths.
// Usage: node dist/bench/gguf/make-model.js [tiny|100m|500m ...]   (default: 100m 500m)

/** The tokenizer comes from the test model (the catalog entry the tests use). */
export const TOKENIZER_SOURCE = loadCatalog(testCatalog).find((m) => m.id === TEST_MODEL)!.source;

const names = (process.argv.length > 2 ? process.argv.slice(2) : ["100m", "500m"]) as ShapeName[];
const { home } = readConfig(commonConfig);
for (const name of names) {
  const shape = SHAPES[name];
  if (!shape) throw new Error(`unknown shape ${name}; one of ${Object.keys(SHAPES).join(", ")}`);
  const started = performance.now();
  const path = ensureRandomLlama(home, shape, TOKENIZER_SOURCE);
  const vocab = readGgufHeader(path).metadata.get("tokenizer.ggml.tokens");
  const params = parameterCount(shape, vocab?.type === 9 ? vocab.items.length : 0);
  console.log(`${name}\t${(params / 1e6).toFixed(1)}M parameters\t${path}\t(${((performance.now() - started) / 1000).toFixed(1)} s)`);
}
