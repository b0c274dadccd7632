import t, { type Test } from "tap";
import { tokenLogprob, UNLIKELY_LOGPROB, type LogprobRead } from "../../runners/engines/llama/logprob-reads.js";

// A token's logprobs from a step's two reads: the candidates' probabilities relative to each
// other, put over the whole vocabulary by the most likely token's probability there.

const bytesOf = (token: number) => Uint8Array.of(token);
const close = (t: Test, a: number, b: number, what: string) => t.ok(Math.abs(a - b) < 1e-12, `${what}: ${a} against ${b}`);

t.test("candidates' logprobs: relative probability times the top one's over the whole vocabulary", async (t) => {
  // Over the whole vocabulary: p(5) = 0.3, p(9) = 0.15, p(2) = 0.05 (the rest elsewhere).
  const read: LogprobRead = { top: [5, 0.6, 9, 0.3, 2, 0.1], topProbability: 0.3, whole: undefined };
  const lp = tokenLogprob(9, read, 2, bytesOf);
  close(t, lp.logprob, Math.log(0.15), "the sampled token");
  t.same(Array.from(lp.bytes), [9]);
  t.same(lp.top.map((a) => Array.from(a.bytes)), [[5], [9]], "the two most likely, in order");
  close(t, lp.top[0]!.logprob, Math.log(0.3), "the most likely");
  close(t, lp.top[1]!.logprob, Math.log(0.15), "the second");
  t.same(tokenLogprob(2, read, 0, bytesOf).top, [], "no alternatives asked");
  t.equal(tokenLogprob(2, read, 5, bytesOf).top.length, 3, "no more alternatives than candidates");
});

t.test("a token outside the candidates takes its probability from the whole distribution, or the floor", async (t) => {
  const read: LogprobRead = { top: [5, 0.6, 9, 0.4], topProbability: 0.5, whole: [5, 0.5, 9, 0.33, 40, 0.002, 41, 0] };
  close(t, tokenLogprob(40, read, 1, bytesOf).logprob, Math.log(0.002), "read in full");
  t.equal(tokenLogprob(41, read, 1, bytesOf).logprob, UNLIKELY_LOGPROB, "a probability that underflowed: OpenAI's -9999");
  t.equal(tokenLogprob(40, { ...read, whole: undefined }, 1, bytesOf).logprob, UNLIKELY_LOGPROB, "not read: the floor");
});
