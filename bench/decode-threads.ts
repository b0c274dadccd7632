import { spawn } from "node:child_process";
import { writeFileSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";
import { commonConfig, readConfig } from "../lib/config.js";
import { loadCatalog } from "../modules/catalog/mod.js";
import { ensureRandomLlama, SHAPES, type ShapeName } from "./gguf/random-llama.js";
import { TEST_MODEL, testCatalog, repoRoot } from "./lib/processes.js";

// Decode tokens/s of node-llama-cpp at `threads` 1 and 2, with its prebuilt CPU library and with
// a local build (`npx --no node-llama-cpp source build --gpu false`, OpenMP, native CPU flags),
// on the random llama benchmark models. Each measurement runs in a fresh child process (one
// library per process); configurations alternate in order from round to round, and the report
// gives each configuration's median and its ratio to threads 1 of the same library, taken from
// the same rounds. CPU time per token (all threads of the process) is reported beside it: on a
// shared machine it moves less than wall time.
//
//   node dist/bench/decode-threads.js --models 500m --sequences 1,8 --tokens 48 --rounds 3
// --libraries prebuilt,local,local-passive (the last: the local build with OMP_WAIT_POLICY=passive).

interface Sample {
  library: string;
  tokens: number;
  seconds: number;
  cpuSeconds: number;
}

const { values: args } = parseArgs({
  options: {
    worker: { type: "boolean", default: false },
    models: { type: "string", default: "100m,500m" },
    model: { type: "string" },
    library: { type: "string", default: "local" },
    libraries: { type: "string", default: "prebuilt,local" },
    threads: { type: "string", default: "1,2" },
    sequences: { type: "string", default: "1,8" },
    tokens: { type: "string", default: "48" },
    rounds: { type: "string", default: "3" },
  },
});
const list = (s: string) => s.split(",").map((x) => x.trim()).filter(Boolean);

/** One measurement: load the model, warm up, then N sequences generate `tokens` each together. */
async function worker(): Promise<void> {
  const threads = Number(args.threads);
  const sequences = Number(args.sequences);
  const tokens = Number(args.tokens);
  // A custom cmake option that no local build has makes node-llama-cpp skip local builds and
  // load its prebuilt library (it matches prebuilt binaries without custom options).
  const llama = await getLlama({
    gpu: false,
    build: "never",
    logLevel: LlamaLogLevel.error,
    progressLogs: false,
    ...(args.library === "prebuilt" ? { cmakeOptions: { TRIBUTARY_PREBUILT_ONLY: "1" } } : {}),
  });
  const wanted = args.library === "prebuilt" ? "prebuilt" : "localBuild"; // "local" or "local-passive"
  if (llama.buildType !== wanted) throw new Error(`wanted the ${wanted} library, got ${llama.buildType} (build it with: npx --no node-llama-cpp source build --gpu false)`);
  const model = await llama.loadModel({ modelPath: args.model! });
  const context = await model.createContext({ sequences, contextSize: sequences * 256, threads, batchSize: 256 });
  const prompt = model.tokenize("Once upon a time, in a land far away, there lived");
  const all = Array.from({ length: sequences }, () => context.getSequence());
  const run = async (count: number) => {
    await Promise.all(all.map((sequence) => sequence.clearHistory()));
    let generated = 0;
    await Promise.all(all.map(async (sequence) => {
      let n = 0;
      for await (const _token of sequence.evaluate(prompt, { temperature: 0.8 })) {
        generated++;
        if (++n >= count) break;
      }
    }));
    return generated;
  };
  await run(4); // warm-up: page the weights in, size the buffers
  const cpu = process.cpuUsage();
  const started = performance.now();
  const generated = await run(tokens);
  const seconds = (performance.now() - started) / 1000;
  const used = process.cpuUsage(cpu);
  const sample: Sample = { library: llama.buildType, tokens: generated, seconds, cpuSeconds: (used.user + used.system) / 1e6 };
  process.stdout.write(JSON.stringify(sample) + "\n");
  await llama.dispose();
}

function measure(config: { model: string; library: string; threads: number; sequences: number }): Promise<Sample> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [fileURLToPath(import.meta.url), "--worker", "--model", config.model, "--library", config.library,
      "--threads", String(config.threads), "--sequences", String(config.sequences), "--tokens", args.tokens!], {
      stdio: ["ignore", "pipe", "inherit"],
      // "local-passive": OpenMP threads sleep at once at a barrier instead of spinning first.
      env: config.library === "local-passive" ? { ...process.env, OMP_WAIT_POLICY: "passive" } : process.env,
    });
    let out = "";
    child.stdout.on("data", (d) => (out += d));
    child.on("exit", (code) => (code === 0 ? resolve(JSON.parse(out.trim().split("\n").pop()!)) : reject(new Error(`worker exited with ${code}`))));
  });
}

const median = (xs: number[]) => { const s = [...xs].sort((a, b) => a - b); return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2; };

async function main(): Promise<void> {
  const { home } = readConfig(commonConfig);
  const tokenizer = loadCatalog(testCatalog).find((m) => m.id === TEST_MODEL)!.source;
  const rounds = Number(args.rounds);
  const loadBefore = loadavg()[0]!;
  const lines = [
    "# Decode threads: node-llama-cpp's prebuilt CPU library against a local OpenMP build",
    "",
    `Random llama models (bench/gguf), Q8_0. ${args.tokens} tokens per sequence after a warm-up, N sequences decoding together in one context,`,
    `each measurement in a fresh process, ${rounds} rounds in alternating order; medians. "x t1" is the ratio to threads 1 of the same library`,
    "and model, the median of per-round ratios. CPU ms/token counts every thread of the process.",
    "",
    "| model | sequences | library | threads | tok/s | x t1 | CPU ms/token |",
    "|---|---:|---|---:|---:|---:|---:|",
  ];
  for (const name of list(args.models!)) {
    const shape = SHAPES[name as ShapeName];
    if (!shape) throw new Error(`unknown model ${name}`);
    const model = ensureRandomLlama(home, shape, tokenizer);
    for (const sequences of list(args.sequences!).map(Number)) {
      const configs = list(args.libraries!).flatMap((library) => list(args.threads!).map((threads) => ({ model, library, threads: Number(threads), sequences })));
      const samples = new Map(configs.map((c) => [c, [] as Sample[]]));
      for (let round = 0; round < rounds; round++) {
        for (const c of round % 2 === 0 ? configs : [...configs].reverse()) {
          const s = await measure(c);
          samples.get(c)!.push(s);
          process.stderr.write(`${name} n=${sequences} ${c.library} t${c.threads} round ${round}: ${(s.tokens / s.seconds).toFixed(1)} tok/s, ${(1000 * s.cpuSeconds / s.tokens).toFixed(1)} CPU ms/token\n`);
        }
      }
      for (const c of configs) {
        const own = samples.get(c)!;
        const base = samples.get(configs.find((b) => b.library === c.library && b.threads === 1)!) ?? own;
        const ratio = median(own.map((s, i) => (s.tokens / s.seconds) / (base[i]!.tokens / base[i]!.seconds)));
        lines.push(`| ${name} | ${sequences} | ${c.library} | ${c.threads} | ${median(own.map((s) => s.tokens / s.seconds)).toFixed(1)} | ${ratio.toFixed(2)} | ${median(own.map((s) => (1000 * s.cpuSeconds) / s.tokens)).toFixed(1)} |`);
      }
    }
  }
  lines.push("", `Load average (1 min) at the start and end: ${loadBefore.toFixed(1)}, ${loadavg()[0]!.toFixed(1)} on ${cpus().length} CPUs. Date: ${new Date().toISOString()}.`,
    `Command: \`node dist/bench/decode-threads.js --models ${args.models} --libraries ${args.libraries} --threads ${args.threads} --sequences ${args.sequences} --tokens ${args.tokens} --rounds ${args.rounds}\``);
  const table = lines.join("\n") + "\n";
  process.stdout.write(table);
  writeFileSync(`${repoRoot}/bench/results/decode-threads.md`, table);
}

await (args.worker ? worker() : main());
