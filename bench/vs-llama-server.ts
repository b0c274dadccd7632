// The stack against llama.cpp's own llama-server on the same model, slots and context, built from
// the llama.cpp source node-llama-cpp bundles (bench/lib/llama-server.ts), driven by the same
// closed-loop streaming client at each concurrency. llama-server runs with -t 1 and -t 2; the
// stack with one runner of the catalog's `threads` (--stack-threads), placed as `tributary start`
// places it. Per level the configurations alternate in order over the rounds.
//   node dist/bench/vs-llama-server.js [--models tiny,100m,500m] [--levels 1,8,32,64] [--seconds 5] [--rounds 2]
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { commonConfig, readConfig } from "../lib/config.js";
import { loadCatalog } from "../modules/catalog/mod.js";
import { ensureRandomLlama, SHAPES, type ShapeName } from "./gguf/random-llama.js";
import { benchLayout, placeSelf } from "./lib/cpu-layout.js";
import { ensureLlamaServer, startLlamaServer } from "./lib/llama-server.js";
import { startPlacedStack, TEST_KEY, TEST_MODEL, testCatalog } from "./lib/processes.js";
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
    "stack-threads": { type: "string", default: "1" },
    "context-per-slot": { type: "string", default: "512" },
  },
});
const levels = values.levels!.split(",").map(Number);
const seconds = Number(values.seconds);
const warmup = Number(values.warmup);
const rounds = Number(values.rounds);
const maxTokens = Number(values["max-tokens"]);
const stackThreads = Number(values["stack-threads"]);
const contextPerSlot = Number(values["context-per-slot"]);
const slots = Math.max(...levels);
const prompt = "Once upon a time, in a small village by the river,";
const unlimited = { requests_per_minute: 10_000_000, tokens_per_minute: 1_000_000_000 };

interface Level { tokens: number; requests: number; errors: number; ttft: number[]; seconds: number }

async function closedLoop(client: SseLoadClient, model: string, concurrency: number): Promise<Level> {
  const result: Level = { tokens: 0, requests: 0, errors: 0, ttft: [], seconds };
  const measureFrom = performance.now() + warmup * 1000;
  const end = measureFrom + seconds * 1000;
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (performance.now() < end) {
      const began = performance.now();
      const r = await client.streamChat({ model, messages: [{ role: "user", content: prompt }], max_tokens: maxTokens, temperature: 0.8 }, false);
      if (began < measureFrom) continue;
      if (!r.ok) { result.errors++; continue; }
      const finished = performance.now();
      const share = finished <= end ? 1 : Math.max(0, (end - began) / (finished - began));
      // Content deltas when the server sends no usage: one token each.
      result.tokens += (r.completionTokens || r.deltas) * share;
      result.requests++;
      result.ttft.push(r.ttftMs);
    }
  }));
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
    `<text x="12" y="${(top + h - bottom) / 2}" transform="rotate(-90 12 ${(top + h - bottom) / 2})" text-anchor="middle">stack tok/s ÷ best llama-server</text>`];
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
  const server = ensureLlamaServer(home);
  if ("skip" in server) {
    process.stderr.write(`vs-llama-server: skipped: ${server.skip}\n`);
    return;
  }
  const tokenizer = loadCatalog(testCatalog).find((m) => m.id === TEST_MODEL)!.source;
  const layout = benchLayout(stackThreads);
  const rows: Array<Array<string | number>> = [];
  const series: Array<{ model: string; ratios: number[] }> = [];
  for (const name of values.models!.split(",")) {
    const path = name === "tiny" ? tokenizer : ensureRandomLlama(home, SHAPES[name as ShapeName], tokenizer);
    const id = `bench/${name}`;
    const catalog = join(home, "bench-catalogs", `${name}.yaml`);
    mkdirSync(join(home, "bench-catalogs"), { recursive: true });
    writeFileSync(catalog, [
      "models:",
      `  - id: ${id}`,
      "    engine: llama",
      `    source: ${JSON.stringify(path)}`,
      `    context_length: ${contextPerSlot}`,
      `    max_output_tokens: ${maxTokens}`,
      `    slots: ${slots}`,
      `    queue_limit: ${slots * 4}`,
      `    threads: ${stackThreads}`,
      "    rate_limits:",
      `      requests_per_minute: ${unlimited.requests_per_minute}`,
      `      tokens_per_minute: ${unlimited.tokens_per_minute}`,
      "",
    ].join("\n"));
    const env = { TRIBUTARY_CATALOG: catalog };
    const configs = [
      { label: "llama-server -t 1", threads: 1 },
      { label: "llama-server -t 2", threads: 2 },
      { label: `stack (1 runner, threads ${stackThreads})`, threads: 0 },
    ];
    const ratios: number[] = [];
    for (const concurrency of levels) {
      const results = new Map(configs.map((c) => [c.label, [] as Level[]]));
      for (let round = 0; round < rounds; round++) {
        for (const c of round % 2 === 0 ? configs : [...configs].reverse()) {
          process.stderr.write(`${name} c=${concurrency} round ${round + 1}/${rounds}: ${c.label}\n`);
          placeSelf(layout.services);
          if (c.threads > 0) {
            // llama-server gets the CPUs the stack's runner gets when it has one thread, all of them for two.
            const s = await startLlamaServer(server.path, path, { slots, contextPerSlot, threads: c.threads, cpus: c.threads === 1 ? layout.runner : undefined });
            const client = new SseLoadClient("127.0.0.1", s.port, "none");
            try { results.get(c.label)!.push(await closedLoop(client, id, concurrency)); } finally { client.close(); await s.stop(); }
          } else {
            const stack = await startPlacedStack(env, layout);
            const client = new SseLoadClient("127.0.0.1", stack.gateway.port, TEST_KEY);
            try { results.get(c.label)!.push(await closedLoop(client, id, concurrency)); } finally { client.close(); await stack.close(); }
          }
        }
      }
      placeSelf(undefined);
      const rate = (xs: Level[]) => xs.reduce((a, b) => a + b.tokens, 0) / xs.reduce((a, b) => a + b.seconds, 0);
      const rates = configs.map((c) => rate(results.get(c.label)!));
      const best = Math.max(rates[0]!, rates[1]!);
      ratios.push(rates[2]! / best);
      const ttft = (label: string) => { const all = results.get(label)!.flatMap((r) => r.ttft); return `${fmt(percentile(all, 50), 1)} / ${fmt(percentile(all, 99), 1)}`; };
      const errors = configs.map((c) => results.get(c.label)!.reduce((a, b) => a + b.errors, 0)).join(" / ");
      rows.push([name, concurrency, fmt(rates[0]!, 0), fmt(rates[1]!, 0), fmt(rates[2]!, 0), fmt(rates[2]! / best, 2),
        ttft(configs[0]!.label), ttft(configs[1]!.label), ttft(configs[2]!.label), errors]);
    }
    series.push({ model: name, ratios });
  }
  mkdirSync(resultsDir, { recursive: true });
  writeFileSync(join(resultsDir, "vs-llama-server.svg"), svgPlot(series));
  writeResults("vs-llama-server.md", "The stack against llama-server", [
    machineLine(),
    `Same GGUF, ${slots} slots of ${contextPerSlot} tokens, max_tokens ${maxTokens}, temperature 0.8, streamed chat completions from closed-loop clients; per level ${rounds} rounds of ${seconds} s (after ${warmup} s of warm-up) per configuration, in alternating order; every configuration starts fresh each round. ` +
      `Stack placement: ${layout.description}; llama-server -t 1 on the runner's CPU, -t 2 unpinned. Models: tiny = stories260K, 100m/500m = random llama Q8_0 (bench/gguf).`,
    markdownTable(["model", "concurrency", "llama-server -t 1 tok/s", "llama-server -t 2 tok/s", "stack tok/s", "stack ÷ best llama-server", "TTFT p50/p99 ms -t 1", "TTFT p50/p99 ms -t 2", "TTFT p50/p99 ms stack", "errors (-t1 / -t2 / stack)"], rows),
    "![stack tok/s over the better llama-server](vs-llama-server.svg)",
    `Command: \`npm run build && node dist/bench/vs-llama-server.js --models ${values.models} --levels ${values.levels} --seconds ${seconds} --rounds ${rounds} --max-tokens ${maxTokens} --stack-threads ${stackThreads}\``,
  ]);
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
