// What `log: true` costs a request: output tokens/s and time to first token with a trace recorded
// for every request, against the same requests without `log`, in the same run.
//
//   npm run build && node dist/bench/log-overhead.js [--seconds 6] [--rounds 3] [--sim-streams 500] [--llama-streams 64] [--profile DIR]
//
// Two stacks in turn (nats-server, actor host, one runner, one gateway each): the sim engine with
// 500 concurrent streams (so the gateway, not the engine, is the limit: 64 tokens a request at
// 400 tokens/s each), and the llama engine with the tiny test model at 64 concurrent streams
// (64 slots). Closed-loop streaming clients; phases with and without log alternate, `rounds`
// times each, so that the machine's drift falls on both alike. Writes bench/results/log-overhead.md.

import { parseArgs } from "node:util";
import { join } from "node:path";
import { loadavg } from "node:os";
import { cpuMs, cpuProfileEnv, startActorHost, startGateway, startNats, startRunner, TEST_KEY, TEST_MODEL } from "./lib/processes.js";
import type { Proc } from "../test/harness/processes.js";
import { streamFor, type StreamedFor } from "./lib/closed-loop.js";
import { SseLoadClient } from "./lib/sse-client.js";
import { fmt, percentile } from "./lib/stats.js";
import { machineLine, markdownTable, resultsDir, writeResults } from "./lib/table.js";
import { readFileSync } from "node:fs";
import type { JetStreamClient } from "@nats-io/jetstream";
import { buildTrace, RequestObservation, TraceWriter } from "../modules/traces/mod.js";
import { createLogger } from "../lib/log.js";
import { ChatCompletionAccumulator } from "../modules/openai/mod.js";

const { values: args } = parseArgs({
  options: {
    seconds: { type: "string", default: "6" },
    rounds: { type: "string", default: "3" },
    "sim-streams": { type: "string", default: "500" },
    "llama-streams": { type: "string", default: "64" },
    engines: { type: "string", default: "sim,llama" },
    out: { type: "string", default: "log-overhead.md" },
    /** The gateway writes V8 CPU profiles of round 1's log-off and log-on phases there (bench/lib/cpu-profile.ts). */
    profile: { type: "string" },
  },
});
const SECONDS = Number(args.seconds);
const ROUNDS = Number(args.rounds);

interface Phase extends StreamedFor {
  /** CPU ms each process spent during the phase (the bench client is "client"). */
  cpu: Record<string, number>;
}

/** The processes whose CPU time a phase records: pid by name. */
type Pids = Record<string, number>;

function cpuOf(pids: Pids): Record<string, number> {
  return Object.fromEntries(Object.entries(pids).map(([name, pid]) => [name, cpuMs(pid)]));
}

/** `concurrency` closed-loop streaming clients for `seconds`; tokens counted from usage chunks. */
async function phase(client: SseLoadClient, concurrency: number, body: Record<string, unknown>, pids: Pids = {}, toggleProfile?: () => void): Promise<Phase> {
  toggleProfile?.();
  const cpuBefore = cpuOf(pids);
  const out: Phase = { ...(await streamFor(client, body, concurrency, SECONDS)), cpu: {} };
  const cpuAfter = cpuOf(pids);
  if (toggleProfile) {
    toggleProfile();
    // The profile is written meanwhile: a start signal while V8 still stops the last one is lost.
    await new Promise((r) => setTimeout(r, 2_000));
  }
  for (const name of Object.keys(pids)) out.cpu[name] = cpuAfter[name]! - cpuBefore[name]!;
  return out;
}

/** TTFTs of logged and unlogged requests sent side by side in one phase. */
interface MixedPhase {
  ttftsOff: number[];
  ttftsOn: number[];
  errors: number;
}

/**
 * The same closed loop with every client alternating `log: true` and `log` off from one request
 * to the next: both kinds meet the same load at the same moments, so the difference of their
 * TTFTs is what `log: true` adds on a request's own path (an extra round trip, or work before its
 * first token), apart from what the machine's shared load does to every request alike.
 */
async function mixedPhase(client: SseLoadClient, concurrency: number, body: Record<string, unknown>): Promise<MixedPhase> {
  const deadline = performance.now() + SECONDS * 1000;
  const out: MixedPhase = { ttftsOff: [], ttftsOn: [], errors: 0 };
  const logged = { ...body, log: true };
  await Promise.all(
    Array.from({ length: concurrency }, async (_, i) => {
      for (let n = i; performance.now() < deadline; n++) {
        const log = n % 2 === 1;
        const r = await client.streamChat(log ? logged : body, false);
        if (!r.ok) {
          out.errors++;
          continue;
        }
        (log ? out.ttftsOn : out.ttftsOff).push(r.ttftMs);
      }
    }),
  );
  return out;
}

interface ScenarioResult {
  name: string;
  concurrency: number;
  off: Phase[];
  on: Phase[];
  mixed: MixedPhase[];
  /** p50 of each timing (ms after arrival) over the last stored traces: where a logged request's TTFT goes, by the gateway's clock. */
  traceTimings: Record<string, number>;
  traces: number;
  dropped: string;
}

async function scenario(name: string, env: NodeJS.ProcessEnv, concurrency: number, body: Record<string, unknown>): Promise<ScenarioResult> {
  process.stderr.write(`\n${name}: starting the stack\n`);
  const nats = await startNats();
  const procs: Proc[] = [];
  try {
    const actors = await startActorHost(nats.url, env);
    procs.push(actors);
    const runner = await startRunner(nats.url, env);
    procs.push(runner);
    const gateway = await startGateway(nats.url, { ...env, ...cpuProfileEnv(args.profile) });
    const toggleProfile = args.profile ? () => process.kill(gateway.child.pid!, "SIGUSR2") : undefined;
    procs.push(gateway);
    const pids: Pids = { gateway: gateway.child.pid!, runner: runner.child.pid!, actors: actors.child.pid!, nats: nats.child.pid!, client: process.pid };
    const client = new SseLoadClient("127.0.0.1", gateway.port, TEST_KEY);
    // Warm-up: rate-limit leases, key cache, connections, the engine.
    await phase(client, concurrency, { ...body, log: true });
    const off: Phase[] = [];
    const on: Phase[] = [];
    const mixed: MixedPhase[] = [];
    for (let r = 0; r < ROUNDS; r++) {
      // Round 1's phases are profiled when asked: <pid>-1 is log off, <pid>-2 log on.
      off.push(await phase(client, concurrency, body, pids, r === 0 ? toggleProfile : undefined));
      on.push(await phase(client, concurrency, { ...body, log: true }, pids, r === 0 ? toggleProfile : undefined));
      mixed.push(await mixedPhase(client, concurrency, body));
      process.stderr.write(`${name} round ${r + 1}: off ${fmt(off.at(-1)!.tokens / off.at(-1)!.seconds, 0)} tok/s, on ${fmt(on.at(-1)!.tokens / on.at(-1)!.seconds, 0)} tok/s\n`);
    }
    client.close();
    await new Promise((res) => setTimeout(res, 500));
    const listed = (await (await fetch(`${gateway.baseURL}/traces?limit=100`, { headers: { authorization: `Bearer ${TEST_KEY}` } })).json()) as { data: Array<{ timings: Record<string, number | null> }> };
    const traceTimings: Record<string, number> = {};
    for (const name of ["rate_limit_admitted_ms", "runner_admitted_ms", "queue_wait_ms", "first_token_ms", "end_ms"])
      traceTimings[name] = percentile(listed.data.map((x) => x.timings[name] ?? NaN).filter((v) => !Number.isNaN(v)).sort((a, b) => a - b), 50);
    const metrics = await (await fetch(gateway.url + "/metrics")).text();
    const dropped = /^tributary_traces_dropped_total (\S+)$/m.exec(metrics)?.[1] ?? "?";
    // Stored traces as the writer counts them: one stream message holds several.
    const written = Number(/^tributary_traces_written_total (\S+)$/m.exec(metrics)?.[1] ?? NaN);
    return { name, concurrency, off, on, mixed, traceTimings, traces: written, dropped };
  } finally {
    for (const p of procs.reverse()) await p.kill();
    await nats.stop();
  }
}

const sum = (phases: Phase[], f: (p: Phase) => number) => phases.reduce((n, p) => n + f(p), 0);
const rate = (phases: Phase[]) => sum(phases, (p) => p.tokens) / sum(phases, (p) => p.seconds);
const p50 = (phases: Phase[]) => percentile(phases.flatMap((p) => p.ttfts).sort((a, b) => a - b), 50);

/**
 * The gateway's own work for one logged streamed request, in process: the observation's
 * bookkeeping on 64 deltas, the stream reassembled, the trace built, and handed to a TraceWriter
 * (encoded into its message) whose flush goes to a stand-in for JetStream every 64 requests. The
 * same without log: the bookkeeping alone (every request carries an observation).
 */
async function inProcessCost(): Promise<{ offUs: number; onUs: number }> {
  const body = Buffer.from(JSON.stringify({ model: TEST_MODEL, messages: [{ role: "user", content: "Tell me a story about a dragon and a river." }], max_tokens: 64, stream: true, stream_options: { include_usage: true }, log: true }));
  const principal = { organizationId: "org-local", projectId: "proj-local", keyId: "key_0123456789" };
  const words = ["Once", " upon", " a", " time", ",", " there", " was", " a", " little", " dragon", "."];
  const usage = { promptTokens: 20, completionTokens: 64, cachedPromptTokens: 0 };
  const js = { publish: async () => ({ stream: "t", seq: 1, duplicate: false }) } as unknown as JetStreamClient;
  const writer = new TraceWriter(js, { maxBuffered: 100_000, maxBufferedBytes: 1 << 30, flushMs: 60_000 }, createLogger("bench", { quiet: true }));
  const run = (log: boolean) => {
    const obs = new RequestObservation("/v1/chat/completions", "req_x", Date.now(), performance.now());
    obs.model = TEST_MODEL;
    obs.log = log;
    obs.stream = true;
    if (log) {
      obs.requestBody = body;
      const whole = new ChatCompletionAccumulator(1);
      obs.reassembly = whole;
      obs.responseOf = () => whole.toCompletionJson("chatcmpl-x", 0, TEST_MODEL, usage);
    }
    const listener = obs.wrap({ delta: () => {}, choiceEnd: () => {}, final: () => {}, failure: () => {} });
    obs.runnerAdmitted("runner", 20, log ? "### Human\nTell me a story about a dragon and a river.\n\n### Assistant\n" : undefined);
    for (let i = 0; i < 64; i++) listener.delta({ choiceIndex: 0, text: words[i % words.length]!, toolCalls: [], tokens: 1 });
    listener.choiceEnd({ choiceIndex: 0, finishReason: 2, completionTokens: 64 });
    listener.final({ usage, error: undefined, queueWaitMs: 0 });
    if (log) writer.record(buildTrace(obs, { principal, httpStatus: 200, clientLeft: false, maxBodyBytes: 65_536 }));
  };
  const time = async (log: boolean) => {
    const batch = async (n: number) => {
      for (let i = 0; i < n; i++) {
        run(log);
        if (i % 64 === 63) await writer.flush();
      }
      await writer.flush();
    };
    await batch(2_048);
    const n = 20_480;
    // CPU time, not wall clock: on a shared machine the process is descheduled now and then.
    const before = process.cpuUsage();
    await batch(n);
    const used = process.cpuUsage(before);
    return (used.user + used.system) / n;
  };
  return { offUs: await time(false), onUs: await time(true) };
}

const limits = { rate_limits: { requests_per_minute: 100_000_000, tokens_per_minute: 1_000_000_000 } };
const engines = new Set(args.engines.split(","));
const loadAtStart = loadavg()[0]!;
const results: ScenarioResult[] = [];
if (engines.has("sim"))
  results.push(
    await scenario(
      "sim engine",
      {
        TRIBUTARY_MODEL_OVERRIDES: JSON.stringify({ [TEST_MODEL]: { engine: "sim", sim: { tokens_per_second: 400, first_token_latency_ms: 5 }, slots: 1024, queue_limit: 4096, ...limits } }),
        TRIBUTARY_MAX_CONNECTIONS_PER_ADDRESS: "0",
      },
      Number(args["sim-streams"]),
      { model: TEST_MODEL, messages: [{ role: "user", content: "Tell me a story about a dragon and a river." }], max_tokens: 64 },
    ),
  );
if (engines.has("llama"))
  results.push(
    await scenario(
      "llama engine (tiny model)",
      { TRIBUTARY_MODEL_OVERRIDES: JSON.stringify({ [TEST_MODEL]: { slots: 64, queue_limit: 1024, ...limits } }), TRIBUTARY_MAX_CONNECTIONS_PER_ADDRESS: "0" },
      Number(args["llama-streams"]),
      { model: TEST_MODEL, messages: [{ role: "user", content: "Tell me a story about a dragon and a river." }], max_tokens: 64 },
    ),
  );

const rows = results.map((r) => [
  r.name,
  r.concurrency,
  fmt(rate(r.off), 0),
  fmt(rate(r.on), 0),
  fmt(rate(r.on) / rate(r.off), 3),
  fmt(p50(r.off), 2),
  fmt(p50(r.on), 2),
  fmt(p50(r.on) - p50(r.off), 2),
  sum(r.off, (p) => p.errors) + sum(r.on, (p) => p.errors),
  r.traces,
  r.dropped,
]);
/** CPU ms a process spent per 1,000 output tokens over the phases of one side. */
const cpuPerKTok = (phases: Phase[], name: string) => (sum(phases, (p) => p.cpu[name] ?? 0) / sum(phases, (p) => p.tokens)) * 1000;
const PROCESSES = ["gateway", "runner", "actors", "nats", "client"] as const;
const cpuRows = results.flatMap((r) =>
  [...PROCESSES, "all"].map((name) => {
    const of = (phases: Phase[]) => (name === "all" ? PROCESSES.reduce((n, p) => n + cpuPerKTok(phases, p), 0) : cpuPerKTok(phases, name));
    // max_tokens 64 and the tiny model never stops early: 64 tokens a request.
    return [r.name, name, fmt(of(r.off), 1), fmt(of(r.on), 1), fmt(of(r.on) - of(r.off), 1), fmt((of(r.on) - of(r.off)) * 64, 0)];
  }),
);
const median = (xs: number[]) => percentile([...xs].sort((a, b) => a - b), 50);
const mixedRows = results.map((r) => {
  const off = r.mixed.flatMap((m) => m.ttftsOff);
  const on = r.mixed.flatMap((m) => m.ttftsOn);
  // Per round, then the median of the rounds' differences: a round's drift falls on both kinds.
  const perRound = r.mixed.map((m) => median(m.ttftsOn) - median(m.ttftsOff));
  return [r.name, r.concurrency, off.length, on.length, fmt(median(off), 2), fmt(median(on), 2), fmt(median(on) - median(off), 2), perRound.map((d) => fmt(d, 2)).join(", "), r.mixed.reduce((n, m) => n + m.errors, 0)];
});
const timingRows = results.map((r) => [r.name, ...["rate_limit_admitted_ms", "runner_admitted_ms", "queue_wait_ms", "first_token_ms", "end_ms"].map((k) => fmt(r.traceTimings[k] ?? NaN, 2)), fmt(p50(r.on), 2)]);
const loadAtEnd = loadavg()[0]!;
const cost = await inProcessCost();
// A hand-written "## History" section of the page (before/after figures of past changes) is kept.
const previous = (() => {
  try {
    return readFileSync(join(resultsDir, args.out), "utf8");
  } catch {
    return "";
  }
})();
const history = previous.indexOf("\n## History");
writeResults(args.out, "log: true against log off", [
  machineLine(),
  `Command: \`node dist/bench/log-overhead.js ${process.argv.slice(2).join(" ")}\`. Load average (1 min): ${fmt(loadAtStart, 2)} at start, ${fmt(loadAtEnd, 2)} at end (the machine is shared: figures are ratios within one run).`,
  `In process (CPU time), one streamed request of 64 tokens: the gateway's bookkeeping ${fmt(cost.offUs, 2)} µs without log, ${fmt(cost.onUs, 2)} µs with log (observation, reassembly, trace built, encoded into its stream message, flushed to a stand-in publisher): ${fmt(cost.onUs - cost.offUs, 2)} µs a logged request adds to the gateway's CPU, off the request's path (the trace is built after the last byte went out). Storing it is nats-server's work.`,
  `${ROUNDS} rounds of ${SECONDS} s per side, alternating; closed-loop streaming clients, max_tokens 64, stream_options.include_usage.`,
  markdownTable(["engine", "streams", "tok/s log off", "tok/s log on", "ratio", "TTFT p50 off (ms)", "TTFT p50 on (ms)", "TTFT added p50 (ms)", "errors", "traces stored", "traces dropped"], rows),
  "Side by side: in one phase every client alternates `log: true` and `log` off, so both kinds of request meet the same load. The TTFT difference is what a logged request's own path adds (work or a round trip before its first token); the phases above also count what logging costs the whole machine, which at saturation (a closed loop on 2 shared cores) lengthens every request's queue.",
  markdownTable(["engine", "streams", "requests log off", "requests log on", "TTFT p50 off (ms)", "TTFT p50 on (ms)", "TTFT added p50 (ms)", "added per round (ms)", "errors"], mixedRows),
  "A logged request's time by the traces' own timings (p50 over the last 100 traces of the run, ms after the gateway read the request), against the TTFT its client saw: the gap is time outside the request's own path (its bytes waiting in socket buffers and event loops, the gateway's and the client's, on a saturated machine).",
  markdownTable(["engine", "rate limit admitted", "runner admitted", "runner queue wait", "first token", "end", "client TTFT p50, log on"], timingRows),
  "CPU time per 1,000 output tokens, by process (from /proc; the bench client is this process). With every process on 2 shared cores, what a logged request adds anywhere slows every stream: this table says where it goes.",
  markdownTable(["engine", "process", "CPU ms / 1k tok, log off", "log on", "added", "added per request (µs)"], cpuRows),
  "Target (issue 11): ratio >= 0.97 and TTFT added <= 0.2 ms p50. The trace is built and encoded into its stream message when the request is over (its last byte sent) and published by a background timer, so a logged request's own path adds only the observation's bookkeeping: the side-by-side table measures that. In the alternating phases the TTFT difference follows the throughput ratio: with closed-loop clients on a saturated machine every request waits in line behind the others, and that line grows by what logging costs the machine as a whole.",
  ...(history >= 0 ? [previous.slice(history + 1).trimEnd()] : []),
]);
