// The stack against llama.cpp's own llama-server on the same model, slots and context, built from
// the llama.cpp source node-llama-cpp bundles (bench/lib/llama-server.ts), driven by the same
// closed-loop streaming client at each concurrency. llama-server runs with -t 1 and -t 2; the
// stack is `tributary start` itself with the layout it picks for the model on this machine
// (modules/runner-layout: runners, threads, CPU placement), and each --variants entry beside it
// (e.g. "replicas2": two one-thread runners). Per level the configurations alternate in order over
// the rounds. Besides tokens/s it counts the CPU time of every server process per token (the load
// client's excluded), the steadier figure on a busy machine.
//   node dist/bench/vs-llama-server.js [--models tiny,100m,500m] [--levels 1,8,32,64] [--seconds 5] [--rounds 2] [--variants replicas2,100m:threads1]
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { loadavg } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { commonConfig, readConfig } from "../lib/config.js";
import { loadCatalog } from "../modules/catalog/mod.js";
import { ensureRandomLlama, SHAPES, type ShapeName } from "./gguf/random-llama.js";
import { benchLayout, placeSelf } from "./lib/cpu-layout.js";
import { ensureLlamaServer, startLlamaServer } from "./lib/llama-server.js";
import { cpuMs, startTributary, TEST_KEY, TEST_MODEL, testCatalog } from "./lib/processes.js";
import { SseLoadClient } from "./lib/sse-client.js";
import { fmt, percentile } from "./lib/stats.js";
import { machineLine, markdownTable, resultsDir, writeResults } from "./lib/table.js";

const { values } = parseArgs({
  options: {
    models: { type: "string", default: "tiny,100m,500m" },
    levels: { type: "string", default: "1,8,32,64" },
    seconds: { type: "string", default: "5" },
    warmup: { type: "string", default: "2" },
    rounds: { type: "string", default: "2" },
    "max-tokens": { type: "string", default: "128" },
    variants: { type: "string", default: "" },
    /** llama-server's thread counts; empty: the stack's layouts only (ratios then to the default layout). */
    /** Results go to bench/results/vs-llama-server-<out>.md (default: vs-llama-server.md). */
    out: { type: "string", default: "" },
    "llama-threads": { type: "string", default: "1,2" },
    "context-per-slot": { type: "string", default: "512" },
  },
});
const levels = values.levels!.split(",").map(Number);
const seconds = Number(values.seconds);
const warmup = Number(values.warmup);
const rounds = Number(values.rounds);
const maxTokens = Number(values["max-tokens"]);
/** Stack layouts besides the default, as overrides of the catalog fields the rule would pick. */
const VARIANTS: Record<string, { label: string; env: Record<string, string> }> = {
  replicas2: { label: "stack, 2 runners of 1 thread", env: { TRIBUTARY_REPLICAS: "2", TRIBUTARY_THREADS: "1" } },
  threads1: { label: "stack, 1 runner of 1 thread", env: { TRIBUTARY_REPLICAS: "1", TRIBUTARY_THREADS: "1" } },
  replicas2own: { label: "stack, 2 runners of 1 thread, each pinned to its own CPU, services floating", env: { TRIBUTARY_REPLICAS: "2", TRIBUTARY_THREADS: "1", TRIBUTARY_RUNNER_CPUS: "own" } },
  threads2: { label: "stack, 1 runner of 2 threads", env: { TRIBUTARY_REPLICAS: "1", TRIBUTARY_THREADS: "2" } },
};
/** --variants entries: "<variant>" for every model, "<model>:<variant>" for one. */
const variantSpecs = values.variants!.split(",").filter(Boolean).map((entry) => {
  const [model, v] = entry.includes(":") ? entry.split(":") as [string, string] : [undefined, entry];
  if (!VARIANTS[v]) throw new Error(`--variants: unknown "${v}" (known: ${Object.keys(VARIANTS).join(", ")})`);
  return { model, variant: VARIANTS[v]! };
});
const variantsOf = (model: string) => variantSpecs.filter((s) => s.model === undefined || s.model === model).map((s) => s.variant);
const contextPerSlot = Number(values["context-per-slot"]);
const slots = Math.max(...levels);
const prompt = "Once upon a time, in a small village by the river,";
const unlimited = { requests_per_minute: 10_000_000, tokens_per_minute: 1_000_000_000 };

interface Level { tokens: number; requests: number; errors: number; ttft: number[]; seconds: number; cpuMsPerToken: number }

/** Every process under `pid` (itself included), from /proc/<pid>/task/<tid>/children. */
function processTree(pid: number): number[] {
  const out = [pid];
  try {
    for (const tid of readdirSync(`/proc/${pid}/task`)) {
      const file = `/proc/${pid}/task/${tid}/children`;
      if (!existsSync(file)) continue;
      for (const child of readFileSync(file, "utf8").split(" ").filter(Boolean)) out.push(...processTree(Number(child)));
    }
  } catch {
    // gone
  }
  return out;
}
const treeCpuMs = (pids: readonly number[]) => pids.reduce((sum, p) => sum + (cpuMs(p) || 0), 0);

/**
 * `concurrency` clients, each sending its next request as soon as the last ended, for warm-up plus
 * `seconds`. Tokens count when they arrive inside the measured window (a request spanning its
 * edges counts its share), so long requests at high concurrency are measured too; requests still
 * running at the end are cut off (the client's sockets are closed).
 */
async function closedLoop(client: SseLoadClient, model: string, concurrency: number, serverPid: number): Promise<Level> {
  const result: Level = { tokens: 0, requests: 0, errors: 0, ttft: [], seconds, cpuMsPerToken: NaN };
  const pids = processTree(serverPid);
  let cpuTokens = 0;
  const measureFrom = performance.now() + warmup * 1000;
  const end = measureFrom + seconds * 1000;
  let cpuBefore = NaN;
  const startCpu = setTimeout(() => (cpuBefore = treeCpuMs(pids)), warmup * 1000);
  let cpuAfter = NaN;
  const cut = setTimeout(() => {
    cpuAfter = treeCpuMs(pids);
    client.close();
  }, end - performance.now());
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (performance.now() < end) {
      const began = performance.now();
      let inWindow = 0;
      const r = await client.streamChat({ model, messages: [{ role: "user", content: prompt }], max_tokens: maxTokens, temperature: 0.8 }, false, (at) => {
        if (at >= measureFrom && at <= end) inWindow++;
      });
      // A delta may carry several tokens (the stack coalesces for slow readers): the usage says how many.
      const perDelta = r.ok && r.completionTokens > 0 && r.deltas > 0 ? r.completionTokens / r.deltas : 1;
      result.tokens += inWindow * perDelta;
      cpuTokens += inWindow * perDelta;
      const cutOff = performance.now() >= end;
      if (!r.ok && !cutOff) result.errors++;
      if (began >= measureFrom && Number.isFinite(r.ttftMs)) result.ttft.push(r.ttftMs);
      if (r.ok && began >= measureFrom) result.requests++;
    }
  }));
  clearTimeout(startCpu);
  clearTimeout(cut);
  result.cpuMsPerToken = (cpuAfter - cpuBefore) / cpuTokens;
  return result;
}

function svgPlot(series: Array<{ model: string; ratios: number[] }>): string {
  const w = 560, h = 320, left = 50, bottom = 40, top = 20, right = 130;
  const max = Math.max(1.5, ...series.flatMap((s) => s.ratios.filter(Number.isFinite))) * 1.1;
  const x = (i: number) => left + (i * (w - left - right)) / Math.max(1, levels.length - 1);
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
  levels.forEach((c, i) => parts.push(`<text x="${x(i)}" y="${h - bottom + 15}" text-anchor="middle">${c}</text>`));
  for (let v = 0; v <= max; v += 0.5) parts.push(`<text x="${left - 5}" y="${y(v) + 4}" text-anchor="end">${v.toFixed(1)}</text>`);
  series.forEach((s, k) => {
    const color = colors[k % colors.length];
    const points = s.ratios.map((r, i) => `${x(i)},${y(Number.isFinite(r) ? r : 0)}`).join(" ");
    parts.push(`<polyline points="${points}" fill="none" stroke="${color}" stroke-width="2"/>`);
    s.ratios.forEach((r, i) => parts.push(`<circle cx="${x(i)}" cy="${y(Number.isFinite(r) ? r : 0)}" r="3" fill="${color}"/>`));
    parts.push(`<text x="${w - right + 10}" y="${top + 15 + 16 * k}" fill="${color}">${s.model}</text>`);
  });
  parts.push("</svg>");
  return parts.join("\n");
}

async function main(): Promise<void> {
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
  const series: Array<{ model: string; ratios: number[] }> = [];
  for (const name of values.models!.split(",")) {
    const path = name === "tiny" ? tokenizer : ensureRandomLlama(home, SHAPES[name as ShapeName], tokenizer);
    const id = `bench/${name}`;
    const catalog = join(home, "bench-catalogs", `${name}.yaml`);
    mkdirSync(join(home, "bench-catalogs"), { recursive: true });
    // No replicas or threads: `tributary start` picks them.
    writeFileSync(catalog, [
      "models:",
      `  - id: ${id}`,
      "    engine: llama",
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
    const ratios: number[] = [];
    // Per round each configuration starts once and runs every level in turn (fresh clients per
    // level, a short pause for cut-off requests to be cancelled); the order alternates by round.
    const results = new Map(levels.map((l) => [l, new Map(configs.map((c) => [c.label, [] as Level[]]))]));
    const runLevels = async (port: number, key: string, pid: number, label: string) => {
      for (const concurrency of levels) {
        process.stderr.write(`  c=${concurrency}\n`);
        const client = new SseLoadClient("127.0.0.1", port, key);
        try { results.get(concurrency)!.get(label)!.push(await closedLoop(client, id, concurrency, pid)); } finally { client.close(); }
        await new Promise((r) => setTimeout(r, 500));
      }
    };
    for (let round = 0; round < rounds; round++) {
      for (const c of round % 2 === 0 ? configs : [...configs].reverse()) {
        process.stderr.write(`${name} round ${round + 1}/${rounds}: ${c.label}\n`);
        if (c.threads > 0) {
          placeSelf(oneThread.services);
          // -t 1 on the CPU `tributary start` gives a one-thread runner; more threads on every CPU.
          const s = await startLlamaServer(server.path, path, { slots, contextPerSlot, threads: c.threads, cpus: c.threads === 1 ? oneThread.runner : undefined });
          try { await runLevels(s.port, "none", s.process.pid!, c.label); } finally { await s.stop(); }
        } else {
          // The supervisor must see every CPU to lay out the stack as a user's `npm start` would.
          placeSelf(undefined);
          const stack = await startTributary({ TRIBUTARY_CATALOG: catalog, ...c.env }, id);
          const picked = stack.layout.models?.[id];
          seenLayouts.set(c.label, `${picked ? `${picked.runners} runner(s) of ${picked.threads} thread(s) (${picked.class}, library ${stack.layout.library})` : "?"}; ${stack.placement}`);
          placeSelf(stack.services);
          try { await runLevels(stack.port, TEST_KEY, stack.pid, c.label); } finally { await stack.close(); }
        }
      }
    }
    for (const concurrency of levels) {
      const byLabel = results.get(concurrency)!;
      placeSelf(undefined);
      const rate = (xs: Level[]) => xs.reduce((a, b) => a + b.tokens, 0) / xs.reduce((a, b) => a + b.seconds, 0);
      const rateOf = (label: string) => rate(byLabel.get(label)!);
      const best = Math.max(...baselines.map(rateOf));
      ratios.push(rateOf("stack default") / best);
      // Per round: the default stack over the better llama-server of the same round.
      const perRound = Array.from({ length: rounds }, (_, r) => {
        const at = (label: string) => byLabel.get(label)![r]!;
        const t = at("stack default").tokens / Math.max(...baselines.map((b) => at(b).tokens));
        return fmt(t, 2);
      }).join(", ");
      const ttft = (label: string) => { const all = byLabel.get(label)!.flatMap((r) => r.ttft); return `${fmt(percentile(all, 50), 1)} / ${fmt(percentile(all, 99), 1)}`; };
      const cpu = (label: string) => { const xs = byLabel.get(label)!.map((r) => r.cpuMsPerToken).filter(Number.isFinite).sort((a, b) => a - b); return xs.length ? fmt(xs[Math.floor(xs.length / 2)]!, 2) : "-"; };
      const errors = configs.map((c) => byLabel.get(c.label)!.reduce((a, b) => a + b.errors, 0)).join(" / ");
      for (const c of configs)
        rows.push([name, concurrency, c.label, fmt(rateOf(c.label), 0), fmt(rateOf(c.label) / best, 2), c.label === "stack default" ? perRound : "", ttft(c.label), cpu(c.label)]);
      rows.push([name, concurrency, "errors (in the order above)", "", "", "", errors, ""]);
    }
    for (const [label, text] of seenLayouts) layouts.push(`- ${name}, ${label}: ${text}`);
    series.push({ model: name, ratios });
  }
  const loadEnd = loadavg()[0]!;
  mkdirSync(resultsDir, { recursive: true });
  writeFileSync(join(resultsDir, `${title}.svg`), svgPlot(series));
  writeResults(`${title}.md`, "The stack against llama-server", [
    `${machineLine()} Load average (1 min) at start and end: ${loadStart.toFixed(1)}, ${loadEnd.toFixed(1)}.`,
    `Same GGUF, ${slots} slots of ${contextPerSlot} tokens, max_tokens ${maxTokens}, temperature 0.8, streamed chat completions from closed-loop clients; per level ${rounds} rounds of ${seconds} s (after ${warmup} s of warm-up) per configuration; each round starts every configuration afresh and runs the levels in turn, the configurations in alternating order by round. ` +
      `llama-server -t 1 on ${oneThread.runner ? `CPU ${oneThread.runner.join(",")}` : "every CPU"}, more threads unpinned. "stack default" is \`tributary start\` with the catalog's replicas and threads unset: the layout it picked is listed below. ` +
      `"x best" is tokens/s over the best of ${llamaThreads.length > 0 ? llamaThreads.map((t) => `llama-server -t ${t}`).join(", ") : "stack default"} at that level; "CPU ms/token" counts every server process (for the stack: supervisor, nats-server, actor host, runners, gateway), median over rounds. Models: tiny = stories260K, 100m/500m = random llama Q8_0 (bench/gguf).`,
    "Layouts `tributary start` picked:\n" + layouts.join("\n"),
    markdownTable(["model", "concurrency", "configuration", "tok/s", "x best llama-server", "per-round x best", "TTFT p50 / p99 ms", "CPU ms/token"], rows),
    `![stack default tok/s over the best baseline](${title}.svg)`,
    `Command: \`npm run build && node dist/bench/vs-llama-server.js --models ${values.models} --levels ${values.levels} --seconds ${seconds} --warmup ${warmup} --rounds ${rounds} --max-tokens ${maxTokens} --llama-threads "${values["llama-threads"]}"${values.variants ? ` --variants ${values.variants}` : ""}${values.out ? ` --out ${values.out}` : ""}\``,
  ]);
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
