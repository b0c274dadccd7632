// The stack against llama.cpp's own llama-server on the same model, slots and context, built from
// the llama.cpp source node-llama-cpp bundles (bench/lib/llama-server.ts), driven by the same
// closed-loop streaming client at each concurrency. llama-server runs with -t 1 and -t 2; the
// stack is `tributary start` itself with the layout it picks for the model on this machine
// (modules/runner-layout: runners, threads, CPU placement), and each --variants entry beside it
// (e.g. "replicas2": two one-thread runners). Per level the configurations alternate in order over
// the rounds. Besides tokens/s it counts the CPU time of every server process per token (the load
// client's excluded), the steadier figure on a busy machine.
// Tokens count by the arrival of their deltas inside the measured window (bench/lib/closed-loop.ts),
// so a request that outlasts the window (a 128-token answer from the ~500M model takes longer
// than a round) counts the tokens it streamed inside it.
//   node dist/bench/vs-llama-server.js [--models tiny,100m,500m] [--levels "1,8,32,64;500m=1,8"] [--seconds "5;500m=20"]
//     [--max-tokens "128;500m=32"] [--rounds 2] [--variants replicas2,500m:threads1] [--out big]
// --levels, --seconds, --warmup and --max-tokens take a default and per-model overrides, ";"-separated.
import { mkdirSync, writeFileSync } from "node:fs";
import { loadavg } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { commonConfig, readConfig } from "../lib/config.js";
import { loadCatalog } from "../modules/catalog/mod.js";
import { ensureRandomLlama, SHAPES, type ShapeName } from "./gguf/random-llama.js";
import { benchLayout, cpusOf, everyCpu, placeSelf } from "./lib/cpu-layout.js";
import { ensureLlamaServer, startLlamaServer } from "./lib/llama-server.js";
import { closedLoop, sequentialTtfts, type LevelResult } from "./lib/closed-loop.js";
import { startTributary, TEST_KEY, TEST_MODEL, testCatalog } from "./lib/processes.js";
import { SseLoadClient } from "./lib/sse-client.js";
import { fmt, median, percentile } from "./lib/stats.js";
import { machineLine, markdownTable, resultsDir, writeResults } from "./lib/table.js";

const { values } = parseArgs({
  options: {
    models: { type: "string", default: "tiny,100m,500m" },
    levels: { type: "string", default: "1,8,32,64" },
    seconds: { type: "string", default: "5;100m=10;500m=20" },
    warmup: { type: "string", default: "2;100m=3;500m=5" },
    rounds: { type: "string", default: "2" },
    "max-tokens": { type: "string", default: "128;100m=64;500m=32" },
    variants: { type: "string", default: "" },
    /** Results go to bench/results/vs-llama-server-<out>.md (default: vs-llama-server.md). */
    out: { type: "string", default: "" },
    /** llama-server's thread counts; empty: the stack's layouts only (ratios then to the default layout). */
    "llama-threads": { type: "string", default: "1,2" },
    "context-per-slot": { type: "string", default: "512" },
    /** Sequential short requests per configuration and round after the levels, for a TTFT p50 at one stream that rests on enough samples. */
    "ttft-requests": { type: "string", default: "40" },
  },
});

/** "<default>;<model>=<value>;..." -> the value for `model`. */
function perModel(option: string, model: string): string {
  const entries = option.split(";").map((e) => e.trim()).filter(Boolean);
  const override = entries.find((e) => e.startsWith(`${model}=`));
  const fallback = entries.find((e) => !e.includes("="));
  const value = override ? override.slice(model.length + 1) : fallback;
  if (value === undefined) throw new Error(`no value for ${model} in "${option}"`);
  return value;
}
const levelsOf = (model: string) => perModel(values.levels!, model).split(",").map(Number);
const numberOf = (option: string, model: string) => {
  const n = Number(perModel(option, model));
  if (!Number.isFinite(n) || n <= 0) throw new Error(`"${option}": not a positive number for ${model}`);
  return n;
};
const rounds = Number(values.rounds);
/** Milliseconds as the tables show them: a tenth below 10 ms, where one stream's TTFTs are compared. */
const ms = (value: number) => fmt(value, value < 10 ? 1 : 0);
/** Stack layouts besides the default, as overrides of the catalog fields the rule would pick. */
const VARIANTS: Record<string, { label: string; env: Record<string, string> }> = {
  replicas2: { label: "stack, 2 runners of 1 thread", env: { TRIBUTARY_REPLICAS: "2", TRIBUTARY_THREADS: "1" } },
  threads1: { label: "stack, 1 runner of 1 thread", env: { TRIBUTARY_REPLICAS: "1", TRIBUTARY_THREADS: "1" } },
  nolinger: { label: "stack, no decode linger", env: { TRIBUTARY_DECODE_LINGER_MAX_MS: "0" } },
  /** What runners of threads > 1 had before 2026-11-29 (and threads 1 before 2026-11-28). */
  pool4: { label: "stack, libuv's default pool (an OpenMP team per pool thread; samples after the decode)", env: { UV_THREADPOOL_SIZE: "4" } },
  spin300k: { label: "stack, libgomp's default spin (GOMP_SPINCOUNT=300000)", env: { GOMP_SPINCOUNT: "300000" } },
  replicas2own: { label: "stack, 2 runners of 1 thread, each pinned to its own CPU, services floating", env: { TRIBUTARY_REPLICAS: "2", TRIBUTARY_THREADS: "1", TRIBUTARY_RUNNER_CPUS: "own" } },
  threads2: { label: "stack, 1 runner of 2 threads", env: { TRIBUTARY_REPLICAS: "1", TRIBUTARY_THREADS: "2" } },
  threads2tuned: { label: "stack, 1 runner of 2 threads, tuned while serving", env: { TRIBUTARY_REPLICAS: "1", TRIBUTARY_THREADS: "2", TRIBUTARY_DECODE_THREADS_TUNE: "on" } },
  fixedthreads: { label: "stack, decode threads fixed (not tuned while serving)", env: { TRIBUTARY_DECODE_THREADS_TUNE: "off" } },
  noflash: { label: "stack, no flash attention", env: { TRIBUTARY_FLASH_ATTENTION: "off" } },
  float: { label: "stack, nothing pinned", env: { TRIBUTARY_RUNNER_CPUS: "off" } },
  /** The default before 2026-11-29 (fixed since). */
  tunedthreads: { label: "stack, decode threads tuned while serving", env: { TRIBUTARY_DECODE_THREADS_TUNE: "on" } },
  fixedspin300k: { label: "stack, decode threads fixed and libgomp's default spin", env: { TRIBUTARY_DECODE_THREADS_TUNE: "off", GOMP_SPINCOUNT: "300000" } },
};
/** --variants entries: "<variant>" for every model, "<model>:<variant>" for one. */
const variantSpecs = values.variants!.split(",").filter(Boolean).map((entry) => {
  const [model, v] = entry.includes(":") ? entry.split(":") as [string, string] : [undefined, entry];
  if (!VARIANTS[v]) throw new Error(`--variants: unknown "${v}" (known: ${Object.keys(VARIANTS).join(", ")})`);
  return { model, variant: VARIANTS[v]! };
});
const variantsOf = (model: string) => variantSpecs.filter((s) => s.model === undefined || s.model === model).map((s) => s.variant);
const contextPerSlot = Number(values["context-per-slot"]);
const prompt = "Once upon a time, in a small village by the river,";
const ttftRequests = Number(values["ttft-requests"]);
/**
 * Both servers render the chat as ChatML: the bench models carry no template of their own, and
 * each server's fallback differs (llama-server's is ChatML, node-llama-cpp's its "General"), which
 * gave prompts of 66 and 49 tokens. The prompt-tokens column shows what each server counted.
 */
const CHAT_TEMPLATE = { stack: "chatML", llamaServer: "chatml" };
const unlimited = { requests_per_minute: 10_000_000, tokens_per_minute: 1_000_000_000 };

interface Measured extends LevelResult {
  /** 1-min load average when the level started. */
  load: number;
}

function svgPlot(series: Array<{ model: string; points: Array<{ level: number; ratio: number }> }>): string {
  const allLevels = [...new Set(series.flatMap((s) => s.points.map((p) => p.level)))].sort((a, b) => a - b);
  const w = 560, h = 320, left = 50, bottom = 40, top = 20, right = 130;
  const max = Math.max(1.5, ...series.flatMap((s) => s.points.map((p) => p.ratio).filter(Number.isFinite))) * 1.1;
  const x = (level: number) => left + (allLevels.indexOf(level) * (w - left - right)) / Math.max(1, allLevels.length - 1);
  const y = (v: number) => h - bottom - (v / max) * (h - top - bottom);
  const colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"];
  const parts = [`<svg xmlns="http://www.w3.org/2000/svg" width="${w}" height="${h}" font-family="sans-serif" font-size="12">`,
    `<rect width="${w}" height="${h}" fill="white"/>`,
    `<line x1="${left}" y1="${y(1)}" x2="${w - right}" y2="${y(1)}" stroke="#999" stroke-dasharray="4 3"/>`,
    `<text x="${w - right + 4}" y="${y(1) + 4}" fill="#666">1.0x</text>`,
    `<line x1="${left}" y1="${h - bottom}" x2="${w - right}" y2="${h - bottom}" stroke="black"/>`,
    `<line x1="${left}" y1="${top}" x2="${left}" y2="${h - bottom}" stroke="black"/>`,
    `<text x="${(left + w - right) / 2}" y="${h - 5}" text-anchor="middle">concurrent streams</text>`,
    `<text x="12" y="${(top + h - bottom) / 2}" transform="rotate(-90 12 ${(top + h - bottom) / 2})" text-anchor="middle">stack default tok/s ÷ best baseline</text>`];
  for (const c of allLevels) parts.push(`<text x="${x(c)}" y="${h - bottom + 15}" text-anchor="middle">${c}</text>`);
  for (let v = 0; v <= max; v += 0.5) parts.push(`<text x="${left - 5}" y="${y(v) + 4}" text-anchor="end">${v.toFixed(1)}</text>`);
  series.forEach((s, k) => {
    const color = colors[k % colors.length];
    const points = s.points.map((p) => `${x(p.level)},${y(Number.isFinite(p.ratio) ? p.ratio : 0)}`).join(" ");
    parts.push(`<polyline points="${points}" fill="none" stroke="${color}" stroke-width="2"/>`);
    for (const p of s.points) parts.push(`<circle cx="${x(p.level)}" cy="${y(Number.isFinite(p.ratio) ? p.ratio : 0)}" r="3" fill="${color}"/>`);
    parts.push(`<text x="${w - right + 10}" y="${top + 15 + 16 * k}" fill="${color}">${s.model}</text>`);
  });
  parts.push("</svg>");
  return parts.join("\n");
}

/**
 * The lowest TTFT p50 of the llama-server configurations (`p50` of a label). One without a TTFT
 * sample (no request began and streamed inside its window) does not count; NaN when none has
 * one, so that no target is met against it.
 */
function bestTtftP50(labels: readonly string[], p50: (label: string) => number): number {
  const p50s = labels.map(p50).filter(Number.isFinite);
  return p50s.length > 0 ? Math.min(...p50s) : NaN;
}

async function main(): Promise<void> {
  const began = Date.now();
  const { home } = readConfig(commonConfig);
  const llamaThreads = values["llama-threads"]!.split(",").filter(Boolean).map(Number);
  const server = llamaThreads.length > 0 ? ensureLlamaServer(home) : { path: "" };
  if ("skip" in server) {
    process.stderr.write(`vs-llama-server: skipped: ${server.skip}\n`);
    return;
  }
  const loadStart = loadavg()[0]!;
  const tokenizer = loadCatalog(testCatalog).find((m) => m.id === TEST_MODEL)!.source;
  // llama-server -t 1 runs where `tributary start` would pin a one-thread runner; the load client
  // where it would put the services.
  const oneThread = benchLayout(1);
  const rows: Array<Array<string | number>> = [];
  const title = `vs-llama-server${values.out ? `-${values.out}` : ""}`;
  const layouts: string[] = [];
  const settings: string[] = [];
  const targets: string[] = [];
  /** What failed requests said, by configuration and level (the errors column counts them). */
  const failures: string[] = [];
  const series: Array<{ model: string; points: Array<{ level: number; ratio: number }> }> = [];
  const ttftRows: Array<Array<string | number>> = [];
  for (const name of values.models!.split(",")) {
    const levels = levelsOf(name);
    const seconds = numberOf(values.seconds!, name);
    const warmup = numberOf(values.warmup!, name);
    const maxTokens = numberOf(values["max-tokens"]!, name);
    const slots = Math.max(...levels);
    settings.push(`- ${name}: levels ${levels.join(", ")}; ${slots} slots of ${contextPerSlot} tokens; max_tokens ${maxTokens}; windows of ${seconds} s, opened ${warmup} s after every client had its first token`);
    const path = name === "tiny" ? tokenizer : ensureRandomLlama(home, SHAPES[name as ShapeName], tokenizer);
    const id = `bench/${name}`;
    const body = { model: id, messages: [{ role: "user", content: prompt }], max_tokens: maxTokens, temperature: 0.8 };
    // The runner samples from the whole distribution (as OpenAI does: no top-k, top-p 1, no
    // min-p); llama-server's defaults cut it first (top_k 40, top_p 0.95, min_p 0.05): it is
    // asked for the same sampling, so that both do the same work per token.
    const serverBody = { ...body, top_k: 0, top_p: 1, min_p: 0 };
    const catalog = join(home, "bench-catalogs", `${name}.yaml`);
    mkdirSync(join(home, "bench-catalogs"), { recursive: true });
    // No replicas or threads: `tributary start` picks them.
    writeFileSync(catalog, [
      "models:",
      `  - id: ${id}`,
      "    engine: llama",
      `    chat_template: ${CHAT_TEMPLATE.stack}`,
      `    source: ${JSON.stringify(path)}`,
      `    context_length: ${contextPerSlot}`,
      `    max_output_tokens: ${maxTokens}`,
      `    slots: ${slots}`,
      `    queue_limit: ${slots * 4}`,
      "    rate_limits:",
      `      requests_per_minute: ${unlimited.requests_per_minute}`,
      `      tokens_per_minute: ${unlimited.tokens_per_minute}`,
      "",
    ].join("\n"));
    const stackConfigs = [{ label: "stack default", env: {} as Record<string, string> }, ...variantsOf(name)];
    const servers = llamaThreads.map((t) => ({ label: `llama-server -t ${t}`, threads: t, env: {} }));
    const configs = [...servers, ...stackConfigs.map((c) => ({ ...c, threads: 0 }))];
    const baselines = servers.length > 0 ? servers.map((c) => c.label) : ["stack default"];
    const seenLayouts = new Map<string, string>();
    const points: Array<{ level: number; ratio: number }> = [];
    // Per round each configuration starts once and runs every level in turn (fresh clients per
    // level, a short pause for cut-off requests to be cancelled); the order alternates by round.
    const results = new Map(levels.map((l) => [l, new Map(configs.map((c) => [c.label, [] as Measured[]]))]));
    const idleTtfts = new Map(configs.map((c) => [c.label, [] as number[]]));
    const runLevels = async (port: number, key: string, pid: number, label: string, request: Record<string, unknown>) => {
      for (const concurrency of levels) {
        const load = loadavg()[0]!;
        const client = new SseLoadClient("127.0.0.1", port, key);
        try {
          const r = await closedLoop(client, { concurrency, warmupSeconds: warmup, seconds, body: request, serverPids: [pid] });
          process.stderr.write(`  c=${concurrency}: ${fmt(r.tokens / r.seconds, 1)} tok/s, ${fmt(r.cpuMsPerToken, 2)} CPU ms/token, load ${load.toFixed(1)}, every client's first token after ${fmt(r.startSeconds, 1)} s\n`);
          results.get(concurrency)!.get(label)!.push({ ...r, load });
        } finally { client.close(); }
        await new Promise((r) => setTimeout(r, 1000));
      }
      if (ttftRequests > 0) {
        const client = new SseLoadClient("127.0.0.1", port, key);
        try {
          const ttfts = await sequentialTtfts(client, { ...request, max_tokens: 4 }, ttftRequests);
          process.stderr.write(`  ${ttfts.length} sequential requests: TTFT p50 ${ms(percentile(ttfts, 50))} ms\n`);
          idleTtfts.get(label)!.push(...ttfts);
        } finally { client.close(); }
      }
    };
    for (let round = 0; round < rounds; round++) {
      for (const c of round % 2 === 0 ? configs : [...configs].reverse()) {
        process.stderr.write(`${name} round ${round + 1}/${rounds}: ${c.label}\n`);
        if (c.threads > 0) {
          placeSelf(oneThread.services);
          // -t 1 on the CPU `tributary start` gives a one-thread runner; more threads on every CPU,
          // named explicitly: a child inherits this process's CPUs, narrowed just above to the services'.
          const s = await startLlamaServer(server.path, path, { slots, contextPerSlot, threads: c.threads, cpus: c.threads === 1 ? oneThread.runner : everyCpu(), chatTemplate: CHAT_TEMPLATE.llamaServer });
          seenLayouts.set(c.label, `on CPU ${cpusOf(s.process.pid!)}`);
          try { await runLevels(s.port, "none", s.process.pid!, c.label, serverBody); } finally { await s.stop(); }
        } else {
          // The supervisor must see every CPU to lay out the stack as a user's `npm start` would.
          placeSelf(undefined);
          const stack = await startTributary({ TRIBUTARY_CATALOG: catalog, ...c.env }, id);
          const picked = stack.layout.models?.[id];
          seenLayouts.set(c.label, `${picked ? `${picked.runners} runner(s) of ${picked.threads} thread(s) (${picked.class}, library ${stack.layout.library})` : "?"}; ${stack.placement}`);
          placeSelf(stack.services);
          try { await runLevels(stack.port, TEST_KEY, stack.pid, c.label, body); } finally { await stack.close(); }
        }
      }
    }
    placeSelf(undefined);
    for (const concurrency of levels) {
      const byLabel = results.get(concurrency)!;
      const rate = (xs: Measured[]) => xs.reduce((a, b) => a + b.tokens, 0) / xs.reduce((a, b) => a + b.seconds, 0);
      const rateOf = (label: string) => rate(byLabel.get(label)!);
      const best = Math.max(...baselines.map(rateOf));
      const ratio = rateOf("stack default") / best;
      points.push({ level: concurrency, ratio });
      // Per round: the default stack over the better llama-server of the same round.
      const perRound = Array.from({ length: rounds }, (_, r) => {
        const at = (label: string) => byLabel.get(label)![r]!;
        return fmt(at("stack default").tokens / Math.max(...baselines.map((b) => at(b).tokens)), 2);
      }).join(", ");
      const ttfts = (label: string) => byLabel.get(label)!.flatMap((r) => r.ttft);
      const ttft = (label: string) => { const all = ttfts(label); return `${ms(percentile(all, 50))} / ${ms(percentile(all, 99))} (${all.length})`; };
      const cpu = (label: string) => fmt(median(byLabel.get(label)!.map((r) => r.cpuMsPerToken)), 2);
      const cpuByRole = (label: string) => {
        const runs = byLabel.get(label)!;
        const roles = [...new Set(runs.flatMap((r) => Object.keys(r.cpuMsPerTokenByRole)))];
        return roles.map((role) => ({ role, ms: median(runs.map((r) => r.cpuMsPerTokenByRole[role] ?? NaN)) }))
          .sort((a, b) => b.ms - a.ms).map((x) => `${x.role} ${fmt(x.ms, 2)}`).join(", ");
      };
      const loads = (label: string) => byLabel.get(label)!.map((r) => r.load.toFixed(1)).join(", ");
      const starts = (label: string) => byLabel.get(label)!.map((r) => fmt(r.startSeconds, 1)).join(", ");
      const tokensPerDelta = (label: string) => fmt(median(byLabel.get(label)!.map((r) => r.tokensPerDelta)), 3);
      const promptTokens = (label: string) => fmt(median(byLabel.get(label)!.map((r) => r.promptTokens)), 0);
      for (const c of configs) {
        const errors = byLabel.get(c.label)!.reduce((a, b) => a + b.errors, 0);
        const said = [...new Set(byLabel.get(c.label)!.flatMap((r) => r.errorSamples))];
        if (said.length > 0) failures.push(`- ${name}, ${concurrency} streams, ${c.label}: ${said.map((s) => `\`${s.replaceAll("`", "'")}\``).join("; ")}`);
        rows.push([name, concurrency, c.label, fmt(rateOf(c.label), 1), fmt(rateOf(c.label) / best, 2), c.label === "stack default" ? perRound : "", ttft(c.label),
          cpu(c.label), cpuByRole(c.label), tokensPerDelta(c.label), promptTokens(c.label), errors, loads(c.label), starts(c.label)]);
      }
      // The targets, from the figures above.
      const verdict = (ok: boolean) => (ok ? "met" : "NOT met");
      const p50 = (label: string) => percentile(ttfts(label), 50);
      const lines = [`default ${fmt(ratio, 2)}x the better llama-server (>= 1.0: ${verdict(ratio >= 1)})`];
      if (servers.length > 0) {
        const bestTtft = bestTtftP50(servers.map((s) => s.label), p50);
        lines.push(`TTFT p50 ${ms(p50("stack default"))} ms against llama-server's best ${ms(bestTtft)} ms (no higher: ${verdict(p50("stack default") <= bestTtft)})`);
      }
      const one = VARIANTS.threads1!.label;
      if (byLabel.has(one) && byLabel.has("llama-server -t 2")) {
        const overOne = rateOf("stack default") / rateOf(one);
        const overT2 = rateOf("stack default") / rateOf("llama-server -t 2");
        const perRoundOne = Array.from({ length: rounds }, (_, r) => fmt(byLabel.get("stack default")![r]!.tokens / byLabel.get(one)![r]!.tokens, 2)).join(", ");
        lines.push(`default (${seenLayouts.get("stack default") ?? "?"}) over 1 runner of 1 thread ${fmt(overOne, 2)}x (per round ${perRoundOne}; >= 1.6: ${verdict(overOne >= 1.6)}), over llama-server -t 2 ${fmt(overT2, 2)}x (>= 0.95: ${verdict(overT2 >= 0.95)})`);
      }
      targets.push(`- ${name}, ${concurrency} streams: ${lines.join("; ")}`);
    }
    if (ttftRequests > 0) {
      const p50 = (label: string) => percentile(idleTtfts.get(label)!, 50);
      for (const c of configs) {
        const all = idleTtfts.get(c.label)!;
        // A tenth of a ms throughout: these p50s are compared within a millisecond.
        ttftRows.push([name, c.label, `${fmt(p50(c.label), 1)} / ${fmt(percentile(all, 90), 1)} / ${fmt(percentile(all, 99), 1)}`, all.length]);
      }
      if (servers.length > 0) {
        const bestTtft = bestTtftP50(servers.map((s) => s.label), p50);
        const verdict = p50("stack default") <= bestTtft ? "met" : "NOT met";
        targets.push(`- ${name}, one stream, ${ttftRequests} sequential requests per configuration and round: TTFT p50 ${fmt(p50("stack default"), 1)} ms against llama-server's best ${fmt(bestTtft, 1)} ms (no higher: ${verdict})`);
      }
    }
    for (const [label, text] of seenLayouts) layouts.push(`- ${name}, ${label}: ${text}`);
    series.push({ model: name, points });
  }
  const loadEnd = loadavg()[0]!;
  const minutes = (Date.now() - began) / 60_000;
  mkdirSync(resultsDir, { recursive: true });
  writeFileSync(join(resultsDir, `${title}.svg`), svgPlot(series));
  writeResults(`${title}.md`, "The stack against llama-server", [
    `${machineLine()} Load average (1 min) at start and end: ${loadStart.toFixed(1)}, ${loadEnd.toFixed(1)}. The run took ${minutes.toFixed(1)} min.`,
    `Same GGUF, slots and context per slot for both servers, temperature 0.8 from the whole distribution (llama-server sent top_k 0, top_p 1, min_p 0), streamed chat completions from closed-loop clients (one client for all); each round starts every configuration afresh and runs the levels in turn, the configurations in alternating order by round (${rounds} rounds). ` +
      `A token counts when its delta arrives inside the measured window, whichever request it belongs to (a request cut off at the window's end counts what it streamed inside it), times the tokens per delta of the completed requests (their usage over their deltas). ` +
      `llama-server -t 1 on ${oneThread.runner ? `CPU ${oneThread.runner.join(",")}` : "every CPU"}, more threads on every CPU (until this was fixed on 2026-11-29, -t 2 inherited the load client's one CPU: results before then understate it). "stack default" is \`tributary start\` with the catalog's replicas and threads unset: the layout it picked is listed below. ` +
      `"x best" is tokens/s over the best of ${llamaThreads.length > 0 ? llamaThreads.map((t) => `llama-server -t ${t}`).join(", ") : "stack default"} at that level; TTFT of the requests that began inside the window (their count in brackets); "CPU ms/token" counts every server process (for the stack: supervisor, nats-server, actor host, runners, gateway; the load client excluded), median over rounds, and by process; "load" is the 1-min load average as each round's level began; "first tokens after" how long each round took until every client had its first token (the window opened the warm-up after that). Models: tiny = stories260K, 100m/500m = random llama Q8_0 (bench/gguf).`,
    "Per model:\n" + settings.join("\n"),
    "Where each configuration ran (the stack: the layout `tributary start` picked; llama-server: the CPUs it was allowed):\n" + layouts.join("\n"),
    markdownTable(["model", "streams", "configuration", "tok/s", "x best llama-server", "per-round x best", "TTFT p50 / p99 ms (n)", "CPU ms/token", "CPU ms/token by process", "tokens/delta", "prompt tokens", "errors", "load", "first tokens after s"], rows),
    ...(failures.length > 0 ? ["What the failed requests said (the first distinct messages of each configuration and level):\n" + failures.join("\n")] : []),
    ...(ttftRequests > 0 ? [`TTFT at one stream from ${ttftRequests} sequential requests (max_tokens 4, the same prompt) per configuration and round, after its levels:`,
      markdownTable(["model", "configuration", "TTFT p50 / p90 / p99 ms", "requests"], ttftRows)] : []),
    "Targets:\n" + targets.join("\n"),
    `![stack default tok/s over the best baseline](${title}.svg)`,
    `Command: \`npm run build && node dist/bench/vs-llama-server.js --models ${values.models} --levels "${values.levels}" --seconds "${values.seconds}" --warmup "${values.warmup}" --rounds ${rounds} --max-tokens "${values["max-tokens"]}" --llama-threads "${values["llama-threads"]}" --ttft-requests ${ttftRequests}${values.variants ? ` --variants ${values.variants}` : ""}${values.out ? ` --out ${values.out}` : ""}\``,
  ]);
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
