// Environment `tributary start` gives a runner whose model decodes on the CPU: OpenMP's spin for
// more than one decode thread, libuv's pool for one.

/**
 * GOMP_SPINCOUNT for runners with `threads` > 1. With the OpenMP build (the source build; the
 * prebuilt library has no OpenMP), libgomp lets a thread that reaches a barrier, or a worker whose
 * parallel region ended, spin 300,000 times before it sleeps (when no more threads than CPUs).
 * In a runner that spin competes for the CPUs with everything that runs between and during decode
 * steps: the runner's JavaScript thread and sampling, the gateway, nats-server. And each of
 * libuv's worker threads that happens to run a decode step (node-llama-cpp queues every step on
 * libuv's pool) leads a thread team of its own: the team of the last step still spins while the
 * next step's team starts on another worker (perf of a runner at 8 streams: three teams of two
 * threads, each with thousands of involuntary context switches a second). 10,000 spins keep the
 * barriers within a step fast (the threads of a running step meet within microseconds) and put
 * an idle team to sleep soon. Measured through the whole stack on the ~500M model, 2 CPUs
 * (bench/results/runner-threads-500m-omp.md).
 */
export const OPENMP_SPIN_COUNT = 10_000;

/** The OpenMP and libuv settings of the environment `tributary start` runs in: the user's own win. */
export interface DecodeEnvSettings {
  waitPolicy: string | undefined;
  spinCount: string | undefined;
  /** UV_THREADPOOL_SIZE. */
  libuvPoolSize?: string | undefined;
}

/**
 * Variables to add to the environment of a runner decoding with `threads` CPU threads: the
 * OpenMP spin count for more than one thread, one libuv pool thread for one (nothing for models
 * on a GPU or the sim engine, nor where the user set the variable's own settings). They must be
 * in the process's environment when it starts: libgomp reads them once, when it is loaded, and
 * libuv when its pool first runs work.
 */
export function decodeThreadEnv(threads: number, decodesOnCpu: boolean, user: DecodeEnvSettings): Record<string, string> {
  return { ...samplePoolEnv(threads, decodesOnCpu, user), ...openMpEnv(threads, decodesOnCpu, user) };
}

function openMpEnv(threads: number, decodesOnCpu: boolean, user: DecodeEnvSettings): Record<string, string> {
  if (threads <= 1 || !decodesOnCpu || user.waitPolicy !== undefined || user.spinCount !== undefined) return {};
  return { GOMP_SPINCOUNT: String(OPENMP_SPIN_COUNT) };
}

/**
 * UV_THREADPOOL_SIZE=1 for runners decoding on one CPU thread: libuv's pool then runs a step's
 * samples right after its decode on the same worker, and the runner's JavaScript thread wakes
 * once per step instead of twice (runners/engines/llama/decode-steps.ts, which chains only when
 * the runner started with one pool thread). Nothing else of a runner uses the pool while it
 * decodes. Not for threads > 1 until measured there, nor when the user set the variable.
 */
function samplePoolEnv(threads: number, decodesOnCpu: boolean, user: DecodeEnvSettings): Record<string, string> {
  if (threads !== 1 || !decodesOnCpu || user.libuvPoolSize !== undefined) return {};
  return { UV_THREADPOOL_SIZE: "1" };
}
