// Prefix-aware routing against load-only routing, in the same run: runners of one model (llama
// engine, two by default), two gateways on the same NATS, one routing by prefix
// (TRIBUTARY_ROUTING=prefix) and one by load alone (=load). Two workloads, closed loop:
// - `system`: streamed chat completions that share long system prompts (more distinct prompts
//   than one runner has slots, fewer than two runners have), a short question each;
// - `chains`: multi-turn conversations through the Responses API, each turn chained to the last
//   by previous_response_id, each conversation opened by a long developer message of its own, so
//   every turn's prompt is the whole conversation so far.
// A few output tokens per request. Each round runs both modes in turn (the order
// alternates), each with system prompts of its own so that neither finds the other's in a cache.
// Per mode: TTFT p50/p99, output tokens/s, and the share of prompt tokens the runners found cached
// (usage.prompt_tokens_details.cached_tokens), and the runners' CPU time per request (from /proc:
// a work figure that a busy machine does not inflate the way it does wall-clock times). Writes bench/results/prefix-routing.md.
//   node dist/bench/prefix-routing.js [--model 100m|tiny] [--workload system|chains] [--runners 2] [--rounds 2] [--requests 36] [--concurrency 4] [--system-words 80]
import { mkdirSync, writeFileSync } from "node:fs";
import { loadavg } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import OpenAI from "openai";
import { commonConfig, readConfig } from "../lib/config.js";
import { loadCatalog } from "../modules/catalog/mod.js";
import { startActorHost, startGateway, startNats, startRunner, TEST_KEY, TEST_MODEL, testCatalog, type Proc } from "../test/harness/processes.js";
import { waitForReadyRunners } from "../test/harness/stack.js";
import { ensureRandomLlama, SHAPES, type ShapeName } from "./gguf/random-llama.js";
import { cpuMs } from "./lib/processes.js";
import { fmt, percentile } from "./lib/stats.js";
import { machineLine, markdownTable, writeResults } from "./lib/table.js";

const { values } = parseArgs({
  options: {
    model: { type: "string", default: "100m" },
    rounds: { type: "string", default: "2" },
    requests: { type: "string", default: "36" },
    concurrency: { type: "string", default: "4" },
    prompts: { type: "string", default: "6" },
    slots: { type: "string", default: "4" },
    "system-words": { type: "string", default: "80" },
    "max-tokens": { type: "string", default: "8" },
    workload: { type: "string", default: "system" },
    runners: { type: "string", default: "2" },
  },
});
const workload = values.workload as "system" | "chains";
if (workload !== "system" && workload !== "chains") throw new Error("--workload is system or chains");
const runnerCount = Number(values.runners);
const rounds = Number(values.rounds);
const requestsPerPhase = Number(values.requests);
const concurrency = Number(values.concurrency);
const promptCount = Number(values.prompts);
const slots = Number(values.slots);
const systemWords = Number(values["system-words"]);
const maxTokens = Number(values["max-tokens"]);
const modes = ["prefix", "load"] as const;
type Mode = (typeof modes)[number];

const WORDS = "river stone lantern harbor meadow copper signal winter orchard thread compass ember violet canyon ledger anchor willow quartz saddle beacon".split(" ");
/** A long system prompt of its own per (round, mode, index): its first words already differ. */
function systemPrompt(round: number, mode: Mode, index: number): string {
  let seed = (round * 7919 + (mode === "prefix" ? 1 : 2) * 104729 + index * 1299709) >>> 0;
  const next = () => (seed = (seed * 1664525 + 1013904223) >>> 0);
  const words = Array.from({ length: systemWords }, () => WORDS[next() % WORDS.length]);
  return `Policy ${round}-${mode}-${index}. You are assistant number ${index}. Follow these notes: ${words.join(" ")}.`;
}

interface Sample {
  ttftMs: number;
  promptTokens: number;
  cachedTokens: number;
  completionTokens: number;
  runner: string;
  prompt: number;
}

type PhaseResult = { samples: Sample[]; seconds: number; errors: number; runnerCpuMs?: number };

function phase(client: OpenAI, round: number, mode: Mode, requests = requestsPerPhase): Promise<PhaseResult> {
  return workload === "chains" ? chainsPhase(client, round, mode, requests) : systemPhase(client, round, mode, requests);
}

/**
 * Conversations of `promptCount`, each continued turn after turn by previous_response_id; each
 * worker owns its conversations (a chain is sequential) and takes them in turn.
 */
async function chainsPhase(client: OpenAI, round: number, mode: Mode, requests: number): Promise<PhaseResult> {
  const samples: Sample[] = [];
  let errors = 0;
  let sent = 0;
  const last = new Map<number, string>();
  const started = performance.now();
  const worker = async (w: number) => {
    const mine = Array.from({ length: promptCount }, (_, c) => c).filter((c) => c % concurrency === w);
    for (let turn = 0; mine.length > 0; turn++) {
      for (const conversation of mine) {
        if (sent >= requests) return;
        sent++;
        const previous = last.get(conversation);
        const at = performance.now();
        try {
          const { data: stream, response } = await client.responses
            .create({
              model: TEST_MODEL,
              input: previous
                ? `Turn ${turn}: and then?`
                : [
                    { role: "developer", content: systemPrompt(round, mode, conversation) },
                    { role: "user", content: "Turn 0: begin." },
                  ],
              ...(previous ? { previous_response_id: previous } : {}),
              max_output_tokens: Math.max(16, maxTokens),
              store: true,
              stream: true,
            })
            .withResponse();
          let ttft = 0;
          let done: OpenAI.Responses.Response | undefined;
          for await (const event of stream) {
            if (!ttft && event.type === "response.output_text.delta") ttft = performance.now() - at;
            if (event.type === "response.completed" || event.type === "response.incomplete") done = event.response;
          }
          if (!done) throw new Error("the stream ended without the response");
          last.set(conversation, done.id);
          samples.push({
            ttftMs: ttft,
            promptTokens: done.usage?.input_tokens ?? 0,
            cachedTokens: done.usage?.input_tokens_details?.cached_tokens ?? 0,
            completionTokens: done.usage?.output_tokens ?? 0,
            runner: response.headers.get("x-tributary-runner") ?? "",
            prompt: conversation,
          });
        } catch (err) {
          errors++;
          last.delete(conversation); // starts over
          process.stderr.write(`  error: ${String(err).slice(0, 160)}\n`);
        }
      }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, (_, w) => worker(w)));
  return { samples, seconds: (performance.now() - started) / 1000, errors };
}

async function systemPhase(client: OpenAI, round: number, mode: Mode, requests: number): Promise<PhaseResult> {
  const samples: Sample[] = [];
  let errors = 0;
  let next = 0;
  const started = performance.now();
  const worker = async () => {
    for (;;) {
      const i = next++;
      if (i >= requests) return;
      // Prompts in a shuffled cycle: every prompt comes back, never twice in a row.
      const prompt = (i * 5 + Math.floor(i / promptCount)) % promptCount;
      const sent = performance.now();
      try {
        const { data: stream, response } = await client.chat.completions
          .create({
            model: TEST_MODEL,
            messages: [
              { role: "system", content: systemPrompt(round, mode, prompt) },
              { role: "user", content: `Question ${i}: what comes next?` },
            ],
            max_tokens: maxTokens,
            stream: true,
            stream_options: { include_usage: true },
          })
          .withResponse();
        let ttft = 0;
        let usage: OpenAI.CompletionUsage | undefined;
        for await (const chunk of stream) {
          if (!ttft && chunk.choices[0]?.delta?.content) ttft = performance.now() - sent;
          if (chunk.usage) usage = chunk.usage;
        }
        samples.push({
          ttftMs: ttft,
          promptTokens: usage?.prompt_tokens ?? 0,
          cachedTokens: usage?.prompt_tokens_details?.cached_tokens ?? 0,
          completionTokens: usage?.completion_tokens ?? 0,
          runner: response.headers.get("x-tributary-runner") ?? "",
          prompt,
        });
      } catch (err) {
        errors++;
        process.stderr.write(`  error: ${String(err).slice(0, 160)}\n`);
      }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  return { samples, seconds: (performance.now() - started) / 1000, errors };
}

async function main(): Promise<void> {
  const { home } = readConfig(commonConfig);
  const tokenizer = loadCatalog(testCatalog).find((m) => m.id === TEST_MODEL)!.source;
  const path = values.model === "tiny" ? tokenizer : ensureRandomLlama(home, SHAPES[values.model as ShapeName], tokenizer);
  const catalog = join(home, "bench-catalogs", `prefix-routing-${values.model}.yaml`);
  mkdirSync(join(home, "bench-catalogs"), { recursive: true });
  // The test model's id, so the harness's clients and checks apply; the weights are the bench model's.
  writeFileSync(catalog, `models:\n  - id: ${TEST_MODEL}\n    engine: llama\n    source: ${JSON.stringify(path)}\n    context_length: 2048\n    max_output_tokens: ${Math.max(16, maxTokens)}\n` +
    `    slots: ${slots}\n    queue_limit: ${slots * 8}\n    threads: 1\n    rate_limits: { requests_per_minute: 10000000, tokens_per_minute: 1000000000 }\n`);
  const env = { TRIBUTARY_CATALOG: catalog };
  const procs: Proc[] = [];
  const nats = await startNats();
  try {
    procs.push(await startActorHost(nats.url, env));
    const runners = await Promise.all(Array.from({ length: runnerCount }, () => startRunner(nats.url, env)));
    procs.push(...runners);
    const gateways = { prefix: await startGateway(nats.url, { ...env, TRIBUTARY_ROUTING: "prefix" }), load: await startGateway(nats.url, { ...env, TRIBUTARY_ROUTING: "load" }) };
    procs.push(gateways.prefix, gateways.load);
    const clients = {
      prefix: new OpenAI({ apiKey: TEST_KEY, baseURL: gateways.prefix.baseURL, maxRetries: 0, timeout: 120_000 }),
      load: new OpenAI({ apiKey: TEST_KEY, baseURL: gateways.load.baseURL, maxRetries: 0, timeout: 120_000 }),
    };
    /** CPU time of all runner processes so far (ms): the phases run one at a time, so a difference is one phase's. */
    const runnerCpu = () => runners.reduce((n, r) => n + cpuMs(r.child.pid!), 0);
    await waitForReadyRunners(gateways.prefix.url, runnerCount, 300_000);
    await waitForReadyRunners(gateways.load.url, runnerCount, 300_000);
    // Warm-up (not measured): the first requests of a fresh runner pay for allocations.
    await phase(clients.load, -1, "load", 2 * concurrency);

    const loadStart = loadavg()[0]!;
    const results = new Map<Mode, Array<Awaited<ReturnType<typeof phase>>>>(modes.map((m) => [m, []]));
    for (let round = 0; round < rounds; round++) {
      for (const mode of round % 2 === 0 ? modes : [...modes].reverse()) {
        process.stderr.write(`round ${round + 1}/${rounds}: ${mode}\n`);
        const cpuBefore = runnerCpu();
        const r = await phase(clients[mode], round, mode);
        r.runnerCpuMs = runnerCpu() - cpuBefore;
        results.get(mode)!.push(r);
        const ttft = r.samples.map((s) => s.ttftMs);
        process.stderr.write(`  TTFT p50 ${fmt(percentile(ttft, 50), 0)} ms, p99 ${fmt(percentile(ttft, 99), 0)} ms, ${fmt(r.samples.reduce((n, s) => n + s.completionTokens, 0) / r.seconds, 1)} tok/s, runner CPU ${fmt(r.runnerCpuMs / Math.max(1, r.samples.length), 0)} ms per request, cached ${fmt((100 * r.samples.reduce((n, s) => n + s.cachedTokens, 0)) / Math.max(1, r.samples.reduce((n, s) => n + s.promptTokens, 0)), 0)} %, errors ${r.errors}\n`);
      }
    }
    const loadEnd = loadavg()[0]!;

    const summary = (mode: Mode) => {
      const runs = results.get(mode)!;
      const samples = runs.flatMap((r) => r.samples);
      const ttft = samples.map((s) => s.ttftMs);
      const seconds = runs.reduce((n, r) => n + r.seconds, 0);
      const prompt = samples.reduce((n, s) => n + s.promptTokens, 0);
      const cached = samples.reduce((n, s) => n + s.cachedTokens, 0);
      // Of each system prompt's requests, the share that went to the runner it went to most.
      const byPrompt = new Map<string, Map<string, number>>();
      for (const [i, r] of runs.entries())
        for (const s of r.samples) {
          const key = `${i}/${s.prompt}`;
          const m = byPrompt.get(key) ?? new Map<string, number>();
          m.set(s.runner, (m.get(s.runner) ?? 0) + 1);
          byPrompt.set(key, m);
        }
      let top = 0;
      for (const m of byPrompt.values()) top += Math.max(...m.values());
      const perRunner = new Map<string, number>();
      for (const s of samples) perRunner.set(s.runner, (perRunner.get(s.runner) ?? 0) + 1);
      return {
        p50: percentile(ttft, 50),
        p99: percentile(ttft, 99),
        tokensPerSecond: samples.reduce((n, s) => n + s.completionTokens, 0) / seconds,
        promptTokens: prompt,
        evaluated: prompt - cached,
        cachedShare: prompt ? cached / prompt : 0,
        affinity: samples.length ? top / samples.length : 0,
        split: [...perRunner.values()].sort((a, b) => b - a).join(" / "),
        errors: runs.reduce((n, r) => n + r.errors, 0),
        cpuPerRequest: samples.length ? runs.reduce((n, r) => n + (r.runnerCpuMs ?? 0), 0) / samples.length : 0,
        requests: samples.length,
        meanPrompt: samples.length ? prompt / samples.length : 0,
      };
    };
    const p = summary("prefix");
    const l = summary("load");
    const rows = [
      ["prefix-aware", fmt(p.p50, 0), fmt(p.p99, 0), fmt(p.tokensPerSecond, 1), fmt(p.cpuPerRequest, 0), `${p.evaluated} of ${p.promptTokens}`, fmt(p.cachedShare * 100, 0) + " %", fmt(p.affinity * 100, 0) + " %", p.split, p.errors],
      ["load only", fmt(l.p50, 0), fmt(l.p99, 0), fmt(l.tokensPerSecond, 1), fmt(l.cpuPerRequest, 0), `${l.evaluated} of ${l.promptTokens}`, fmt(l.cachedShare * 100, 0) + " %", fmt(l.affinity * 100, 0) + " %", l.split, l.errors],
      ["ratio prefix / load", fmt(p.p50 / l.p50, 2), fmt(p.p99 / l.p99, 2), fmt(p.tokensPerSecond / l.tokensPerSecond, 2), fmt(p.cpuPerRequest / l.cpuPerRequest, 2), fmt(p.evaluated / l.evaluated, 2), "", "", "", ""],
    ];
    const what = workload === "chains"
      ? `Workload per phase: ${requestsPerPhase} streamed Responses API turns, ${concurrency} at a time (closed loop), in ${promptCount} conversations chained by previous_response_id, each opened by a developer message of its own (${systemWords} words); ~${fmt(p.meanPrompt, 0)} prompt tokens per turn on average (the whole conversation so far), ${Math.max(16, maxTokens)} output tokens at most. `
      : `Workload per phase: ${requestsPerPhase} streamed chat completions, ${concurrency} at a time (closed loop), each a system prompt (one of ${promptCount}, ${systemWords} words, ~${fmt(p.meanPrompt, 0)} prompt tokens with the question) and a short question, ${maxTokens} output tokens. `;
    writeResults(workload === "chains" ? `prefix-routing-chains-${runnerCount}.md` : "prefix-routing.md", `Prefix-aware routing vs load-only routing (${runnerCount} runners, ${workload === "chains" ? "multi-turn chains" : "shared system prompts"})`, [
      machineLine() + ` Load average (1 min) at start and end of the measured rounds: ${loadStart.toFixed(1)}, ${loadEnd.toFixed(1)} (2 cores shared with other work).`,
      `Model: ${path.split("/").pop()} (llama engine, 1 thread, ${slots} slots per runner), ${runnerCount} runners, 1 NATS server, 1 actor host, one gateway per routing mode. ` +
        what +
        `${rounds} rounds; each round runs both modes (order alternating), each mode with system prompts of its own. TTFT: from the request to the first content chunk.`,
      markdownTable(["routing", "TTFT p50 ms", "TTFT p99 ms", "output tok/s", "runner CPU ms per request", "prompt tokens evaluated", "cached share", "same runner per prompt", "requests per runner", "errors"], rows),
      "\"same runner per prompt\": of the requests of each system prompt, the share served by the runner that served most of them. \"prompt tokens evaluated\": prompt tokens minus those the runners found cached (usage.prompt_tokens_details.cached_tokens). \"runner CPU ms per request\": the runner processes' CPU time (user + system, from /proc) during a mode's phases, per request: work that a busy machine does not inflate the way it inflates wall-clock times. \"requests per runner\": over both rounds; conversations have unequal turn counts (each worker takes the next turn of its own conversations as soon as the last ends).",
      `Command: \`node dist/bench/prefix-routing.js --model ${values.model} --workload ${workload} --runners ${runnerCount} --rounds ${rounds} --requests ${requestsPerPhase} --concurrency ${concurrency} --prompts ${promptCount} --slots ${slots} --system-words ${systemWords} --max-tokens ${maxTokens}\``,
    ]);
  } finally {
    await Promise.all(procs.map((p) => p.kill()));
    await nats.stop();
  }
  process.exit(0);
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
