// One runner of the stack with catalog `threads` 1 against 2 (and more, --threads), on a random
// llama benchmark model: output tokens/s and TTFT through the whole stack at each concurrency,
// configurations alternating in order over the rounds, each on a fresh stack placed as
// `tributary start` places it for that thread count. Reports which node-llama-cpp library the
// runner loaded (threads > 1 wants the source build: TRIBUTARY_LLAMA_SOURCE_BUILD=on).
//   node dist/bench/runner-threads.js [--model 500m] [--levels 1,8] [--threads 1,2] [--seconds 10] [--rounds 2] [--max-tokens 32]
//     [--configs "1;2;2 OMP_WAIT_POLICY=passive;2 TRIBUTARY_RUNNER_CPUS=off"] [--out runner-threads.md]
// --configs (instead of --threads): configurations separated by ";", each a thread count and
// KEY=VALUE settings for the runner's environment (TRIBUTARY_RUNNER_CPUS: that configuration's
// placement); the first is the baseline of the ratios. Each runner gets the environment
// `tributary start` gives it (GOMP_SPINCOUNT for threads > 1, modules/runner-layout/decode-env.ts)
// unless the configuration (or this process's environment) sets OMP_WAIT_POLICY or GOMP_SPINCOUNT.
// Tokens count by the arrival of their deltas inside the window (bench/lib/closed-loop.ts), which
// opens the warm-up after every client has had its first token.
import { mkdirSync, writeFileSync } from "node:fs";
import { loadavg } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { getLlama } from "node-llama-cpp";
import { commonConfig, optionToUndefined, readConfig, startConfig } from "../lib/config.js";
import { decodeThreadEnv } from "../modules/runner-layout/mod.js";
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
    configs: { type: "string" },
    seconds: { type: "string", default: "10" },
    warmup: { type: "string", default: "3" },
    rounds: { type: "string", default: "2" },
    "max-tokens": { type: "string", default: "32" },
    /** The table, under bench/results/: the benchmark's current result unless an experiment names another file (or raw/...). */
    out: { type: "string", default: "runner-threads.md" },
  },
});
const levels = values.levels!.split(",").map(Number);
/** A configuration: the runner's catalog threads and extra environment. */
interface RunnerConfig {
  name: string;
  threads: number;
  env: Record<string, string>;
}
const configs: RunnerConfig[] = (values.configs ?? values.threads!.split(",").join(";")).split(";").map((text) => {
  const [threads, ...settings] = text.trim().split(/\s+/);
  const env = Object.fromEntries(settings.map((kv) => [kv.slice(0, kv.indexOf("=")), kv.slice(kv.indexOf("=") + 1)]));
  const start = readConfig(startConfig);
  const user = {
    waitPolicy: env.OMP_WAIT_POLICY ?? optionToUndefined(start.openMpWaitPolicy),
    spinCount: env.GOMP_SPINCOUNT ?? optionToUndefined(start.openMpSpinCount),
    libuvPoolSize: env.UV_THREADPOOL_SIZE ?? optionToUndefined(start.libuvPoolSize),
  };
  return { name: text.trim(), threads: Number(threads), env: { ...decodeThreadEnv(Number(threads), true, user), ...env } };
});
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
  const placement = (c: RunnerConfig) => benchLayout(c.threads, c.env.TRIBUTARY_RUNNER_CPUS);
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
    const results = new Map(configs.map((c) => [c, [] as LevelResult[]]));
    for (let round = 0; round < rounds; round++) {
      for (const config of round % 2 === 0 ? configs : [...configs].reverse()) {
        process.stderr.write(`c=${concurrency} round ${round + 1}/${rounds}: ${config.name}\n`);
        const layout = placement(config);
        const stack = await startPlacedStack({ TRIBUTARY_CATALOG: catalogFor(config.threads) }, layout, config.env);
        placeSelf(layout.services);
        const client = new SseLoadClient("127.0.0.1", stack.gateway.port, TEST_KEY);
        const body = { model: id, messages: [{ role: "user", content: prompt }], max_tokens: maxTokens, temperature: 0.8 };
        const serverPids = [stack.nats, stack.actors, stack.runner, stack.gateway].map((p) => p.child.pid!);
        try { results.get(config)!.push(await closedLoop(client, { concurrency, warmupSeconds: warmup, seconds, body, serverPids })); } finally { client.close(); placeSelf(undefined); await stack.close(); }
        const last = results.get(config)!.at(-1)!;
        process.stderr.write(`  ${fmt(last.tokens / last.seconds, 1)} tok/s, runner ${fmt(last.cpuMsPerTokenByRole.runner ?? NaN, 2)} CPU ms/token, ${last.errors} errors\n`);
      }
    }
    const rate = (xs: LevelResult[]) => xs.reduce((a, b) => a + b.tokens, 0) / xs.reduce((a, b) => a + b.seconds, 0);
    const base = results.get(configs[0]!)!;
    for (const config of configs) {
      const own = results.get(config)!;
      const perRound = own.map((r, i) => (r.tokens / r.seconds) / (base[i]!.tokens / base[i]!.seconds));
      const ttft = own.flatMap((r) => r.ttft);
      rows.push([concurrency, config.name, placement(config).description.split(" (")[0]!, fmt(rate(own), 1), fmt(rate(own) / rate(base), 2), perRound.map((x) => fmt(x, 2)).join(", "),
        own.map((r) => fmt(r.tokens / r.seconds, 1)).join(", "), `${fmt(percentile(ttft, 50), 0)} / ${fmt(percentile(ttft, 99), 0)}`, own.map((r) => fmt(r.cpuMsPerToken, 1)).join(", "),
        own.map((r) => fmt(r.cpuMsPerTokenByRole.runner ?? NaN, 1)).join(", "), own.reduce((a, b) => a + b.errors, 0)]);
    }
  }
  writeResults(values.out!, `One runner, ${configs.map((c) => c.name).join(" vs ")}: ${values.model} model`, [
    machineLine() + ` Load average (1 min) at start and end: ${loadStart.toFixed(1)}, ${loadavg()[0]!.toFixed(1)}.`,
    `node-llama-cpp library: ${library}. Model ${path.split("/").pop()}; ${slots} slots, max_tokens ${maxTokens}, temperature 0.8, closed-loop streamed chat completions through the whole stack; ` +
      `per level ${rounds} rounds of ${seconds} s (opened ${warmup} s after every client had its first token; tokens counted by arrival inside it) per configuration, alternating order, a fresh stack each time. ` +
      `A configuration is the catalog's threads and any settings of the runner's environment.`,
    markdownTable(["concurrency", "configuration", "placement", "tok/s", `x ${configs[0]!.name}`, "per-round ratios", "per-round tok/s", "TTFT p50 / p99 ms", "CPU ms/token (stack processes, per round)", "runner CPU ms/token (per round)", "errors"], rows),
    `Command: \`node dist/bench/runner-threads.js --model ${values.model} --levels ${values.levels} ${values.configs ? `--configs "${values.configs}"` : `--threads ${values.threads}`} --seconds ${seconds} --warmup ${warmup} --rounds ${rounds} --max-tokens ${maxTokens}${values.out === "runner-threads.md" ? "" : ` --out ${values.out}`}\``,
  ]);
  process.exit(0);
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
