// How many runner processes each model gets and how many decode threads each runs, from the
// machine and the model: the rule `tributary start` applies to every catalog field the catalog
// leaves unset (an explicit `replicas` or `threads`, from the catalog file or an override, wins).
// The measurements it rests on are in docs/operations.md ("Runner layout") and bench/results
// (decode-threads.md, runner-threads.md, vs-llama-server.md).

/**
 * node-llama-cpp's CPU library. "prebuilt": the binary npm ships, which starts its worker threads
 * anew at every decode step and spins at barriers: `threads` > 1 runs 4-10x slower, so every runner
 * stays at one thread. "source": built from its bundled llama.cpp with OpenMP (a persistent pool).
 */
export type LlamaLibrary = "prebuilt" | "source";

export interface MachineFacts {
  /** CPUs the stack may use: the affinity mask, lowered by a cgroup CPU quota. */
  cpus: number;
  /** Memory the stack may use (the machine's, or the cgroup's limit), bytes. */
  memoryBytes: number;
  library: LlamaLibrary;
}

export interface ModelFacts {
  id: string;
  /** False for sim models and models with layers on a GPU: they take no CPU share. */
  decodesOnCpu: boolean;
  /** GGUF file size (what one decode step reads), or undefined when not on disk yet. */
  modelBytes: number | undefined;
  /** What one runner of it holds: weights plus its KV cache (context x slots), when known. */
  runnerBytes: number | undefined;
  /** Set in the catalog (or TRIBUTARY_REPLICAS / TRIBUTARY_MODEL_OVERRIDES): these win. */
  runners: number | undefined;
  threads: number | undefined;
}

export type ModelClass = "overhead-bound" | "compute-bound" | "not on the CPU";

export interface ModelLayout {
  id: string;
  runners: number;
  threads: number;
  class: ModelClass;
  /** Which of the two the catalog fixed; the rest came from the rule. */
  fromCatalog: { runners: boolean; threads: boolean };
  /** One sentence for the log: why these numbers. */
  why: string;
}

/**
 * Below this a model is overhead-bound: its decode step (~0.3 ms for the 1.2 MB test model) is
 * of the order of the stack's own ~0.25 ms per token, so more threads in one step buy nothing and
 * a runner's JS thread is as busy as its decode thread. The ~100M Q8_0 model (108 MB) takes tens
 * of ms per token on one core here: compute-bound.
 */
export const OVERHEAD_BOUND_BYTES = 32 * 1024 * 1024;

/**
 * Threads one runner gets at most; more CPUs become more runners. Not measured on the 2-CPU
 * machine the other figures come from: a decode step reads every weight once, and one step's
 * threads stop scaling when they saturate the memory bandwidth (typically 8-16 cores).
 */
export const MAX_THREADS_PER_RUNNER = 8;

/**
 * Overhead-bound runners at most, for the one gateway process that streams their tokens: 8
 * runners at ~2,500 tok/s each is 20,000 tok/s, what bench/sim-streams drives through one gateway
 * at 41% of a core.
 */
export const MAX_OVERHEAD_BOUND_RUNNERS = 8;

/** Share of the memory the runners may hold together (the rest: gateway, NATS, the OS). */
export const MEMORY_SHARE = 0.75;

/**
 * CPUs kept for the gateway, actor host and nats-server. Overhead-bound runners produce tokens
 * fast enough to keep them busy: one CPU (their own, so a runner's JS/decode hand-off never waits
 * behind them: 1 pinned runner decodes 35-50% faster at one stream than 2 floating on 2 CPUs),
 * one more per 8. A compute-bound runner makes a few hundred tokens/s at most, which costs the
 * services a few percent of a CPU: below 4 CPUs they share every CPU with it (threads 2 floating
 * on 2 CPUs: 1.84x threads 1 pinned on one stream, 3.5x at eight), from 4 on they get one of their
 * own (one per 16), so no OpenMP barrier waits behind the gateway.
 */
export function servicesCpus(cpus: number, anyOverheadBound: boolean): number {
  if (cpus <= 1) return 0;
  if (anyOverheadBound) return Math.ceil(cpus / 8);
  return cpus >= 4 ? Math.ceil(cpus / 16) : 0;
}

export function classify(model: ModelFacts): ModelClass {
  if (!model.decodesOnCpu) return "not on the CPU";
  // Unknown size: a model still to download from Hugging Face, which is never a toy.
  return model.modelBytes !== undefined && model.modelBytes < OVERHEAD_BOUND_BYTES ? "overhead-bound" : "compute-bound";
}

const atLeast1 = (n: number) => Math.max(1, Math.floor(n));

/**
 * The layout of every model. Pure: the same facts give the same layout (unit-tested over a table).
 * The CPUs left after the services' share are split evenly among the CPU models (after those
 * whose catalog fixes both fields took theirs), and so is the memory.
 */
export function pickLayout(machine: MachineFacts, models: readonly ModelFacts[]): ModelLayout[] {
  const classes = new Map(models.map((m) => [m.id, classify(m)]));
  const onCpu = models.filter((m) => classes.get(m.id) !== "not on the CPU");
  const fixed = onCpu.filter((m) => m.runners !== undefined && m.threads !== undefined);
  const free = onCpu.filter((m) => !(m.runners !== undefined && m.threads !== undefined));
  const anyOverheadBound = free.some((m) => classes.get(m.id) === "overhead-bound");
  const fixedCpus = fixed.reduce((sum, m) => sum + m.runners! * m.threads!, 0);
  const budget = machine.cpus - servicesCpus(machine.cpus, anyOverheadBound) - fixedCpus;
  const cpuShare = atLeast1(budget / Math.max(1, free.length));
  const memoryShare = (machine.memoryBytes * MEMORY_SHARE) / Math.max(1, onCpu.length);

  return models.map((m): ModelLayout => {
    const cls = classes.get(m.id)!;
    const fromCatalog = { runners: m.runners !== undefined, threads: m.threads !== undefined };
    const base = { id: m.id, class: cls, fromCatalog };
    if (cls === "not on the CPU" || (fromCatalog.runners && fromCatalog.threads))
      return { ...base, runners: m.runners ?? 1, threads: m.threads ?? 1, why: cls === "not on the CPU" ? "does not decode on the CPU" : "runners and threads set in the catalog" };
    // Runners past what the memory holds would fail to load (or swap): cap them when it is known.
    const memoryCap = m.runnerBytes ? atLeast1(memoryShare / m.runnerBytes) : Number.POSITIVE_INFINITY;
    const unknownSize = m.modelBytes === undefined;

    if (cls === "overhead-bound") {
      const threads = m.threads ?? 1;
      const runners = m.runners ?? Math.min(atLeast1(cpuShare / threads), MAX_OVERHEAD_BOUND_RUNNERS, memoryCap);
      const cap = runners === MAX_OVERHEAD_BOUND_RUNNERS && !fromCatalog.runners ? ` (at most ${MAX_OVERHEAD_BOUND_RUNNERS} for one gateway)` : runners === memoryCap && !fromCatalog.runners ? " (as many as the memory holds)" : "";
      return { ...base, runners, threads, why: `overhead-bound (${mib(m.modelBytes)}): one-thread runners, one per CPU left after ${servicesCpus(machine.cpus, anyOverheadBound)} for the gateway and NATS${cap}` };
    }
    if (machine.library === "prebuilt") {
      const threads = m.threads ?? 1;
      // Not on disk yet: one runner (its memory is unknown); the next start sees the file.
      const runners = m.runners ?? (unknownSize ? 1 : Math.min(atLeast1(cpuShare / threads), memoryCap));
      return { ...base, runners, threads, why: `compute-bound (${mib(m.modelBytes)}) on the prebuilt library (no persistent thread pool): one thread per runner, ${unknownSize ? "one runner until the file is on disk" : "one runner per CPU"}` };
    }
    if (m.runners !== undefined) {
      const threads = atLeast1(Math.min(cpuShare / m.runners, MAX_THREADS_PER_RUNNER));
      return { ...base, runners: m.runners, threads, why: `compute-bound on the source build: the catalog's ${m.runners} runner(s) share ${cpuShare} CPU(s)` };
    }
    if (m.threads !== undefined) {
      const runners = unknownSize ? 1 : Math.min(atLeast1(cpuShare / m.threads), memoryCap);
      return { ...base, runners, threads: m.threads, why: `compute-bound on the source build: runners of the catalog's ${m.threads} thread(s) over ${cpuShare} CPU(s)` };
    }
    // The fewest runners of at most MAX_THREADS_PER_RUNNER threads that cover the share evenly.
    const runners = unknownSize ? 1 : Math.min(Math.ceil(cpuShare / MAX_THREADS_PER_RUNNER), memoryCap);
    const threads = atLeast1(Math.min(cpuShare / runners, MAX_THREADS_PER_RUNNER));
    return { ...base, runners, threads, why: `compute-bound (${mib(m.modelBytes)}) on the source build (OpenMP pool): the fewest runners of at most ${MAX_THREADS_PER_RUNNER} threads over ${cpuShare} CPU(s)` };
  });
}

function mib(bytes: number | undefined): string {
  return bytes === undefined ? "size unknown until downloaded" : `${(bytes / (1024 * 1024)).toFixed(bytes < 10 * 1024 * 1024 ? 1 : 0)} MiB`;
}
