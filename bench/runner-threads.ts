// One runner of the stack with catalog `threads` 1 against 2 (and more, --threads), on a random
// llama benchmark model: output tokens/s and TTFT through the whole stack at each concurrency,
// configurations alternating in order over the rounds, each on a fresh stack placed as
// `tributary start` places it for that thread count. Reports which node-llama-cpp library the
// runner loaded (threads > 1 wants the source build: TRIBUTARY_LLAMA_SOURCE_BUILD=on).
//   node dist/bench/runner-threads.js [--model 500m] [--levels 1,8] [--threads 1,2] [--seconds 10] [--rounds 2] [--max-tokens 32]
// Tokens count by the arrival of their deltas inside the window (bench/lib/closed-loop.ts), which
// opens the warm-up after every client has had its first token.
import { mkdirSync, writeFileSync } from "node:fs";
import { loadavg } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { getLlama } from "node-llama-cpp";
import { commonConfig, readConfig } from "../lib/config.js";
import { loadCatalog } from "../modules/catalog/mod.js";
import { ensureRandomLlama, SHAPES, type ShapeName } from "./gguf/random-llama.js";
import { benchLayout, placeSelf } from "./lib/cpu-layout.js";
import { startPlacedStack, TEST_KEY, TEST_MODEL, testCatalog } from "./lib/processes.js";
import { closedLoop, type LevelResult } from "./lib/closed-loop.js";
import { SseLoadClient } from "./lib/sse-client.js";
import { fmt, percentile } from "./lib/stats.js";
import { machineLine, markdownTable, writeResults } from "./lib/table.js";

const { values } = parseArgs({
  options: {
    model: { type: "string", default: "500m" },
    levels: { type: "string", default: "1,8" },
    threads: { type: "string", default: "1,2" },
    seconds: { type: "string", default: "10" },
    warmup: { type: "string", default: "3" },
    rounds: { type: "string", default: "2" },
    "max-tokens": { type: "string", default: "32" },
  },
});
const levels = values.levels!.split(",").map(Number);
const threadCounts = values.threads!.split(",").map(Number);
const seconds = Number(values.seconds);
const warmup = Number(values.warmup);
const rounds = Number(values.rounds);
const maxTokens = Number(values["max-tokens"]);
const prompt = "Once upon a time, in a small village by the river,";

async function main(): Promise<void> {
  const { home } = readConfig(commonConfig);
  const tokenizer = loadCatalog(testCatalog).find((m) => m.id === TEST_MODEL)!.source;
  const path = values.model === "tiny" ? tokenizer : ensureRandomLlama(home, SHAPES[values.model as ShapeName], tokenizer);
  const library = (await getLlama({ gpu: false, build: "never", progressLogs: false })).buildType;
  const id = `bench/${values.model}`;
  const slots = Math.max(...levels);
  const catalogFor = (threads: number) => {
    const file = join(home, "bench-catalogs", `${values.model}-threads-${threads}.yaml`);
    mkdirSync(join(home, "bench-catalogs"), { recursive: true });
    writeFileSync(file, `models:\n  - id: ${id}\n    engine: llama\n    source: ${JSON.stringify(path)}\n    context_length: 256\n    max_output_tokens: ${maxTokens}\n` +
      `    slots: ${slots}\n    queue_limit: ${slots * 4}\n    threads: ${threads}\n    rate_limits: { requests_per_minute: 10000000, tokens_per_minute: 1000000000 }\n`);
    return file;
  };
  const loadStart = loadavg()[0]!;
  const rows: Array<Array<string | number>> = [];
  for (const concurrency of levels) {
    const results = new Map(threadCounts.map((t) => [t, [] as LevelResult[]]));
    for (let round = 0; round < rounds; round++) {
      for (const threads of round % 2 === 0 ? threadCounts : [...threadCounts].reverse()) {
        process.stderr.write(`c=${concurrency} round ${round + 1}/${rounds}: threads ${threads}\n`);
        const layout = benchLayout(threads);
        const stack = await startPlacedStack({ TRIBUTARY_CATALOG: catalogFor(threads) }, layout);
        placeSelf(layout.services);
        const client = new SseLoadClient("127.0.0.1", stack.gateway.port, TEST_KEY);
        const body = { model: id, messages: [{ role: "user", content: prompt }], max_tokens: maxTokens, temperature: 0.8 };
        const serverPids = [stack.nats, stack.actors, stack.runner, stack.gateway].map((p) => p.child.pid!);
        try { results.get(threads)!.push(await closedLoop(client, { concurrency, warmupSeconds: warmup, seconds, body, serverPids })); } finally { client.close(); placeSelf(undefined); await stack.close(); }
        const last = results.get(threads)!.at(-1)!;
        process.stderr.write(`  ${fmt(last.tokens / last.seconds, 1)} tok/s, ${last.errors} errors\n`);
      }
    }
    const rate = (xs: LevelResult[]) => xs.reduce((a, b) => a + b.tokens, 0) / xs.reduce((a, b) => a + b.seconds, 0);
    const base = results.get(threadCounts[0]!)!;
    for (const threads of threadCounts) {
      const own = results.get(threads)!;
      const perRound = own.map((r, i) => (r.tokens / r.seconds) / (base[i]!.tokens / base[i]!.seconds));
      const ttft = own.flatMap((r) => r.ttft);
      rows.push([concurrency, threads, benchLayout(threads).description.split(" (")[0]!, fmt(rate(own), 1), fmt(rate(own) / rate(base), 2), perRound.map((x) => fmt(x, 2)).join(", "),
        `${fmt(percentile(ttft, 50), 0)} / ${fmt(percentile(ttft, 99), 0)}`, own.map((r) => fmt(r.cpuMsPerToken, 2)).join(", "), own.reduce((a, b) => a + b.errors, 0)]);
    }
  }
  writeResults(`runner-threads-${values.model}-c${levels.join("-")}.md`, `One runner, threads ${threadCounts.join(" vs ")}: ${values.model} model`, [
    machineLine() + ` Load average (1 min) at start and end: ${loadStart.toFixed(1)}, ${loadavg()[0]!.toFixed(1)}.`,
    `node-llama-cpp library: ${library}. Model ${path.split("/").pop()}; ${slots} slots, max_tokens ${maxTokens}, temperature 0.8, closed-loop streamed chat completions through the whole stack; ` +
      `per level ${rounds} rounds of ${seconds} s (opened ${warmup} s after every client had its first token; tokens counted by arrival inside it) per thread count, alternating order, a fresh stack each time.`,
    markdownTable(["concurrency", "threads", "placement", "tok/s", `x threads ${threadCounts[0]}`, "per-round ratios", "TTFT p50 / p99 ms", "CPU ms/token (stack processes, per round)", "errors"], rows),
    `Command: \`node dist/bench/runner-threads.js --model ${values.model} --levels ${values.levels} --threads ${values.threads} --seconds ${seconds} --rounds ${rounds} --max-tokens ${maxTokens}\``,
  ]);
  process.exit(0);
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
