// Benchmark 1 of the streaming spine: the full stack (HTTP/SSE gateway, NATS, protobuf, runner
// process) against the same engine and scheduler called in-process, same model, slots and
// threads, at several concurrencies. Each client loops on streamed requests for a fixed time.
//   node dist/bench/stack-vs-engine.js [--seconds 5] [--rounds 3] [--levels 1,8,32,64] [--max-tokens 128]
// Each level alternates in-process and stack runs for several rounds, so that drift in the
// machine's speed during the run (a shared VM) affects both sides alike.
import { parseArgs } from "node:util";
import { loadCatalog } from "../modules/catalog/mod.js";
import { catalogOverridesConfig, readConfig } from "../lib/config.js";
import { InProcessEngine } from "./lib/engine-baseline.js";
import { startPlacedStack, TEST_KEY, TEST_MODEL, testCatalog } from "./lib/processes.js";
import { benchLayout, placeSelf } from "./lib/cpu-layout.js";
import { SseLoadClient } from "./lib/sse-client.js";
import { fmt, percentile } from "./lib/stats.js";
import { machineLine, markdownTable, writeResults } from "./lib/table.js";

const { values } = parseArgs({
  options: {
    seconds: { type: "string", default: "5" },
    rounds: { type: "string", default: "3" },
    warmup: { type: "string", default: "2" },
    levels: { type: "string", default: "1,8,32,64" },
    "max-tokens": { type: "string", default: "128" },
    slots: { type: "string", default: "64" },
  },
});
const seconds = Number(values.seconds);
const rounds = Number(values.rounds);
const warmup = Number(values.warmup);
const levels = values.levels!.split(",").map(Number);
const maxTokens = Number(values["max-tokens"]);
const slots = Number(values.slots);
const layout = benchLayout(loadCatalog(testCatalog).find((m) => m.id === TEST_MODEL)!.threads);
const prompt = "Once upon a time, in a small village by the river,";
const unlimited = { requests_per_minute: 10_000_000, tokens_per_minute: 1_000_000_000 };
const env = { TRIBUTARY_MODEL_OVERRIDES: JSON.stringify({ [TEST_MODEL]: { slots, queue_limit: 1024, rate_limits: unlimited } }) };

interface LevelResult {
  tokens: number;
  requests: number;
  errors: number;
  ttft: number[];
  gaps: number[];
  seconds: number;
}

/** Runs `concurrency` closed-loop clients for warmup + seconds; counts what completes after warmup. */
async function closedLoop(concurrency: number, one: (seed: number) => Promise<{ ok: boolean; tokens: number; ttftMs: number; gapsMs: number[] }>): Promise<LevelResult> {
  const result: LevelResult = { tokens: 0, requests: 0, errors: 0, ttft: [], gaps: [], seconds };
  const start = performance.now();
  const measureFrom = start + warmup * 1000;
  const end = measureFrom + seconds * 1000;
  let seed = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < end) {
        const began = performance.now();
        const r = await one(seed++);
        if (began < measureFrom) continue;
        if (!r.ok) {
          result.errors++;
          continue;
        }
        // Tokens of requests that finish past the end still count pro rata of the window they spent in it.
        const finished = performance.now();
        const share = finished <= end ? 1 : Math.max(0, (end - began) / (finished - began));
        result.tokens += r.tokens * share;
        result.requests++;
        result.ttft.push(r.ttftMs);
        for (const g of r.gapsMs) result.gaps.push(g);
      }
    }),
  );
  return result;
}

function emptyResult(): LevelResult {
  return { tokens: 0, requests: 0, errors: 0, ttft: [], gaps: [], seconds: 0 };
}

function merge(into: LevelResult, part: LevelResult): void {
  into.tokens += part.tokens;
  into.requests += part.requests;
  into.errors += part.errors;
  for (const v of part.ttft) into.ttft.push(v);
  for (const v of part.gaps) into.gaps.push(v);
  into.seconds += part.seconds;
}

async function main(): Promise<void> {
  const spec = loadCatalog(testCatalog, readConfig(catalogOverridesConfig, { ...process.env, ...env })).find((m) => m.id === TEST_MODEL)!;
  const baseline = new InProcessEngine(spec);
  await baseline.load();

  // The whole stack: the actor host owns the rate-limit budgets (set far above this load).
  const stack = await startPlacedStack(env, layout);
  const { gateway } = stack;
  const client = new SseLoadClient("127.0.0.1", gateway.port, TEST_KEY);
  // No seed: seeded requests skip the prompt cache (to be reproducible), and real traffic rarely sets one.
  const body = (_seed: number) => ({ model: TEST_MODEL, messages: [{ role: "user", content: prompt }], max_tokens: maxTokens, temperature: 0.8 });
  // Warm both paths (first-request costs: grammar of the template, sockets).
  await baseline.chat(prompt, 8);
  await client.streamChat(body(1));

  const rows: Array<Array<string | number>> = [];
  const summary: Record<number, { ratio: number; addedTtft: number }> = {};
  try {
    for (const concurrency of levels) {
      const inproc = emptyResult();
      const stack = emptyResult();
      for (let round = 0; round < rounds; round++) {
        process.stderr.write(`concurrency ${concurrency}, round ${round + 1}/${rounds}: in-process, then stack\n`);
        // The in-process engine decodes on the runner's CPUs, as the stack's runner does.
        placeSelf(layout.runner);
        merge(inproc, await closedLoop(concurrency, async () => {
          const r = await baseline.chat(prompt, maxTokens).then((x) => ({ ok: true, ...x }), () => ({ ok: false, ttftMs: NaN, completionTokens: 0, gapsMs: [] }));
          return { ok: r.ok, tokens: r.completionTokens, ttftMs: r.ttftMs, gapsMs: r.gapsMs };
        }));
        // The load generator stays off the runner's CPUs, as a client on another machine would.
        placeSelf(layout.services);
        merge(stack, await closedLoop(concurrency, async (seed) => {
          const r = await client.streamChat(body(seed));
          return { ok: r.ok, tokens: r.completionTokens, ttftMs: r.ttftMs, gapsMs: r.gapsMs };
        }));
      }
      placeSelf(undefined);
      const inprocRate = inproc.tokens / inproc.seconds;
      const stackRate = stack.tokens / stack.seconds;
      const ratio = stackRate / inprocRate;
      const added = percentile(stack.ttft, 50) - percentile(inproc.ttft, 50);
      summary[concurrency] = { ratio, addedTtft: added };
      rows.push([
        concurrency,
        fmt(inprocRate, 0),
        fmt(stackRate, 0),
        fmt(ratio, 3),
        `${fmt(percentile(inproc.ttft, 50), 2)} / ${fmt(percentile(inproc.ttft, 99), 2)}`,
        `${fmt(percentile(stack.ttft, 50), 2)} / ${fmt(percentile(stack.ttft, 99), 2)}`,
        fmt(added, 2),
        `${fmt(percentile(stack.gaps, 50), 2)} / ${fmt(percentile(stack.gaps, 99), 2)}`,
        `${stack.requests} / ${stack.errors}`,
      ]);
    }
  } finally {
    client.close();
    await stack.close(true);
    await baseline.dispose();
  }

  const table = markdownTable(
    ["concurrency", "in-process tok/s", "stack tok/s", "ratio", "in-process TTFT p50/p99 ms", "stack TTFT p50/p99 ms", "TTFT added p50 ms", "stack ITL p50/p99 ms", "stack requests / errors"],
    rows,
  );
  const targets = levels
    .filter((c) => c >= 32)
    .map((c) => `- concurrency ${c}: throughput ratio ${fmt(summary[c]!.ratio, 3)} (target >= 0.9)`)
    .concat(levels.map((c) => `- concurrency ${c}: TTFT added by the stack p50 ${fmt(summary[c]!.addedTtft, 2)} ms (target <= 2 ms)`));
  writeResults("stack-vs-engine.md", "Full stack vs in-process engine", [
    machineLine(),
    `Model ${TEST_MODEL} (stories260K, llama engine, threads 1), ${slots} slots, max_tokens ${maxTokens}, temperature 0.8, closed-loop clients; per level, ${rounds} rounds of ${seconds} s in-process then ${seconds} s through the stack (each after ${warmup} s of warm-up), summed. ` +
      `Stack: nats-server, actor host (rate-limit budgets, limits far above the load), runner process and gateway process, clients in the benchmark process over HTTP/SSE. In-process: the same LlamaEngine and Scheduler in one process, on the runner's CPUs. Placement: ${layout.description}.`,
    table,
    targets.join("\n"),
    "Command: `npm run build && node dist/bench/stack-vs-engine.js`",
  ]);
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
