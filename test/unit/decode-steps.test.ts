import t from "tap";
import { DecodeSteps, LINGER_MAX_MS, LINGER_MIN_STEP_MS, lingerMs } from "../../runners/engines/llama/decode-steps.js";

// Generating sequences step together: a sequence that wants its next token waits until no step
// is in flight, and the waiting ones are released together, in sequence id order (the order
// llama.cpp needs to decode them as one micro-batch).

const turn = () => new Promise<void>((resolve) => setImmediate(resolve));

t.test("a lone generating sequence never waits", async (t) => {
  const steps = new DecodeSteps();
  steps.join();
  t.equal(steps.ready(0), undefined);
  steps.started();
  steps.finished();
  t.equal(steps.ready(0), undefined);
  steps.leave();
});

t.test("members wait for the step in flight, then go together in id order", async (t) => {
  const steps = new DecodeSteps();
  const released: number[] = [];
  // Members 5, 2 and 7 generate; their tokens of this step are in flight.
  for (const _ of [5, 2, 7]) {
    steps.join();
    steps.started();
  }
  // 7's token comes back first and it asks for its next one: 5 and 2 are still in flight.
  steps.finished();
  void steps.ready(7)!.then(() => released.push(7));
  await turn();
  await turn();
  t.same(released, [], "not released while tokens of the step are in flight");
  steps.finished();
  void steps.ready(5)!.then(() => released.push(5));
  steps.finished();
  void steps.ready(2)!.then(() => released.push(2));
  for (let i = 0; i < 10; i++) await Promise.resolve();
  t.same(released, [], "released on a later turn (after node-llama-cpp's loop has seen its queue empty), not within this one");
  await turn();
  await turn();
  t.same(released, [2, 5, 7], "all released, in id order");
});

t.test("a member busy elsewhere is not waited for, nor one whose decode failed", async (t) => {
  const steps = new DecodeSteps();
  const released: number[] = [];
  for (const _ of [0, 1, 2]) steps.join();
  // 0 and 1 have a token in flight; 2 is busy (its decoder awaits a KV edit) and asks for nothing.
  steps.started();
  steps.started();
  steps.finished();
  void steps.ready(0)!.then(() => released.push(0));
  steps.finished();
  void steps.ready(1)!.then(() => released.push(1));
  await turn();
  await turn();
  t.same(released, [0, 1], "member 2 is not waited for");

  // 0 and 1 in flight again; 1's decode fails (its step ends) and it leaves: 0 goes on.
  steps.started();
  steps.started();
  steps.finished();
  void steps.ready(0)!.then(() => released.push(0));
  steps.finished();
  steps.leave();
  await turn();
  await turn();
  t.same(released, [0, 1, 0]);
});

t.test("after a step that vacated a slot, the release waits for a new request a little", async (t) => {
  t.equal(lingerMs(LINGER_MIN_STEP_MS - 0.1), 0, "short steps never wait");
  t.equal(lingerMs(50), 5, "a tenth of the step");
  t.equal(lingerMs(1_000), LINGER_MAX_MS, "at most LINGER_MAX_MS");

  let clock = 0;
  const steps = new DecodeSteps(() => clock);
  const released: number[] = [];
  for (const _ of [0, 1, 2]) {
    steps.join();
    steps.started();
  }
  clock = 100;
  // 1's request ends with this step (it leaves); 0 and 2 want their next token.
  steps.finished();
  steps.leave();
  steps.finished();
  void steps.ready(0)!.then(() => released.push(0));
  steps.finished();
  void steps.ready(2)!.then(() => released.push(2));
  await turn();
  await turn();
  t.same(released, [], "held for the vacated slot");
  // A new request's prompt arrives (for slot 1): the held release goes, and the prompt joins it.
  steps.arriving();
  await turn();
  await turn();
  t.same(released, [0, 2], "released when the new sequence arrives");

  // The new sequence joins the steps after its prompt; its request ends in the next step and no
  // new one comes: the release goes when the wait ends.
  steps.join();
  for (const _ of [0, 1, 2]) steps.started();
  clock = 200;
  steps.finished();
  steps.leave();
  steps.finished();
  void steps.ready(0)!.then(() => released.push(0));
  steps.finished();
  void steps.ready(2)!.then(() => released.push(2));
  await turn();
  await turn();
  t.same(released, [0, 2], "held");
  await new Promise((resolve) => setTimeout(resolve, LINGER_MAX_MS * 3));
  t.same(released, [0, 2, 0, 2], "released after the wait");

  // A step that vacated nothing is not held.
  steps.started();
  steps.started();
  clock = 300;
  steps.finished();
  void steps.ready(0)!.then(() => released.push(0));
  steps.finished();
  void steps.ready(2)!.then(() => released.push(2));
  await turn();
  await turn();
  t.same(released, [0, 2, 0, 2, 0, 2]);
});
