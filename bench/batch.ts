// Batch benchmark: a 10,000-line batch on the tiny model, through the whole stack, against the
// engine's own throughput in this process at the same slot count and max_tokens; the time to
// validate a 50,000-line file; interactive TTFT with and without the batch running.
//   npm run build && node dist/bench/batch.js   (writes bench/results/batch.md)
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import OpenAI, { toFile } from "openai";
import { loadCatalog } from "../modules/catalog/mod.js";
import { createLogger } from "../lib/log.js";
import { allowedCpus } from "../lib/process/cpu-affinity.js";
import { benchLayout, placeSelf } from "./lib/cpu-layout.js";
import { GenerateRequest, Priority } from "../proto/gen/tributary/v1/inference.js";
import { createEngine } from "../runners/engines/create-engine.js";
import { Scheduler, type RequestObserver } from "../runners/scheduler/scheduler.js";
import { repoRoot, startPlacedStack, TEST_KEY, TEST_MODEL, testCatalog } from "./lib/processes.js";

const LINES = Number(process.env.BENCH_BATCH_LINES ?? 10_000);
const BASELINE_REQUESTS = Number(process.env.BENCH_BASELINE_REQUESTS ?? 3_000);
const MAX_TOKENS = Number(process.env.BENCH_MAX_TOKENS ?? 16);
const VALIDATE_LINES = 50_000;
const TTFT_PROBES = Number(process.env.BENCH_TTFT_PROBES ?? 60);
const log = createLogger("bench", {});
const layout = benchLayout(loadCatalog(testCatalog).find((m) => m.id === TEST_MODEL)!.threads);

const prompt = (i: number) => `Tell me story number ${i}.`;
const body = (i: number) => ({ model: TEST_MODEL, messages: [{ role: "user", content: prompt(i) }], max_tokens: MAX_TOKENS, temperature: 0.8 });

/** The engine and scheduler in this process, every request submitted at once: the ceiling. */
async function baseline(): Promise<{ tokensPerSecond: number; slots: number; seconds: number }> {
  // On the runner's CPUs, as the stack's runner decodes.
  placeSelf(layout.runner);
  try {
    return await baselineRun();
  } finally {
    placeSelf(undefined);
  }
}

async function baselineRun(): Promise<{ tokensPerSecond: number; slots: number; seconds: number }> {
  const spec = loadCatalog(testCatalog).find((m) => m.id === TEST_MODEL)!;
  const engine = createEngine(spec, { modelCache: join(repoRoot, ".tributary", "models"), hfToken: undefined, hfEndpoint: undefined, log });
  await engine.load();
  const scheduler = new Scheduler(engine, BASELINE_REQUESTS + 1, log);
  let tokens = 0;
  const started = performance.now();
  const done: Promise<void>[] = [];
  for (let i = 0; i < BASELINE_REQUESTS; i++) {
    const request = GenerateRequest.fromPartial({
      requestId: `b${i}`, model: TEST_MODEL, messages: [{ role: "user", content: prompt(i) }],
      sampling: { temperature: 0.8, maxTokens: MAX_TOKENS, n: 1 },
      parallelToolCalls: true, priority: Priority.PRIORITY_BATCH,
    });
    const prepared = await engine.prepare(request);
    done.push(new Promise<void>((resolve) => {
      const observer: RequestObserver = { delta() {}, toolCall() {}, choiceEnd() {}, choiceReset() {}, final: (_p, completion) => { tokens += completion; resolve(); } };
      scheduler.submit(prepared, observer);
    }));
  }
  await Promise.all(done);
  const seconds = (performance.now() - started) / 1000;
  await engine.dispose();
  return { tokensPerSecond: tokens / seconds, slots: engine.slots, seconds };
}

const percentile = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;

async function ttft(client: OpenAI, probes: number, gapMs: number): Promise<{ p50: number; p99: number; n: number }> {
  const samples: number[] = [];
  for (let i = 0; i < probes; i++) {
    const started = performance.now();
    const stream = await client.chat.completions.create({ model: TEST_MODEL, messages: [{ role: "user", content: "Hello there" }], max_tokens: 4, stream: true });
    let first = 0;
    for await (const chunk of stream) if (!first && chunk.choices[0]?.delta.content !== undefined && chunk.choices[0]?.delta.content !== "") first = performance.now() - started;
    samples.push(first || performance.now() - started);
    await new Promise((r) => setTimeout(r, gapMs));
  }
  samples.sort((a, b) => a - b);
  return { p50: percentile(samples, 50), p99: percentile(samples, 99), n: samples.length };
}

async function waitFor(client: OpenAI, id: string, until: (b: OpenAI.Batches.Batch) => boolean, pollMs = 100): Promise<{ batch: OpenAI.Batches.Batch; at: number }> {
  for (;;) {
    const batch = await client.batches.retrieve(id);
    if (until(batch)) return { batch, at: performance.now() };
    await new Promise((r) => setTimeout(r, pollMs));
  }
}

const jsonl = (n: number) => Array.from({ length: n }, (_, i) => JSON.stringify({ custom_id: `line-${i}`, method: "POST", url: "/v1/chat/completions", body: body(i) })).join("\n") + "\n";

interface StackFigures {
  batchTps: number;
  seconds: number;
  lines: string;
  outputTokens: number;
  validateMs: number;
  idle: { p50: number; p99: number; n: number };
  busy: { p50: number; p99: number; n: number };
}

/** The whole stack: validation of a 50,000-line file, then the batch with TTFT probes before and during it. */
async function throughStack(): Promise<StackFigures> {
  const { actors, gateway, close } = await startPlacedStack({}, layout);
  try {
    const client = new OpenAI({ apiKey: TEST_KEY, baseURL: gateway.baseURL, maxRetries: 0 });

    // Warm up, then interactive TTFT on an idle stack.
    await ttft(client, 5, 20);
    const idle = await ttft(client, TTFT_PROBES, 50);
    console.log(`idle TTFT p50 ${idle.p50.toFixed(1)} ms p99 ${idle.p99.toFixed(1)} ms`);

    // Validation of a 50,000-line file (then cancelled).
    const bigFile = await client.files.create({ file: await toFile(Buffer.from(jsonl(VALIDATE_LINES)), "validate.jsonl"), purpose: "batch" });
    const big = await client.batches.create({ input_file_id: bigFile.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
    const validated = await actors.waitForLog((r) => r.msg === "batch validated" && r.batchId === big.id, 300_000);
    const validateMs = validated.ms as number;
    await waitFor(client, big.id, (b) => b.status !== "validating", 50);
    await client.batches.cancel(big.id);
    await waitFor(client, big.id, (b) => b.status === "cancelled");
    console.log(`validation of ${VALIDATE_LINES} lines: ${validateMs} ms`);

    // The batch: throughput from in_progress to completed, TTFT probes while it runs.
    const file = await client.files.create({ file: await toFile(Buffer.from(jsonl(LINES)), "batch.jsonl"), purpose: "batch" });
    const created = await client.batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
    const running = await waitFor(client, created.id, (b) => b.status !== "validating", 20);
    await waitFor(client, created.id, (b) => (b.request_counts?.completed ?? 0) > 50, 100);
    const busy = await ttft(client, TTFT_PROBES, 50);
    console.log(`TTFT during the batch p50 ${busy.p50.toFixed(1)} ms p99 ${busy.p99.toFixed(1)} ms`);
    const finished = await waitFor(client, created.id, (b) => ["completed", "failed", "expired", "cancelled"].includes(b.status), 200);
    const seconds = (finished.at - running.at) / 1000;
    const outputTokens = (finished.batch as unknown as { usage: { output_tokens: number } }).usage.output_tokens;
    const batchTps = outputTokens / seconds;
    console.log(`batch: ${finished.batch.status}, ${finished.batch.request_counts?.completed}/${LINES} lines, ${outputTokens} tokens in ${seconds.toFixed(1)} s = ${batchTps.toFixed(0)} tok/s`);
    return { batchTps, seconds, outputTokens, validateMs, idle, busy, lines: `${LINES} lines (${finished.batch.status}, ${finished.batch.request_counts?.completed} completed)` };
  } finally {
    await close();
  }
}

async function main(): Promise<void> {
  // The machine's speed drifts over minutes (a shared VM): the baseline runs before and after
  // the batch, and the ratio is taken against their mean.
  console.log(`baseline: ${BASELINE_REQUESTS} requests in process...`);
  const before = await baseline();
  console.log(`baseline before: ${before.tokensPerSecond.toFixed(0)} tok/s at ${before.slots} slots`);
  const stack = await throughStack();
  const after = await baseline();
  console.log(`baseline after: ${after.tokensPerSecond.toFixed(0)} tok/s`);
  const baseTps = (before.tokensPerSecond + after.tokensPerSecond) / 2;

  const rows = [
    ["engine in process (baseline)", `${baseTps.toFixed(0)} tok/s`, `mean of ${before.tokensPerSecond.toFixed(0)} before and ${after.tokensPerSecond.toFixed(0)} after the batch; ${BASELINE_REQUESTS} requests each, ${before.slots} slots, max_tokens ${MAX_TOKENS}`],
    ["batch through the stack", `${stack.batchTps.toFixed(0)} tok/s`, `${stack.lines}, ${stack.outputTokens} output tokens in ${stack.seconds.toFixed(1)} s, in_progress to completed`],
    ["batch / baseline", `**${(stack.batchTps / baseTps).toFixed(2)}**`, "target >= 0.9"],
    ["validation of a 50,000-line file", `${stack.validateMs} ms`, "streamed from the Object Store, same schema as the HTTP route"],
    ["interactive TTFT, idle", `p50 ${stack.idle.p50.toFixed(1)} ms, p99 ${stack.idle.p99.toFixed(1)} ms`, `${stack.idle.n} sequential streamed requests, max_tokens 4`],
    ["interactive TTFT, batch running", `p50 ${stack.busy.p50.toFixed(1)} ms, p99 ${stack.busy.p99.toFixed(1)} ms`, `${stack.busy.n} requests while every slot decodes batch lines`],
  ];
  const md = [
    "# Batch benchmark",
    "",
    `Run: \`npm run build && node dist/bench/batch.js\` on ${new Date().toISOString().slice(0, 10)}, tiny model \`${TEST_MODEL}\` (catalog/test.yaml: ${before.slots} slots, threads 1), one runner, one actor host, one gateway, one nats-server, all on this machine (${allowedCpus().length} CPUs); ${layout.description}.`,
    "",
    "| measure | value | notes |",
    "|---|---|---|",
    ...rows.map((r) => `| ${r.join(" | ")} |`),
    "",
  ].join("\n");
  const dir = join(repoRoot, "bench", "results");
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "batch.md"), md);
  console.log("\n" + md);
}

main().then(() => process.exit(0), (err: unknown) => {
  console.error(err);
  process.exit(1);
});
