// Where a token's time goes at concurrency 1 (the tiny model, or --model 100m/500m): llama.cpp's llama-server, a bare
// node-llama-cpp evaluate loop, the runner's LlamaEngine + Scheduler in process, and the whole
// stack, side by side in alternating rounds, as wall time per token and CPU time per token.
//   node dist/bench/per-token.js [--requests 20] [--rounds 3] [--max-tokens 128] [--slots 64] [--model tiny] [--modes server,bare,engine,stack] [--perf] [--profile DIR]
// --modes may add `addon`: the same decode and sampling through node-llama-cpp's native addon
// directly (one batch, one decode and one sample call per token, the sampler configured once),
// the floor for what a leaner per-token path than `sequence.evaluate` could reach.
// --profile DIR: the stack's runner and gateway write V8 CPU profiles of the first round's
// measured requests there (bench/lib/cpu-profile.ts); the profiler's cost is in that round's figures.
// --perf: also counts instructions retired per token per thread (`perf stat --per-thread`, which
// the machine's load does not move): the decoding process's main thread, its V8 helper threads,
// its other threads (libuv's pool: decode and sample), and every other server process.
// Every decoding process runs on the runner's CPU (as `tributary start` places a runner); the
// bench's clients and the stack's other processes on the other CPU. CPU per token counts the
// decoding process (llama-server, this process for the in-process modes, the runner) and, for
// the stack, every other process of it too.
import { parseArgs } from "node:util";
import { loadavg } from "node:os";
import { readdirSync, readFileSync } from "node:fs";
import { spawn } from "node:child_process";
import { join } from "node:path";
import { getLlama, LlamaLogLevel, type LlamaContext, type LlamaContextSequence, type Token } from "node-llama-cpp";
import { catalogOverridesConfig, commonConfig, readConfig } from "../lib/config.js";
import { ensureRandomLlama, SHAPES, type ShapeName } from "./gguf/random-llama.js";
import { sha256File } from "../runners/engines/llama/model-source.js";
import { loadCatalog } from "../modules/catalog/mod.js";
import { GenerateRequest } from "../proto/gen/tributary/v1/inference.js";
import { LlamaEngine } from "../runners/engines/llama/llama-engine.js";
import { createLogger } from "../lib/log.js";
import { benchLayout, placeSelf } from "./lib/cpu-layout.js";
import { InProcessEngine } from "./lib/engine-baseline.js";
import { ensureLlamaServer, startLlamaServer, type LlamaServer } from "./lib/llama-server.js";
import { cpuMs, cpuProfileEnv, repoRoot, startPlacedStack, TEST_KEY, TEST_MODEL, testCatalog, type PlacedStack } from "./lib/processes.js";
import { SseLoadClient } from "./lib/sse-client.js";
import { fmt, percentile } from "./lib/stats.js";
import { machineLine, markdownTable, writeResults } from "./lib/table.js";

const { values } = parseArgs({
  options: {
    requests: { type: "string", default: "20" },
    rounds: { type: "string", default: "3" },
    "max-tokens": { type: "string", default: "128" },
    slots: { type: "string", default: "64" },
    modes: { type: "string", default: "server,bare,engine,stack" },
    out: { type: "string", default: "per-token.md" },
    perf: { type: "boolean", default: false },
    profile: { type: "string" },
    /** tiny (stories260K), or a random llama of bench/gguf (100m, 500m: compute-bound, cached under $TRIBUTARY_HOME). */
    model: { type: "string", default: "tiny" },
  },
});
const requests = Number(values.requests);
const rounds = Number(values.rounds);
const maxTokens = Number(values["max-tokens"]);
const slots = Number(values.slots);
const modes = values.modes!.split(",");
const prompt = "Once upon a time, in a small village by the river,";
const unlimited = { requests_per_minute: 10_000_000, tokens_per_minute: 1_000_000_000 };
const modelName = values.model!;
if (modelName !== "tiny" && !(modelName in SHAPES)) throw new Error(`--model: "${modelName}" is not tiny or one of ${Object.keys(SHAPES).join(", ")}`);
/** The random models borrow the tiny model's tokenizer; they run under the test model's id. */
const source = modelName === "tiny" ? undefined : ensureRandomLlama(readConfig(commonConfig).home, SHAPES[modelName as ShapeName], loadCatalog(testCatalog).find((m) => m.id === TEST_MODEL)!.source);
// Both servers render ChatML (llama-server's fallback; the tiny and random models carry no template of their own).
const env = { TRIBUTARY_MODEL_OVERRIDES: JSON.stringify({ [TEST_MODEL]: { slots, queue_limit: 1024, rate_limits: unlimited, chat_template: "chatML", ...(source ? { source, sha256: await sha256File(source) } : {}) } }) };
const spec = loadCatalog(testCatalog, readConfig(catalogOverridesConfig, { ...process.env, ...env })).find((m) => m.id === TEST_MODEL)!;
const layout = benchLayout(spec.threads);

interface Sample {
  tokens: number;
  wallMs: number;
  /** CPU ms of the decoding process. */
  decoderCpuMs: number;
  /** CPU ms of every server-side process (the stack: all of it). */
  serverCpuMs: number;
  ttft: number[];
  /** CPU ms of the decoding process's main thread (Node's JS thread; llama-server's first thread). */
  mainThreadCpuMs: number;
  /** Voluntary and involuntary context switches of the decoding process (from /proc). */
  switches: number;
  /** With --perf: instructions retired over the round by thread group. */
  instructions?: Instructions;
}

interface Instructions {
  /** The decoding process's main thread, user + kernel. */
  main: number;
  /** The same, user mode only. */
  mainUser: number;
  /**
   * The decoding process's other threads: libuv's pool (decode and sample, taking turns), V8's
   * GC helpers (Node names neither), llama-server's HTTP threads.
   */
  other: number;
  /** Every other server process. */
  rest: number;
}

/**
 * Counts instructions (user and kernel) per thread of `pids` until the returned stop function is
 * called.
 */
function countInstructions(decoderPid: number, pids: readonly number[]): () => Promise<Instructions> {
  const perf = spawn("perf", ["stat", "--per-thread", "-x", ",", "-e", "instructions:u,instructions:k", "-p", pids.join(",")], { stdio: ["ignore", "ignore", "pipe"] });
  let output = "";
  perf.stderr!.on("data", (d: Buffer) => (output += d.toString()));
  return async () => {
    const decoderThreads = new Set(readdirSync(`/proc/${decoderPid}/task`).map(Number));
    const exited = new Promise((resolve) => perf.once("exit", resolve));
    perf.kill("SIGINT");
    await exited;
    const counts: Instructions = { main: 0, mainUser: 0, other: 0, rest: 0 };
    for (const line of output.split("\n")) {
      // "<comm>-<tid>,<count>,,instructions:u,..."
      const m = /^.*-(\d+),(\d+),[^,]*,instructions:([uk])/.exec(line);
      if (!m) continue;
      const [tid, count, mode] = [Number(m[1]), Number(m[2]), m[3]];
      if (tid === decoderPid && mode === "u") counts.mainUser += count;
      if (tid === decoderPid) counts.main += count;
      else if (!decoderThreads.has(tid)) counts.rest += count;
      else counts.other += count;
    }
    return counts;
  };
}

const selfCpuMs = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
};

/** Context switches of all threads of a process, from /proc/<pid>/task/<tid>/status. */
function switches(pid: number): number {
  let total = 0;
  try {
    for (const tid of readdirSync(`/proc/${pid}/task`)) {
      const status = readFileSync(`/proc/${pid}/task/${tid}/status`, "utf8");
      total += Number(/voluntary_ctxt_switches:\s+(\d+)/.exec(status)?.[1] ?? 0) + Number(/nonvoluntary_ctxt_switches:\s+(\d+)/.exec(status)?.[1] ?? 0);
    }
  } catch {
    // gone
  }
  return total;
}

/** CPU ms of a process's main thread (the thread whose id is the process id). */
function mainThreadCpuMs(pid: number): number {
  try {
    const fields = readFileSync(`/proc/${pid}/task/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / 100;
  } catch {
    return NaN;
  }
}

/** A bare node-llama-cpp loop: the same model and context shape, sampling as the engine's, nothing else. */
class BareLoop {
  protected context!: LlamaContext;
  protected sequence!: LlamaContextSequence;
  protected promptTokens!: Token[];

  /** node-llama-cpp's internals the addon loop drives (see AddonLoop). */
  protected internals() {
    type Addon = { initBatch(n: number): void; addToBatch(seq: number, first: number, tokens: Uint32Array, logits: Uint32Array): number[]; decodeBatch(): Promise<void>; sampleToken(index: number, sampler: unknown): Promise<number>; disposeSequence(seq: number): void };
    const sequence = this.sequence as unknown as { _sequenceId: number; _resolveSamplerConfig(options: object): unknown };
    return { ctx: (this.context as unknown as { _ctx: Addon })._ctx, sequence, model: this.context.model, prompt: this.promptTokens };
  }

  async load(): Promise<void> {
    const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error, progressLogs: false });
    const model = await llama.loadModel({ modelPath: spec.source });
    this.context = await model.createContext({ sequences: slots, contextSize: spec.contextLength, threads: spec.threads, batchSize: spec.batchSize, failedCreationRemedy: false });
    this.sequence = this.context.getSequence();
    // The engine's own prompt for the same chat request, so that both evaluate the same tokens.
    const engine = new LlamaEngine(spec, { modelPath: async () => spec.source, log: createLogger("bench") });
    await engine.load();
    const prepared = await engine.prepare(GenerateRequest.fromPartial({ requestId: "p", model: spec.id, messages: [{ role: "user", content: prompt }], sampling: { temperature: 0.8, maxTokens, n: 1 } }));
    this.promptTokens = (prepared as unknown as { plan: { prompt: Token[] } }).plan.prompt;
    await engine.dispose();
  }

  async one(): Promise<{ ttftMs: number; tokens: number }> {
    const started = performance.now();
    // As the engine does for unseeded requests: keep the cached prompt, evaluate its last token again.
    const cached = this.sequence.nextTokenIndex > 0 ? this.promptTokens.length - 1 : 0;
    await this.sequence.eraseContextTokenRanges([{ start: cached, end: this.sequence.nextTokenIndex }]);
    let tokens = 0;
    let ttftMs = NaN;
    for await (const _token of this.sequence.evaluate(this.promptTokens.slice(cached), { temperature: 0.8, topP: 1, topK: 0, minP: 0, seed: (Math.random() * 2 ** 32) >>> 0 })) {
      if (tokens === 0) ttftMs = performance.now() - started;
      if (++tokens >= maxTokens) break;
    }
    return { ttftMs, tokens };
  }
}

/**
 * The bare loop's decode and sampling without the library's per-token JavaScript: its native
 * addon called directly (`context._ctx`, `LlamaSampler`, `_resolveSamplerConfig`: internals of
 * node-llama-cpp 3.21, used here only to measure). Same tokens as `evaluate` for a seed.
 */
class AddonLoop extends BareLoop {
  private sampling = { temperature: 0.8, topP: 1, topK: 0, minP: 0 };

  override async one(): Promise<{ ttftMs: number; tokens: number }> {
    const { LlamaSampler } = (await import(join(repoRoot, "node_modules/node-llama-cpp/dist/evaluator/LlamaContext/LlamaSampler.js"))) as {
      LlamaSampler: new (model: unknown) => { _sampler: unknown; applyConfig(config: unknown): void; dispose(): void };
    };
    const internals = this.internals();
    const started = performance.now();
    const sampler = new LlamaSampler(internals.model);
    sampler.applyConfig(internals.sequence._resolveSamplerConfig({ ...this.sampling, seed: (Math.random() * 2 ** 32) >>> 0 }));
    internals.ctx.disposeSequence(internals.sequence._sequenceId);
    let input = Uint32Array.from(internals.prompt);
    let position = 0;
    let tokens = 0;
    let ttftMs = NaN;
    try {
      for (;;) {
        internals.ctx.initBatch(input.length);
        const [logitIndex] = internals.ctx.addToBatch(internals.sequence._sequenceId, position, input, Uint32Array.of(input.length - 1));
        await internals.ctx.decodeBatch();
        position += input.length;
        const token = await internals.ctx.sampleToken(logitIndex!, sampler._sampler);
        if (tokens === 0) ttftMs = performance.now() - started;
        if (++tokens >= maxTokens) break;
        input = Uint32Array.of(token);
      }
    } finally {
      sampler.dispose();
    }
    return { ttftMs, tokens };
  }
}

/** Processes that profile the first round they measure (--profile): SIGUSR2 starts and stops it. */
const profiled = new Set<number>();

async function measure(decoderPid: number, serverPids: readonly number[], one: () => Promise<{ ttftMs: number; tokens: number }>, profile: readonly number[] = []): Promise<Sample> {
  const cpu = () => serverPids.reduce((s, p) => s + (p === process.pid ? selfCpuMs() : cpuMs(p) || 0), 0);
  const decoderCpu = () => (decoderPid === process.pid ? selfCpuMs() : cpuMs(decoderPid));
  for (let i = 0; i < 3; i++) await one();
  const sample: Sample = { tokens: 0, wallMs: 0, decoderCpuMs: 0, serverCpuMs: 0, mainThreadCpuMs: 0, ttft: [], switches: 0 };
  const stopCounting = values.perf ? countInstructions(decoderPid, serverPids) : undefined;
  // perf attaches asynchronously: give it a moment before the measured requests.
  if (stopCounting) await new Promise((r) => setTimeout(r, 200));
  const profiling = profile.filter((pid) => !profiled.has(pid));
  for (const pid of profiling) {
    profiled.add(pid);
    process.kill(pid, "SIGUSR2");
  }
  const [c0, d0, m0, s0, t0] = [cpu(), decoderCpu(), mainThreadCpuMs(decoderPid), switches(decoderPid), performance.now()];
  for (let i = 0; i < requests; i++) {
    const r = await one();
    sample.tokens += r.tokens;
    sample.ttft.push(r.ttftMs);
  }
  sample.wallMs = performance.now() - t0;
  sample.serverCpuMs = cpu() - c0;
  sample.decoderCpuMs = decoderCpu() - d0;
  sample.mainThreadCpuMs = mainThreadCpuMs(decoderPid) - m0;
  sample.switches = switches(decoderPid) - s0;
  for (const pid of profiling) process.kill(pid, "SIGUSR2");
  if (stopCounting) sample.instructions = await stopCounting();
  return sample;
}

async function main(): Promise<void> {
  const load = [loadavg()[0]!];
  const started: { server?: LlamaServer; stack?: PlacedStack } = {};
  const clients: Record<string, SseLoadClient> = {};
  const runs: Record<string, () => Promise<Sample>> = {};
  const chat = (client: SseLoadClient, model: string) => async () => {
    const r = await client.streamChat({ model, messages: [{ role: "user", content: prompt }], max_tokens: maxTokens, temperature: 0.8 }, false);
    if (!r.ok) throw new Error(r.error ?? "request failed");
    return { ttftMs: r.ttftMs, tokens: r.completionTokens };
  };
  try {
    if (modes.includes("server")) {
      const built = ensureLlamaServer(readConfig(commonConfig).home);
      if ("skip" in built) throw new Error(built.skip);
      started.server = await startLlamaServer(built.path, spec.source, { slots, contextPerSlot: spec.contextLength / 1, threads: 1, cpus: layout.runner, chatTemplate: "chatml" });
      const pid = started.server.process.pid!;
      // taskset execs the server: the child's pid is the server's.
      clients.server = new SseLoadClient("127.0.0.1", started.server.port, TEST_KEY);
      runs["llama-server -t 1"] = () => measure(pid, [pid], chat(clients.server!, "stories"));
    }
    if (modes.includes("bare")) {
      const bare = new BareLoop();
      await bare.load();
      runs["bare node-llama-cpp loop"] = async () => {
        placeSelf(layout.runner);
        try {
          return await measure(process.pid, [process.pid], () => bare.one());
        } finally {
          placeSelf(layout.services);
        }
      };
    }
    if (modes.includes("addon")) {
      const addon = new AddonLoop();
      await addon.load();
      runs["node-llama-cpp's addon called directly"] = async () => {
        placeSelf(layout.runner);
        try {
          return await measure(process.pid, [process.pid], () => addon.one());
        } finally {
          placeSelf(layout.services);
        }
      };
    }
    if (modes.includes("engine")) {
      const engine = new InProcessEngine(spec);
      await engine.load();
      runs["LlamaEngine + Scheduler in process"] = async () => {
        placeSelf(layout.runner);
        try {
          return await measure(process.pid, [process.pid], async () => {
            const r = await engine.chat(prompt, maxTokens);
            return { ttftMs: r.ttftMs, tokens: r.completionTokens };
          });
        } finally {
          placeSelf(layout.services);
        }
      };
    }
    if (modes.includes("stack")) {
      // The runner's libuv pool as this process was given it (UV_THREADPOOL_SIZE=4: samples after the decode), else as `tributary start` gives it.
      const pool = process.env.UV_THREADPOOL_SIZE;
      started.stack = await startPlacedStack({ ...env, ...cpuProfileEnv(values.profile) }, layout, pool === undefined ? {} : { UV_THREADPOOL_SIZE: pool });
      const s = started.stack;
      clients.stack = new SseLoadClient("127.0.0.1", s.gateway.port, TEST_KEY);
      const pids = [s.runner, s.gateway, s.actors, s.nats].map((p) => p.child.pid!);
      const profile = values.profile ? [s.runner.child.pid!, s.gateway.child.pid!] : [];
      runs["stack (gateway, NATS, runner)"] = () => measure(s.runner.child.pid!, pids, chat(clients.stack!, TEST_MODEL), profile);
    }
    placeSelf(layout.services);

    const samples = new Map<string, Sample[]>();
    const labels = Object.keys(runs);
    for (let round = 0; round < rounds; round++) {
      const order = round % 2 === 0 ? labels : [...labels].reverse();
      for (const label of order) {
        process.stderr.write(`round ${round + 1}/${rounds}: ${label}\n`);
        const s = await runs[label]!();
        samples.set(label, [...(samples.get(label) ?? []), s]);
      }
    }
    load.push(loadavg()[0]!);

    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
    const rows = labels.map((label) => {
      const ss = samples.get(label)!;
      const tokS = ss.map((s) => (s.tokens * 1000) / s.wallMs);
      const ttft = ss.flatMap((s) => s.ttft);
      return [
        label,
        fmt(median(tokS), 0),
        tokS.map((x) => fmt(x, 0)).join(", "),
        fmt(median(ss.map((s) => (s.wallMs * 1000) / s.tokens)), 0),
        fmt(median(ss.map((s) => (s.decoderCpuMs * 1000) / s.tokens)), 0),
        fmt(median(ss.map((s) => (s.mainThreadCpuMs * 1000) / s.tokens)), 0),
        fmt(median(ss.map((s) => ((s.decoderCpuMs - s.mainThreadCpuMs) * 1000) / s.tokens)), 0),
        fmt(median(ss.map((s) => (s.serverCpuMs * 1000) / s.tokens)), 0),
        fmt(median(ss.map((s) => s.switches / s.tokens)), 1),
        `${fmt(percentile(ttft, 50), 2)} / ${fmt(percentile(ttft, 99), 2)}`,
      ];
    });
    const table = markdownTable(
      ["path", "tok/s (median)", "tok/s per round", "wall µs/token", "decoding process CPU µs/token", "of it main thread", "of it other threads", "all server processes CPU µs/token", "context switches/token (decoding process)", "TTFT p50 / p99 ms"],
      rows,
    );
    const perThread = (pick: (i: Instructions) => number) => (ss: Sample[]) => fmt(median(ss.map((s) => pick(s.instructions!) / s.tokens / 1000)), 1);
    const instructionTable = values.perf
      ? markdownTable(
          ["path", "main thread K instr/token (user + kernel)", "of it user", "other threads (decode + sample, GC; HTTP)", "decoding process", "other server processes"],
          labels.map((label) => {
            const ss = samples.get(label)!;
            return [
              label,
              perThread((i) => i.main)(ss),
              perThread((i) => i.mainUser)(ss),
              perThread((i) => i.other)(ss),
              perThread((i) => i.main + i.other)(ss),
              perThread((i) => i.rest)(ss),
            ];
          }),
        )
      : "";
    const file = writeResults(values.out!, "Per token at concurrency 1: llama-server, bare node-llama-cpp, engine, stack", [
      `${machineLine()} Load average (1 min) at start and end: ${load.map((l) => l.toFixed(1)).join(", ")}.`,
      `Model ${spec.id} (${modelName === "tiny" ? "stories260K" : `random llama ${modelName}, bench/gguf`}; chat rendered as ChatML by both servers), ${slots} slots, max_tokens ${maxTokens}, temperature 0.8, one request at a time; per round ${requests} requests per path (after 3 warm-up requests), ${rounds} rounds in alternating order. Placement: ${layout.description}; the in-process paths move this process onto the runner's CPU while they run. CPU µs/token: user+system time of the processes over the round, per completion token (the in-process paths: this whole process, the load loop included).`,
      table,
      ...(values.perf ? ["Instructions retired per token (`perf stat --per-thread`; median of the rounds). Counting per thread makes every context switch costlier on a VM, so take CPU times from a run without --perf:", instructionTable] : []),
      `Command: \`npm run build && node dist/bench/per-token.js --requests ${requests} --rounds ${rounds} --max-tokens ${maxTokens} --slots ${slots}${modelName === "tiny" ? "" : ` --model ${modelName}`} --modes ${modes.join(",")}${values.out === "per-token.md" ? "" : ` --out ${values.out}`}${values.perf ? " --perf" : ""}\``,
    ]);
    process.stderr.write(`${table}\n${instructionTable}\nwrote ${file}\n`);
  } finally {
    for (const c of Object.values(clients)) c.close();
    await started.server?.stop();
    await started.stack?.close();
  }
}

// Exit when done (clients' keep-alive sockets and the stack's handles would hold the loop), with
// 1 and the error when the run failed: a failure inside main must not pass for a finished run.
main().then(
  () => process.exit(0),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
