import t from "tap";
import type { NativeContext, NativeSampler } from "../../runners/engines/llama/addon-context.js";
import { DecodeSteps, type StepThreads, LINGER_MAX_MS, LINGER_MIN_STEP_MS, lingerMs } from "../../runners/engines/llama/decode-steps.js";
import type { LogprobRead } from "../../runners/engines/llama/logprob-reads.js";

// DecodeSteps owns a context's batches: the input all sequences queued goes into one batch per
// step in sequence id order (the order llama.cpp needs to decode them as one micro-batch),
// prompts split by the batch size join generating sequences, every sequence whose input ended
// is sampled before the next decode, and KV edits wait for the step in flight.

interface Added {
  sequenceId: number;
  position: number;
  tokens: number[];
  logits: number[];
}

/** A native context that records batches; each decode completes when the test says so. */
class FakeNative implements NativeContext {
  batches: Added[][] = [];
  sizes: number[] = [];
  log: string[] = [];
  failNext = false;
  private finishDecode: (() => void) | undefined;
  /** Settles when the last decode has. */
  private decoding: Promise<boolean> = Promise.resolve(true);
  private current: Added[] = [];

  initBatch(tokens: number): void {
    this.sizes.push(tokens);
    this.current = [];
  }
  addToBatch(sequenceId: number, position: number, tokens: Uint32Array, logitIndexes: Uint32Array): Uint32Array {
    const offset = this.current.reduce((n, a) => n + a.tokens.length, 0);
    this.current.push({ sequenceId, position, tokens: [...tokens], logits: [...logitIndexes] });
    return Uint32Array.from(logitIndexes, (i) => offset + i);
  }
  decodeBatch(): Promise<void> {
    this.batches.push(this.current);
    this.log.push("decode");
    const fail = this.failNext;
    this.failNext = false;
    const decoded = new Promise<void>((resolve, reject) => (this.finishDecode = () => (fail ? reject(new Error("decode failed")) : resolve())));
    this.decoding = decoded.then(() => true, () => false);
    return decoded;
  }
  /**
   * Samples token 1000 + the logit's batch index. As on libuv's pool of one thread, a sample
   * queued while a decode runs completes after it, and fails when that decode failed.
   */
  /** Tokens a probe's `top` sampler leaves out of its candidates (sampled far down the list). */
  notCandidates = new Set<number>();
  sampleToken(batchLogitIndex: number, sampler: NativeSampler): Promise<number>;
  sampleToken(batchLogitIndex: number, sampler: NativeSampler, probabilities: boolean, confidence?: boolean): Promise<[number, number[] | undefined, number | undefined]>;
  /**
   * A probe's reads (logprob-reads.ts): its `top` sampler's candidates are that token and token 7;
   * its `whole` sampler's confidence is 0.4, its whole distribution token 7, then that token.
   */
  sampleToken(batchLogitIndex: number, sampler: NativeSampler, probabilities?: boolean, confidence?: boolean): Promise<unknown> {
    const token = 1000 + batchLogitIndex;
    const kind = (sampler as ProbeSampler).kind;
    const read = !kind ? "sample" : kind === "top" ? "top" : probabilities ? "whole distribution" : "whole confidence";
    this.log.push(`${read} ${batchLogitIndex}`);
    return this.decoding.then((decoded) => {
      if (!decoded) return Promise.reject(new Error("no logits"));
      if (read === "top") return [-1, this.notCandidates.has(token) ? [7, 0.9, 8, 0.1] : [token, 0.75, 7, 0.25], undefined];
      if (read === "whole confidence") return [-1, undefined, 0.4];
      if (read === "whole distribution") return [-1, [7, 0.5, token, 0.001], undefined];
      return probabilities || confidence ? [token, undefined, undefined] : token;
    });
  }
  removeTokenCellsFromSequence(sequenceId: number, start: number): boolean {
    this.log.push(`edit ${sequenceId} ${start}`);
    return true;
  }
  setThreads(threads: number): void {
    this.log.push(`threads ${threads}`);
  }
  /** Completes the decode in flight (waiting for the step to start first). */
  async complete(): Promise<void> {
    while (!this.finishDecode) await new Promise((r) => setImmediate(r));
    const finish = this.finishDecode;
    this.finishDecode = undefined;
    finish();
  }
}

const sampler: NativeSampler = { applyConfig() {}, dispose() {} };
interface ProbeSampler extends NativeSampler {
  kind?: "top" | "whole";
}
const newProbe = () => ({ top: { ...sampler, kind: "top" } as ProbeSampler, whole: { ...sampler, kind: "whole" } as ProbeSampler, read: undefined as LogprobRead | undefined });

t.test("a probe reads its sequence's logprobs from the logits its token was sampled from, right after that sample", async (t) => {
  for (const samplesFollowDecode of [false, true]) {
    const native = new FakeNative();
    const steps = new DecodeSteps(native, 16, { samplesFollowDecode });
    const probe = newProbe();
    const results = [steps.decode(3, 0, Uint32Array.of(1, 2, 3), sampler, probe), steps.decode(5, 0, Uint32Array.of(7), sampler)];
    await native.complete();
    t.same(await Promise.all(results), [1002, 1003], "tokens as without a probe");
    t.same(probe.read, { top: [1002, 0.75, 7, 0.25], topProbability: 0.4, whole: undefined }, "candidates and the top one's probability, of its sequence's logit row");
    t.same(native.log.filter((l) => l !== "decode"), ["sample 2", "top 2", "whole confidence 2", "sample 3"], `one decode, the reads after its sample (samplesFollowDecode ${samplesFollowDecode})`);
  }
});

t.test("a token sampled outside the candidates has the whole distribution read, before the next decode", async (t) => {
  const native = new FakeNative();
  const steps = new DecodeSteps(native, 16, { samplesFollowDecode: true });
  native.notCandidates.add(1000);
  const probe = newProbe();
  const first = steps.decode(1, 0, Uint32Array.of(1), sampler, probe);
  await native.complete();
  t.equal(await first, 1000);
  t.same(probe.read, { top: [7, 0.9, 8, 0.1], topProbability: 0.4, whole: [7, 0.5, 1000, 0.001] });
  const next = steps.decode(1, 1, Uint32Array.of(1000), sampler, probe);
  await native.complete();
  await next;
  t.same(native.log, ["decode", "sample 0", "top 0", "whole confidence 0", "whole distribution 0", "decode", "sample 0", "top 0", "whole confidence 0", "whole distribution 0"], "read within its step");
});

t.test("a failed decode fails a probed sequence's decode and sets no read", async (t) => {
  const native = new FakeNative();
  const steps = new DecodeSteps(native, 16);
  native.failNext = true;
  const probe = newProbe();
  const result = steps.decode(1, 0, Uint32Array.of(1), sampler, probe);
  await native.complete();
  await t.rejects(result, /decode failed/);
  t.equal(probe.read, undefined);
});

t.test("queued sequences decode as one batch in id order, each then sampled", async (t) => {
  const native = new FakeNative();
  const steps = new DecodeSteps(native, 16);
  const results = [5, 2, 7].map((id) => steps.decode(id, 10 + id, Uint32Array.of(id), sampler));
  await native.complete();
  t.same(await Promise.all(results), [1001, 1000, 1002], "each sequence gets the token sampled from its own logits");
  t.same(native.batches, [[2, 5, 7].map((id) => ({ sequenceId: id, position: 10 + id, tokens: [id], logits: [0] }))]);
  t.same(native.sizes, [3]);
});

t.test("a prompt longer than the batch shares steps with generating sequences and is sampled after its last part", async (t) => {
  const native = new FakeNative();
  const steps = new DecodeSteps(native, 4);
  let promptToken: number | undefined;
  const prompt = steps.decode(3, 0, Uint32Array.of(1, 2, 3, 4, 5), sampler).then((token) => (promptToken = token));
  const generating = steps.decode(1, 40, Uint32Array.of(9), sampler);
  await native.complete();
  t.equal(await generating, 1000);
  t.same(native.batches[0], [
    { sequenceId: 1, position: 40, tokens: [9], logits: [0] },
    { sequenceId: 3, position: 0, tokens: [1, 2, 3], logits: [] },
  ], "the first step: the generating sequence, then as much of the prompt as fits, without logits");
  t.equal(promptToken, undefined, "the prompt is not sampled before its last part is decoded");
  const next = steps.decode(1, 41, Uint32Array.of(1000), sampler);
  await native.complete();
  t.equal(await next, 1000);
  t.equal(await prompt, 1002);
  t.same(native.batches[1], [
    { sequenceId: 1, position: 41, tokens: [1000], logits: [0] },
    { sequenceId: 3, position: 3, tokens: [4, 5], logits: [1] },
  ], "the rest of the prompt joins the next step at its positions");
});

t.test("decode-only input resolves without sampling", async (t) => {
  const native = new FakeNative();
  const steps = new DecodeSteps(native, 8);
  const done = steps.decode(0, 0, Uint32Array.of(1, 2), undefined);
  await native.complete();
  t.equal(await done, -1);
  t.same(native.batches[0]![0]!.logits, []);
  t.notOk(native.log.some((l) => l.startsWith("sample")));
});

t.test("a KV edit asked for during a step runs after its decode and samples, before the next step", async (t) => {
  const native = new FakeNative();
  const steps = new DecodeSteps(native, 8);
  const first = steps.decode(0, 0, Uint32Array.of(1), sampler);
  while (native.batches.length === 0) await new Promise((r) => setImmediate(r));
  const edited = steps.edit(() => native.removeTokenCellsFromSequence(1, 5));
  const second = steps.decode(2, 0, Uint32Array.of(1), sampler);
  await native.complete();
  await first;
  await edited;
  await native.complete();
  await second;
  t.same(native.log, ["decode", "sample 0", "edit 1 5", "decode", "sample 0"]);
  t.equal(await steps.edit(() => "now"), "now", "with no step in flight an edit runs at once");
});

t.test("a failed decode rejects its batch's sequences and later steps go on", async (t) => {
  const native = new FakeNative();
  const steps = new DecodeSteps(native, 2);
  native.failNext = true;
  const failed = steps.decode(0, 0, Uint32Array.of(1, 2), sampler);
  const waiting = steps.decode(1, 0, Uint32Array.of(3), sampler);
  await native.complete();
  await t.rejects(failed, /decode failed/);
  await native.complete();
  t.equal(await waiting, 1000, "the sequence that did not fit the failed batch decodes in the next one");
});

t.test("with samplesFollowDecode a step queues its samples with its decode, in the same order", async (t) => {
  const native = new FakeNative();
  const steps = new DecodeSteps(native, 16, { samplesFollowDecode: true });
  const results = [4, 1].map((id) => steps.decode(id, 0, Uint32Array.of(id), sampler));
  while (native.batches.length === 0) await new Promise((r) => setImmediate(r));
  t.same(native.log, ["decode", "sample 0", "sample 1"], "the samples are queued before the decode completes");
  await native.complete();
  t.same(await Promise.all(results), [1001, 1000], "each sequence gets its own row's token");
  const decodeOnly = steps.decode(2, 1, Uint32Array.of(5), undefined);
  await native.complete();
  t.equal(await decodeOnly, -1);
  t.same(native.log.slice(3), ["decode"], "decode-only input queues no sample");
});

t.test("with samplesFollowDecode a failed decode rejects its sequences once its queued samples settle", async (t) => {
  const native = new FakeNative();
  const steps = new DecodeSteps(native, 2, { samplesFollowDecode: true });
  native.failNext = true;
  const failed = steps.decode(0, 0, Uint32Array.of(1, 2), sampler);
  const waiting = steps.decode(1, 0, Uint32Array.of(3), sampler);
  await native.complete();
  await t.rejects(failed, /decode failed/, "the decode's error, not its queued sample's");
  await native.complete();
  t.equal(await waiting, 1000, "the next step decodes and samples");
  t.same(native.log, ["decode", "sample 1", "decode", "sample 0"]);
});

t.test("close rejects queued input and waits for the step in flight", async (t) => {
  const native = new FakeNative();
  const steps = new DecodeSteps(native, 1);
  const inFlight = steps.decode(0, 0, Uint32Array.of(1), sampler);
  const queued = steps.decode(1, 0, Uint32Array.of(1), sampler);
  while (native.batches.length === 0) await new Promise((r) => setImmediate(r));
  let closed = false;
  const closing = steps.close().then(() => (closed = true));
  await t.rejects(queued, /closing/, "input that has not reached a batch is rejected");
  t.notOk(closed, "close waits while a decode is in flight");
  await native.complete();
  await closing;
  t.equal(await inFlight, 1000);
  await t.rejects(steps.decode(2, 0, Uint32Array.of(1), sampler), /closing/, "nothing is accepted after close");
  t.equal(native.batches.length, 1);
});

t.test("after a step in which a sequence stopped, the next step waits a little for a new request", async (t) => {
  t.equal(lingerMs(LINGER_MIN_STEP_MS - 0.1), 0, "short steps never wait");
  t.equal(lingerMs(50), 5, "a tenth of the step");
  t.equal(lingerMs(1_000), LINGER_MAX_MS, "at most LINGER_MAX_MS");
  t.equal(lingerMs(1_000, 0), 0, "0 turns it off");

  // Steps of 2 s on the test's clock: the linger is 200 ms of real time, long enough that three
  // turns of the event loop never outlast it on a busy machine (LINGER_MAX_MS, 10 ms, could).
  const LINGER = 200;
  let clock = 0;
  const native = new FakeNative();
  const steps = new DecodeSteps(native, 8, { now: () => clock, lingerMaxMs: LINGER });
  const step = async (ids: number[]) => {
    const results = ids.map((id) => steps.decode(id, 0, Uint32Array.of(id), sampler));
    while (native.batches.length === 0 || native.log.at(-1) !== "decode") await new Promise((r) => setImmediate(r));
    clock += 10 * LINGER;
    await native.complete();
    return Promise.all(results);
  };
  await step([0, 1]);
  const decodes = () => native.log.filter((l) => l === "decode").length;

  // Sequence 1 stopped; sequence 0 queues its next token: the step waits for a new request.
  steps.vacated();
  const lone = steps.decode(0, 1, Uint32Array.of(7), sampler);
  for (let i = 0; i < 3; i++) await new Promise((r) => setImmediate(r));
  t.equal(decodes(), 1, "no step while it waits");
  // A new request arrives: the step goes at once, with its prompt.
  steps.arriving();
  const arrived = steps.decode(1, 0, Uint32Array.of(4, 5), sampler);
  while (decodes() < 2) await new Promise((r) => setImmediate(r));
  t.same(native.batches[1]!.map((b) => b.sequenceId), [0, 1], "the new prompt joined the step it waited for");
  clock += 10 * LINGER;
  await native.complete();
  await Promise.all([lone, arrived]);

  // Without an arrival the wait ends by itself.
  steps.vacated();
  const alone = steps.decode(0, 2, Uint32Array.of(8), sampler);
  for (let i = 0; i < 3; i++) await new Promise((r) => setImmediate(r));
  t.equal(decodes(), 2, "the step waits");
  while (decodes() < 3) await new Promise((r) => setImmediate(r));
  t.pass("and starts when the wait ends, without an arrival");
  clock += 10 * LINGER;
  await native.complete();
  await alone;

  // A new request whose own prompt makes the step never waits for another one.
  steps.vacated();
  steps.arriving();
  const own = steps.decode(2, 0, Uint32Array.of(9), sampler);
  for (let i = 0; i < 3; i++) await new Promise((r) => setImmediate(r));
  t.equal(decodes(), 4, "a step with a newly arrived prompt starts at once");
  await native.complete();
  await own;
});

t.test("a thread chooser sets each step's threads and hears the cycles of steady generation only", async (t) => {
  const native = new FakeNative();
  let clock = 0;
  const asked: Array<[number, boolean]> = [];
  const cycles: Array<[number, number, number]> = [];
  // Two threads for steps with a prompt, one for generation.
  const chooser: StepThreads = {
    threadsFor: (tokens, generating) => (asked.push([tokens, generating]), generating ? 1 : 2),
    cycle: (tokens, threads, ms) => cycles.push([tokens, threads, ms]),
  };
  const steps = new DecodeSteps(native, 16, { threads: chooser, now: () => clock, lingerMaxMs: 0 });
  const step = async (inputs: Array<[id: number, tokens: number[]]>) => {
    const done = inputs.map(([id, tokens]) => steps.decode(id, 0, Uint32Array.from(tokens), sampler));
    await native.complete();
    await Promise.all(done);
    clock += 10;
  };
  await step([[0, [1, 2, 3]]]); // a prompt
  await step([[0, [5]]]);
  await step([[0, [5]]]);
  await step([[0, [5]], [1, [7]]]); // sequence 1 joins with a one-token prompt: a different set
  await step([[0, [5]], [1, [7]]]);
  await step([[1, [7]], [0, [5]]]); // queued in another order: the same sequences
  t.same(asked, [[3, false], [1, true], [1, true], [2, true], [2, true], [2, true]]);
  t.same(cycles, [[1, 1, 10], [2, 1, 10], [2, 1, 10]], "only a step followed by the same generating sequences reports its cycle, with the threads it ran on");
  t.same(native.log.filter((l) => l.startsWith("threads")), ["threads 2", "threads 1"], "the context's threads are set only when they change");
});

t.test("a sequence that stopped breaks the steady cycle, even when its slot continues at once with one token", async (t) => {
  const native = new FakeNative();
  let clock = 0;
  const cycles: number[] = [];
  const steps = new DecodeSteps(native, 16, { now: () => clock, lingerMaxMs: 5, threads: { threadsFor: () => 1, cycle: (_t, _n, ms) => cycles.push(ms) } });
  const step = async (ids: number[]) => {
    const started = native.batches.length;
    const done = ids.map((id) => steps.decode(id, 0, Uint32Array.of(1), sampler));
    while (native.batches.length === started) await new Promise((r) => setImmediate(r));
    clock += 20; // steps of 20 ms: the step after one in which a sequence ended waits 2 ms
    await native.complete();
    await Promise.all(done);
  };
  await step([0, 1]);
  await step([0, 1]);
  steps.vacated();
  await step([0, 1]);
  await step([0, 1]);
  t.same(cycles, [20, 20], "the cycle in which a sequence stopped (and the next step waited) is not reported; the ones around it are");
  // The steps are under LINGER_MIN_STEP_MS now: no wait, and the same slot's next request starts with one token.
  cycles.length = 0;
  const quick = new DecodeSteps(native, 16, { now: () => clock, threads: { threadsFor: () => 1, cycle: (_t, _n, ms) => cycles.push(ms) } });
  const one = async () => {
    const done = quick.decode(0, 0, Uint32Array.of(1), sampler);
    await native.complete();
    await done;
    clock += 5;
  };
  await one();
  await one();
  quick.vacated();
  clock += 100; // the client's next request
  await one();
  await one();
  t.same(cycles, [5, 5], "the cycle holding the time between two requests is not reported");
});
