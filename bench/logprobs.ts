// What logprobs cost: output tokens/s of streamed chat completions with `logprobs: true,
// top_logprobs: 5` against the same requests without them, in the same run.
//
//   npm run build && node dist/bench/logprobs.js [--models tiny,100m,100m-152k] [--streams 8] [--seconds 10] [--rounds 3] [--max-tokens 64] [--top 5]
//
// Per model, one stack (nats-server, actor host, one runner of one thread, one gateway), placed as
// `tributary start` places it; closed-loop streaming clients; phases with and without logprobs
// alternate, `rounds` times each, so that the machine's drift falls on both alike. Models: the tiny
// test model (where per-token overhead shows), the random ~100M llama of bench/gguf (matrix work
// per token as with real models), both with the test model's 512-token vocabulary, and the same
// ~100M shape with Qwen3's vocabulary size (151,936 tokens), where what the addon does per token
// for every token of the vocabulary shows. That one decodes greedily: its random weights spread the
// probability over the whole vocabulary, so a sampled token would nearly never be among the
// candidates a logprobs read keeps (a real model's distribution is peaked). Writes
// bench/results/logprobs.md.

import { mkdirSync, writeFileSync } from "node:fs";
import { loadavg } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { commonConfig, readConfig } from "../lib/config.js";
import { loadCatalog } from "../modules/catalog/mod.js";
import { TEST_KEY, TEST_MODEL, testCatalog } from "../test/harness/processes.js";
import { waitForReadyRunners } from "../test/harness/stack.js";
import { ensureRandomLlama, SHAPES, type LlamaShape, type ShapeName } from "./gguf/random-llama.js";
import { benchLayout } from "./lib/cpu-layout.js";
import { cpuMs, startPlacedStack } from "./lib/processes.js";
import { streamFor, type StreamedFor } from "./lib/closed-loop.js";
import { SseLoadClient } from "./lib/sse-client.js";
import { fmt, percentile } from "./lib/stats.js";
import { machineLine, markdownTable, writeResults } from "./lib/table.js";

const { values: args } = parseArgs({
  options: {
    models: { type: "string", default: "tiny,100m,100m-152k" },
    streams: { type: "string", default: "8" },
    seconds: { type: "string", default: "10" },
    rounds: { type: "string", default: "3" },
    "max-tokens": { type: "string", default: "64" },
    top: { type: "string", default: "5" },
  },
});
const SECONDS = Number(args.seconds);
const ROUNDS = Number(args.rounds);
const STREAMS = Number(args.streams);
const MAX_TOKENS = Number(args["max-tokens"]);
const TOP = Number(args.top);

interface Phase extends StreamedFor {
  runnerCpuMs: number;
}

async function phase(client: SseLoadClient, body: Record<string, unknown>, runnerPid: number): Promise<Phase> {
  const cpuBefore = cpuMs(runnerPid);
  const streamed = await streamFor(client, body, STREAMS, SECONDS);
  return { ...streamed, runnerCpuMs: cpuMs(runnerPid) - cpuBefore };
}

interface ModelResult {
  model: string;
  temperature: number;
  layout: string;
  off: Phase[];
  on: Phase[];
}

async function measure(model: string): Promise<ModelResult> {
  const { home } = readConfig(commonConfig);
  const tokenizer = loadCatalog(testCatalog).find((m) => m.id === TEST_MODEL)!.source;
  const path = model === "tiny" ? tokenizer : ensureRandomLlama(home, SHAPES[model as ShapeName], tokenizer);
  const catalog = join(home, "bench-catalogs", `logprobs-${model}.yaml`);
  mkdirSync(join(home, "bench-catalogs"), { recursive: true });
  // The test model's id, so the harness's clients apply; the weights are the bench model's.
  writeFileSync(catalog, `models:\n  - id: ${TEST_MODEL}\n    engine: llama\n    source: ${JSON.stringify(path)}\n    context_length: 1024\n    max_output_tokens: ${MAX_TOKENS}\n` +
    `    slots: ${STREAMS}\n    queue_limit: ${STREAMS * 8}\n    threads: 1\n    rate_limits: { requests_per_minute: 10000000, tokens_per_minute: 1000000000 }\n`);
  const layout = benchLayout(1);
  process.stderr.write(`\n${model}: starting the stack (${layout.description})\n`);
  const stack = await startPlacedStack({ TRIBUTARY_CATALOG: catalog, TRIBUTARY_MAX_CONNECTIONS_PER_ADDRESS: "0" }, layout);
  try {
    await waitForReadyRunners(stack.gateway.url, 1, 300_000);
    const client = new SseLoadClient("127.0.0.1", stack.gateway.port, TEST_KEY);
    const temperature = (SHAPES[model as ShapeName] as LlamaShape | undefined)?.vocabulary ? 0 : 0.8;
    const off = { model: TEST_MODEL, messages: [{ role: "user", content: "Tell me a story about a dragon and a river." }], max_tokens: MAX_TOKENS, temperature };
    const on = { ...off, logprobs: true, top_logprobs: TOP };
    const runner = stack.runner.child.pid!;
    // Warm-up: connections, the key cache, the engine.
    await phase(client, on, runner);
    const result: ModelResult = { model, temperature, layout: layout.description, off: [], on: [] };
    for (let r = 0; r < ROUNDS; r++) {
      result.off.push(await phase(client, off, runner));
      result.on.push(await phase(client, on, runner));
      const [a, b] = [result.off.at(-1)!, result.on.at(-1)!];
      process.stderr.write(`${model} round ${r + 1}: ${fmt(a.tokens / a.seconds, 0)} tok/s without, ${fmt(b.tokens / b.seconds, 0)} with logprobs\n`);
    }
    client.close();
    return result;
  } finally {
    await stack.close();
  }
}

const sum = (phases: Phase[], f: (p: Phase) => number) => phases.reduce((n, p) => n + f(p), 0);
const rate = (phases: Phase[]) => sum(phases, (p) => p.tokens) / sum(phases, (p) => p.seconds);
const cpuPerToken = (phases: Phase[]) => (1000 * sum(phases, (p) => p.runnerCpuMs)) / sum(phases, (p) => p.tokens);
const p50 = (phases: Phase[]) => percentile(phases.flatMap((p) => p.ttfts).sort((a, b) => a - b), 50);

const loadAtStart = loadavg()[0]!;
const results: ModelResult[] = [];
for (const model of args.models.split(",")) results.push(await measure(model));

const rows = results.map((r) => [
  r.model === "tiny" ? "tiny (stories260K), vocabulary 512" : `random llama ${r.model}${(SHAPES[r.model as ShapeName] as LlamaShape | undefined)?.vocabulary ? "" : ", vocabulary 512"}`,
  STREAMS,
  r.temperature,
  fmt(rate(r.off), 0),
  fmt(rate(r.on), 0),
  fmt(rate(r.on) / rate(r.off), 3),
  r.on.map((p, i) => fmt(p.tokens / p.seconds / (r.off[i]!.tokens / r.off[i]!.seconds), 2)).join(", "),
  fmt(cpuPerToken(r.off), 0),
  fmt(cpuPerToken(r.on), 0),
  `${fmt(p50(r.off), 1)} / ${fmt(p50(r.on), 1)}`,
  sum([...r.off, ...r.on], (p) => p.errors),
]);

writeResults("logprobs.md", "logprobs: true, top_logprobs: 5 against none", [
  machineLine(),
  `Command: \`node dist/bench/logprobs.js ${process.argv.slice(2).join(" ")}\`. Load average (1 min): ${fmt(loadAtStart, 2)} at start, ${fmt(loadavg()[0]!, 2)} at end (the machine is shared: figures are ratios within one run).`,
  `${ROUNDS} rounds of ${SECONDS} s per side, alternating; ${STREAMS} closed-loop streaming clients, max_tokens ${MAX_TOKENS}; with logprobs: \`logprobs: true, top_logprobs: ${TOP}\`. Layout: ${results[0]?.layout ?? ""}. Runner CPU from /proc.`,
  markdownTable(["model", "streams", "temperature", "tok/s without", "tok/s with logprobs", "ratio", "ratio per round", "runner CPU µs/token without", "with", "TTFT p50 ms without / with", "errors"], rows),
  "Target: ratio >= 0.9. The logprobs are read from the logits each token is sampled from, in the same decode step, by two more samples queued right after the token's on libuv's pool (runners/engines/llama/logprob-reads.ts): the 64 most likely tokens' relative probabilities (a partial sort) and the most likely one's over the whole vocabulary, for which node-llama-cpp 3.21.1's addon sorts the whole vocabulary. On a small vocabulary the cost is the two round trips to the pool per token; on a large one, that sort (see docs/architecture.md, \"Logprobs\").",
]);
