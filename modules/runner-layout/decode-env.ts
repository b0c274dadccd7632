// Environment `tributary start` gives a runner whose model decodes on the CPU: one libuv pool
// thread, and OpenMP's spin for more than one decode thread.

/**
 * GOMP_SPINCOUNT for runners with `threads` > 1. With the OpenMP build (the source build; the
 * prebuilt library has no OpenMP), libgomp lets a thread that reaches a barrier, or a worker whose
 * parallel region ended, spin 300,000 times before it sleeps (when no more threads than CPUs).
 * In a runner that spin competes for the CPUs with everything that runs between and during decode
 * steps: the runner's JavaScript thread, the gateway, nats-server. 10,000 spins keep the barriers
 * within a step fast (the threads of a running step meet within microseconds) and put the team's
 * workers to sleep soon after it. Chosen when a runner had an OpenMP team per libuv worker
 * (bench/results/runner-threads-500m-omp.md, now in git history); with one pool thread (below) the stack ran as fast
 * on 10,000 spins as on libgomp's default and spent up to 12% less CPU per token
 * (bench/results/vs-llama-server-pool1-spin.md, now in git history).
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
 * Variables to add to the environment of a runner decoding with `threads` CPU threads: one libuv
 * pool thread, and the OpenMP spin count for more than one thread (nothing for models
 * on a GPU or the sim engine, nor where the user set the variable's own settings). They must be
 * in the process's environment when it starts: libgomp reads them once, when it is loaded, and
 * libuv when its pool first runs work.
 */
export function decodeThreadEnv(threads: number, decodesOnCpu: boolean, user: DecodeEnvSettings): Record<string, string> {
  return { ...samplePoolEnv(decodesOnCpu, user), ...openMpEnv(threads, decodesOnCpu, user) };
}

function openMpEnv(threads: number, decodesOnCpu: boolean, user: DecodeEnvSettings): Record<string, string> {
  if (threads <= 1 || !decodesOnCpu || user.waitPolicy !== undefined || user.spinCount !== undefined) return {};
  return { GOMP_SPINCOUNT: String(OPENMP_SPIN_COUNT) };
}

/**
 * UV_THREADPOOL_SIZE=1 for runners decoding on the CPU, with any number of threads (unless the
 * user set the variable). node-llama-cpp runs every decode step as work on libuv's pool.
 * - One pool thread runs a step's samples right after its decode, so the runner's JavaScript
 *   thread wakes once per step instead of twice (runners/engines/llama/decode-steps.ts chains them
 *   only when the runner started with one pool thread). Nothing else of a runner uses the pool
 *   while it decodes.
 * - With more than one decode thread, every step runs on one OpenMP team, as in llama-server,
 *   whose main loop leads every step. libgomp gives each thread that opens a parallel region a
 *   team of its own: with libuv's default four pool threads a runner had up to four teams, a step
 *   ran on whichever worker libuv picked, and the team of the last step still spun, or had gone to
 *   sleep and had to be woken. On the ~500M model, 2 CPUs, in process: 44-58 ms per token on 2
 *   threads with four pool threads, 35-37 ms with one, llama-server -t 2 33 ms. Through the stack
 *   (bench/results/vs-llama-server-pool1-spin.md in git history, quiet VM) one pool thread made 1.46x / 1.24x
 *   the tokens/s of four at 1 / 8 streams on ~500M and 1.41x / 1.60x on ~100M. (On 2026-11-28, on
 *   a machine loaded 5-7 by other work, it had made 0.39x / 0.53x on ~500M: runner-threads-500m-pool.md, in git history.)
 */
function samplePoolEnv(decodesOnCpu: boolean, user: DecodeEnvSettings): Record<string, string> {
  if (!decodesOnCpu || user.libuvPoolSize !== undefined) return {};
  return { UV_THREADPOOL_SIZE: "1" };
}
