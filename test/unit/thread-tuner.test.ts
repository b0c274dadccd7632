import t from "tap";
import { MAX_PROBE_INTERVAL, ThreadTuner, threadCandidates, widthClass } from "../../runners/engines/llama/thread-tuner.js";

// The tuner picks each width class's decode threads from the cycles of the steps it serves:
// it must find the faster count through step-to-step noise, hold it while probes back off,
// follow a machine whose speeds change, and keep width classes apart.

/** A seeded uniform noise source (mulberry32): the tests are deterministic. */
function noise(seed: number, amplitude: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let x = Math.imul(a ^ (a >>> 15), 1 | a);
    x = (x + Math.imul(x ^ (x >>> 7), 61 | x)) ^ x;
    return 1 + amplitude * (2 * (((x ^ (x >>> 14)) >>> 0) / 4294967296) - 1);
  };
}

/** Serves `steps` steady steps of `tokens` tokens; returns the threads each step ran on. */
function serve(tuner: ThreadTuner, steps: number, tokens: number, msOn: (threads: number) => number, jitter: () => number): number[] {
  const ran: number[] = [];
  for (let i = 0; i < steps; i++) {
    const threads = tuner.threadsFor(tokens, true);
    tuner.cycle(tokens, threads, msOn(threads) * jitter());
    ran.push(threads);
  }
  return ran;
}

const share = (ran: number[], threads: number) => ran.filter((n) => n === threads).length / ran.length;

t.test("candidates and width classes", async (t) => {
  t.same(threadCandidates(1), [1]);
  t.same(threadCandidates(2), [1, 2]);
  t.same(threadCandidates(6), [1, 2, 4, 6]);
  t.same(threadCandidates(8), [1, 2, 4, 8]);
  t.same([0, 1, 2, 3, 4, 7, 8, 512].map(widthClass), [0, 0, 1, 1, 2, 2, 3, 9]);
});

t.test("one thread that is 30% faster is found within a request's worth of steps and kept", async (t) => {
  const changedAt: number[] = [];
  let step = 0;
  const tuner = new ThreadTuner(2, (change) => {
    changedAt.push(step);
    t.match(change, { tokensFrom: 1, from: 2, to: 1 }, "one-token steps move from 2 threads to 1");
  });
  const jitter = noise(1, 0.1);
  const ran: number[] = [];
  for (; step < 3000; step++) ran.push(...serve(tuner, 1, 1, (n) => (n === 1 ? 10 : 13), jitter));
  t.equal(changedAt.length, 1, "one change");
  t.ok(changedAt[0]! < 60, `changed at step ${changedAt[0]}`);
  const after = ran.slice(changedAt[0]! + 1);
  t.ok(share(after, 1) > 0.98, `after it ${(share(after, 1) * 100).toFixed(1)}% of steps are on one thread`);
});

t.test("all threads that are 30% faster stay, and probes of fewer back off", async (t) => {
  const changes: unknown[] = [];
  const tuner = new ThreadTuner(2, (c) => changes.push(c));
  const ran = serve(tuner, 5000, 8, (n) => (n === 2 ? 10 : 13), noise(2, 0.1));
  t.equal(changes.length, 0);
  t.ok(share(ran, 1) < 0.02, `probes take ${(share(ran, 1) * 100).toFixed(2)}% of steps`);
  const tail = ran.slice(-MAX_PROBE_INTERVAL * 2);
  t.ok(share(tail, 1) <= 8 / tail.length, "in a steady state a probe runs at most once per longest interval");
});

t.test("an 8% difference under ±10% noise per step ends on the faster count", async (t) => {
  for (const seed of [3, 4, 5, 6]) {
    const tuner = new ThreadTuner(2);
    const ran = serve(tuner, 4000, 1, (n) => (n === 1 ? 10 : 10.8), noise(seed, 0.1));
    t.ok(share(ran.slice(1000), 1) > 0.9, `seed ${seed}: ${(share(ran.slice(1000), 1) * 100).toFixed(1)}% of later steps on the faster count`);
  }
});

t.test("width classes choose apart: one thread for one-token steps, two for eight-token steps", async (t) => {
  const tuner = new ThreadTuner(2);
  const jitter = noise(7, 0.1);
  const one: number[] = [];
  const eight: number[] = [];
  for (let i = 0; i < 2000; i++) {
    // Alternating runs of 50 steps at each width, as streams come and go.
    if (Math.floor(i / 50) % 2 === 0) one.push(...serve(tuner, 1, 1, (n) => (n === 1 ? 10 : 14), jitter));
    else eight.push(...serve(tuner, 1, 8, (n) => (n === 1 ? 20 : 15), jitter));
  }
  t.ok(share(one.slice(200), 1) > 0.95);
  t.ok(share(eight.slice(200), 2) > 0.95);
  t.equal(tuner.describe(), "1: 1, 8-15: 2");
});

t.test("when the machine changes, the tuner follows within a few of its longest probe intervals", async (t) => {
  const tuner = new ThreadTuner(2);
  const jitter = noise(8, 0.05);
  serve(tuner, 5000, 1, (n) => (n === 1 ? 10 : 13), jitter);
  // Now two threads are faster (another process left the second CPU).
  const ran = serve(tuner, MAX_PROBE_INTERVAL * 3, 1, (n) => (n === 1 ? 13 : 10), jitter);
  t.equal(ran.at(-1), 2);
  t.ok(share(ran.slice(-MAX_PROBE_INTERVAL), 2) > 0.98);
});

t.test("with four candidates the tuner climbs to the fastest", async (t) => {
  const tuner = new ThreadTuner(8);
  const ms: Record<number, number> = { 1: 20, 2: 10, 4: 12, 8: 16 };
  const ran = serve(tuner, 3000, 1, (n) => ms[n]!, noise(9, 0.05));
  t.ok(share(ran.slice(1000), 2) > 0.97, `${(share(ran.slice(1000), 2) * 100).toFixed(1)}% on 2 threads`);
});

t.test("steps with a prompt use all threads and teach nothing; one candidate never probes", async (t) => {
  const tuner = new ThreadTuner(4);
  for (let i = 0; i < 100; i++) t.equal(tuner.threadsFor(1 + (i % 40), false), 4);
  t.equal(tuner.describe(), "");
  const single = new ThreadTuner(1);
  t.same([...new Set(serve(single, 100, 1, () => 10, noise(10, 0.1)))], [1]);
});
