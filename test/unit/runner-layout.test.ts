import t from "tap";
import { libuvPoolThreads } from "../../runners/engines/create-engine.js";
import { flashAttentionOption } from "../../runners/engines/llama/llama-engine.js";
import { decodeThreadEnv, OPENMP_SPIN_COUNT, pickLayout, servicesCpus, type LlamaLibrary, type ModelFacts } from "../../modules/runner-layout/mod.js";

const MiB = 1024 * 1024;
const GiB = 1024 * MiB;
const tiny = 1.2 * MiB; // stories260K
const m100 = 103 * MiB; // bench/gguf ~100M Q8_0
const m500 = 530 * MiB; // bench/gguf ~500M Q8_0

const model = (bytes: number | undefined, extra: Partial<ModelFacts> = {}): ModelFacts => ({
  id: "m",
  decodesOnCpu: true,
  modelBytes: bytes,
  runnerBytes: bytes === undefined ? undefined : bytes + 64 * MiB,
  runners: undefined,
  threads: undefined,
  ...extra,
});
const one = (cpus: number, library: LlamaLibrary, facts: ModelFacts, memoryBytes = 64 * GiB) => {
  const [l] = pickLayout({ cpus, memoryBytes, library }, [facts]);
  return { runners: l!.runners, threads: l!.threads, class: l!.class };
};

t.test("the layout over a table of machines, model sizes and libraries", async (t) => {
  // [cpus, model bytes, library, runners, threads]
  const table: [number, number | undefined, LlamaLibrary, number, number][] = [
    // Overhead-bound: one-thread runners, one CPU (one per 8) kept for the gateway and NATS,
    // whatever the library; at most 8 for the one gateway.
    [1, tiny, "prebuilt", 1, 1],
    [2, tiny, "prebuilt", 1, 1],
    [2, tiny, "source", 1, 1],
    [4, tiny, "source", 3, 1],
    [8, tiny, "prebuilt", 7, 1],
    [16, tiny, "source", 8, 1],
    [64, tiny, "prebuilt", 8, 1],
    // Compute-bound, prebuilt library (no thread pool): one thread, one runner per CPU.
    [1, m100, "prebuilt", 1, 1],
    [2, m100, "prebuilt", 2, 1],
    [2, m500, "prebuilt", 2, 1],
    [4, m500, "prebuilt", 3, 1],
    [16, m500, "prebuilt", 15, 1],
    // Compute-bound, source build: one runner with every CPU below 4 (shared with the services),
    // one CPU (one per 16) for the services from 4 on; past 8 threads, more runners splitting the CPUs evenly.
    [1, m500, "source", 1, 1],
    [2, m100, "source", 1, 2],
    [2, m500, "source", 1, 2],
    [3, m500, "source", 1, 3],
    [4, m500, "source", 1, 3],
    [8, m500, "source", 1, 7],
    [9, m500, "source", 1, 8],
    [16, m500, "source", 2, 7],
    [32, m500, "source", 4, 7],
    [64, m500, "source", 8, 7],
    // Not on disk yet (an hf: source): compute-bound, one runner.
    [16, undefined, "prebuilt", 1, 1],
    [16, undefined, "source", 1, 8],
    [2, undefined, "source", 1, 2],
  ];
  for (const [cpus, bytes, library, runners, threads] of table)
    t.same(one(cpus, library, model(bytes)), { runners, threads, class: bytes !== undefined && bytes < 32 * MiB ? "overhead-bound" : "compute-bound" }, `${cpus} CPUs, ${bytes === undefined ? "unknown size" : `${Math.round(bytes / MiB)} MiB`}, ${library}`);
});

t.test("the class turns at 32 MiB", async (t) => {
  t.equal(one(8, "source", model(32 * MiB - 1)).class, "overhead-bound");
  t.equal(one(8, "source", model(32 * MiB)).class, "compute-bound");
});

t.test("the catalog's runners and threads win over the rule", async (t) => {
  t.same(one(2, "prebuilt", model(m500, { threads: 2 })), { runners: 1, threads: 2, class: "compute-bound" }, "threads 2 on the prebuilt library: the catalog asked for it");
  t.same(one(8, "prebuilt", model(tiny, { runners: 2 })), { runners: 2, threads: 1, class: "overhead-bound" });
  t.same(one(8, "source", model(m500, { runners: 2 })), { runners: 2, threads: 3, class: "compute-bound" }, "the rule splits the CPUs among the catalog's runners");
  t.same(one(8, "source", model(m500, { threads: 2 })), { runners: 3, threads: 2, class: "compute-bound" });
  t.same(one(8, "source", model(m500, { runners: 0 })).runners, 0, "replicas 0 (a model not served here) stays 0");
  const [fixed] = pickLayout({ cpus: 2, memoryBytes: GiB, library: "source" }, [model(m500, { runners: 5, threads: 3 })]);
  t.same([fixed!.runners, fixed!.threads, fixed!.fromCatalog], [5, 3, { runners: true, threads: true }]);
});

t.test("runners are capped by the memory they hold", async (t) => {
  // 16 CPUs would give 15 prebuilt runners; 8 GiB x 0.75 holds 6 runners of 1 GiB.
  t.equal(one(16, "prebuilt", model(m500, { runnerBytes: GiB }), 8 * GiB).runners, 6);
  t.equal(one(16, "prebuilt", model(m500, { runnerBytes: 100 * GiB }), 8 * GiB).runners, 1, "never below one");
});

t.test("CPUs are shared among the CPU models; sim and GPU models take none", async (t) => {
  const layouts = pickLayout({ cpus: 8, memoryBytes: 64 * GiB, library: "source" }, [
    { ...model(m500), id: "a" },
    { ...model(m500), id: "b" },
    { ...model(undefined), id: "sim", decodesOnCpu: false },
    { ...model(m500), id: "fixed", runners: 1, threads: 1 },
  ]);
  // 8 CPUs - 1 for the services - 1 the catalog fixed = 6, 3 each.
  t.same(layouts.map((l) => [l.id, l.runners, l.threads, l.class]), [
    ["a", 1, 3, "compute-bound"],
    ["b", 1, 3, "compute-bound"],
    ["sim", 1, 1, "not on the CPU"],
    ["fixed", 1, 1, "compute-bound"],
  ]);
  // A tiny model beside a big one: the services keep a CPU of their own.
  const mixed = pickLayout({ cpus: 2, memoryBytes: 64 * GiB, library: "source" }, [{ ...model(tiny), id: "t" }, { ...model(m500), id: "big" }]);
  t.same(mixed.map((l) => [l.runners, l.threads]), [[1, 1], [1, 1]]);
});

t.test("the services' share", async (t) => {
  t.same([1, 2, 8, 9, 16].map((c) => servicesCpus(c, true)), [0, 1, 1, 2, 2]);
  t.same([1, 2, 3, 4, 16, 17].map((c) => servicesCpus(c, false)), [0, 0, 0, 1, 1, 2]);
});

t.test("the OpenMP spin count a runner of threads > 1 gets, unless the user set OpenMP's own", async (t) => {
  const none = { waitPolicy: undefined, spinCount: undefined };
  // With one libuv pool thread: one OpenMP team leads every step.
  t.same(decodeThreadEnv(2, true, none), { UV_THREADPOOL_SIZE: "1", GOMP_SPINCOUNT: String(OPENMP_SPIN_COUNT) });
  t.same(decodeThreadEnv(8, true, none), { UV_THREADPOOL_SIZE: "1", GOMP_SPINCOUNT: String(OPENMP_SPIN_COUNT) });
  // One thread has no team to spin; GPU and sim models decode elsewhere.
  t.same(decodeThreadEnv(1, true, none), { UV_THREADPOOL_SIZE: "1" });
  t.same(decodeThreadEnv(4, false, none), {});
  t.same(decodeThreadEnv(1, false, none), {});
  // The user's OMP_WAIT_POLICY or GOMP_SPINCOUNT decides (the variable reaches the runner as set).
  t.same(decodeThreadEnv(2, true, { waitPolicy: "passive", spinCount: undefined }), { UV_THREADPOOL_SIZE: "1" });
  t.same(decodeThreadEnv(2, true, { waitPolicy: undefined, spinCount: "300000" }), { UV_THREADPOOL_SIZE: "1" });
  t.same(decodeThreadEnv(2, true, { waitPolicy: undefined, spinCount: "" }), { UV_THREADPOOL_SIZE: "1" });
});

t.test("one libuv pool thread for a runner decoding on the CPU, unless the user set UV_THREADPOOL_SIZE", async (t) => {
  const none = { waitPolicy: undefined, spinCount: undefined };
  t.same(decodeThreadEnv(1, true, { ...none, libuvPoolSize: "4" }), {}, "the user's pool size reaches the runner as set");
  t.same(decodeThreadEnv(1, true, { ...none, libuvPoolSize: "" }), {});
  t.same(decodeThreadEnv(2, true, { ...none, libuvPoolSize: "4" }), { GOMP_SPINCOUNT: String(OPENMP_SPIN_COUNT) }, "with more threads too");
  t.same(decodeThreadEnv(1, true, { waitPolicy: "passive", spinCount: undefined }), { UV_THREADPOOL_SIZE: "1" }, "OpenMP's settings do not matter to one thread");
});

t.test("libuv's pool size as libuv reads UV_THREADPOOL_SIZE decides whether samples follow the decode", async (t) => {
  t.equal(libuvPoolThreads(undefined), 4);
  t.equal(libuvPoolThreads(""), 1);
  t.equal(libuvPoolThreads(" 3x"), 3);
  t.equal(libuvPoolThreads("-1"), 0);
  t.equal(libuvPoolThreads("1"), 1);
  t.equal(libuvPoolThreads("0"), 1);
  t.equal(libuvPoolThreads("two"), 1);
  t.equal(libuvPoolThreads("2"), 2);
  t.equal(libuvPoolThreads("5000"), 1024);
});

t.test("flash attention: auto turns it on for CPU decoding and leaves a GPU to the library's default", async (t) => {
  t.same(flashAttentionOption("auto", false), { flashAttention: true }, "CPU: on, as llama.cpp's -fa auto");
  t.same(flashAttentionOption("auto", true), {}, "GPU: node-llama-cpp's default");
  t.same(flashAttentionOption("on", true), { flashAttention: true });
  t.same(flashAttentionOption("off", false), { flashAttention: false });
});
