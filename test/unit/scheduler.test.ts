import t from "tap";
import { ErrorCode, FinishReason, GenerateRequest, Priority } from "../../proto/gen/tributary/v1/inference.js";
import { parseCatalog } from "../../modules/catalog/mod.js";
import { createLogger } from "../../lib/log.js";
import { SimEngine } from "../../runners/engines/sim/sim-engine.js";
import { AdmissionError, Scheduler, type RequestObserver } from "../../runners/scheduler/scheduler.js";

// The scheduler over the sim engine (a real engine with deterministic timing): slots, queue
// bound, priorities, cancellation of queued and running work, deadlines, drain.
const [spec] = parseCatalog("models: [{ id: t/sim, engine: sim, context_length: 200000, slots: 2, queue_limit: 2, sim: { tokens_per_second: 1000, first_token_latency_ms: 0 } }]", "t", {});
const log = createLogger("test");

function request(id: string, opts: { maxTokens?: number; n?: number; priority?: Priority; deadline?: number } = {}): GenerateRequest {
  return GenerateRequest.fromPartial({
    requestId: id, model: "t/sim", prompt: "hello world",
    sampling: { maxTokens: opts.maxTokens ?? 5, n: opts.n ?? 1 },
    priority: opts.priority ?? Priority.PRIORITY_INTERACTIVE, deadlineUnixMs: opts.deadline ?? 0,
  });
}

function observe(order: string[], id: string) {
  const result = { text: "", ends: [] as FinishReason[], error: undefined as ErrorCode | undefined, tokens: 0, resets: 0 };
  let resolve!: () => void;
  const done = new Promise<void>((r) => (resolve = r));
  const observer: RequestObserver = {
    delta: (_c, text) => {
      if (!result.text) order.push(id);
      result.text += text;
    },
    toolCall: () => {},
    choiceEnd: (_c, reason) => result.ends.push(reason),
    choiceReset: () => {
      result.text = "";
      result.resets++;
    },
    final: (_p, completion, error) => {
      result.tokens = completion;
      result.error = error?.code;
      resolve();
    },
  };
  return { observer, result, done };
}

async function refused(t: import("tap").Test, attempt: () => Promise<unknown>, code: ErrorCode) {
  try {
    await attempt();
    t.fail("admitted");
  } catch (e) {
    t.ok(e instanceof AdmissionError, "an AdmissionError");
    t.equal((e as AdmissionError).code, code);
  }
}

async function submit(s: Scheduler, engine: SimEngine, order: string[], req: GenerateRequest) {
  const o = observe(order, req.requestId);
  const position = s.submit(await engine.prepare(req), o.observer);
  return { ...o, position };
}

t.test("slots run at once, the queue is bounded, interactive work goes before batch work", async (t) => {
  const engine = new SimEngine(spec!);
  const s = new Scheduler(engine, spec!.queueLimit, log);
  const order: string[] = [];
  const a = await submit(s, engine, order, request("a", { maxTokens: 30 }));
  const b = await submit(s, engine, order, request("b", { maxTokens: 30 }));
  t.equal(a.position, 0);
  t.equal(b.position, 0);
  const batch = await submit(s, engine, order, request("batch", { priority: Priority.PRIORITY_BATCH }));
  const c = await submit(s, engine, order, request("c"));
  t.equal(batch.position, 1);
  t.equal(c.position, 1, "interactive work queues behind interactive work only");
  t.same(s.stats, { slotsTotal: 2, slotsBusy: 2, queueLength: 2, queueLimit: 2, batchRunning: 0, batchQueueLength: 1 });
  const d = await submit(s, engine, order, request("d"));
  t.equal(d.position, 2);
  await refused(t, () => submit(s, engine, order, request("e")), ErrorCode.ERROR_CODE_QUEUE_FULL);
  await Promise.all([a.done, b.done, c.done, d.done, batch.done]);
  t.ok(order.indexOf("c") < order.indexOf("batch"), `interactive c started before the batch request: ${order.join(",")}`);
  t.equal(a.result.tokens, 30);
  t.same(a.result.ends, [FinishReason.FINISH_REASON_LENGTH]);
});

t.test("cancel: a running request frees its slot, a queued one never starts", async (t) => {
  const engine = new SimEngine(spec!);
  const s = new Scheduler(engine, 4, log);
  const order: string[] = [];
  const long = await submit(s, engine, order, request("long", { maxTokens: 5000 }));
  const long2 = await submit(s, engine, order, request("long2", { maxTokens: 5000 }));
  const queued = await submit(s, engine, order, request("queued"));
  t.ok(s.cancel("queued"));
  await queued.done;
  t.equal(queued.result.error, ErrorCode.ERROR_CODE_CANCELLED);
  t.equal(queued.result.tokens, 0);
  await new Promise((r) => setTimeout(r, 20));
  t.ok(s.cancel("long"));
  await long.done;
  t.equal(long.result.error, ErrorCode.ERROR_CODE_CANCELLED);
  t.ok(long.result.tokens < 5000);
  t.equal(s.stats.slotsBusy, 1, "the slot is free");
  t.notOk(s.cancel("long"), "cancelling twice is a no-op");
  s.cancel("long2");
  await long2.done;
});

t.test("n choices each take a slot; deadlines abandon work", async (t) => {
  const engine = new SimEngine(spec!);
  const s = new Scheduler(engine, 4, log);
  const order: string[] = [];
  const two = await submit(s, engine, order, request("two", { n: 2, maxTokens: 3 }));
  await two.done;
  t.equal(two.result.ends.length, 2);
  t.equal(two.result.tokens, 6);
  const late = await submit(s, engine, order, request("late", { maxTokens: 100_000, deadline: Date.now() + 50 }));
  await late.done;
  t.equal(late.result.error, ErrorCode.ERROR_CODE_DEADLINE_EXCEEDED);
});

t.test("drain waits for in-flight work and refuses new work", async (t) => {
  const engine = new SimEngine(spec!);
  const s = new Scheduler(engine, 4, log);
  const order: string[] = [];
  const r = await submit(s, engine, order, request("r", { maxTokens: 20 }));
  const drained = s.drain(5000);
  await refused(t, () => submit(s, engine, order, request("new")), ErrorCode.ERROR_CODE_DRAINING);
  await drained;
  t.equal(r.result.tokens, 20, "the in-flight request completed");
  const s2 = new Scheduler(engine, 4, log);
  const stuck = await submit(s2, engine, order, request("stuck", { maxTokens: 100_000 }));
  await s2.drain(30);
  await stuck.done;
  t.equal(stuck.result.error, ErrorCode.ERROR_CODE_DRAINING, "past the drain timeout, work is aborted with a reason");
});

t.test("batch work has its own queue bound: it never makes an interactive request bounce", async (t) => {
  const engine = new SimEngine(spec!);
  const s = new Scheduler(engine, 2, log);
  const order: string[] = [];
  const batch = [];
  for (let i = 0; i < 4; i++) batch.push(await submit(s, engine, order, request(`b${i}`, { maxTokens: 50, priority: Priority.PRIORITY_BATCH })));
  t.same(batch.map((b) => b.position), [0, 0, 1, 2], "two run, two wait");
  await refused(t, () => submit(s, engine, order, request("b-over", { priority: Priority.PRIORITY_BATCH })), ErrorCode.ERROR_CODE_QUEUE_FULL);
  const i1 = await submit(s, engine, order, request("i1", { maxTokens: 3 }));
  const i2 = await submit(s, engine, order, request("i2", { maxTokens: 3 }));
  t.ok(i1.position <= 1 && i2.position <= 1, `interactive requests are admitted past a full batch queue, each waiting at most for a preemption (positions ${i1.position}, ${i2.position})`);
  await Promise.all([...batch.map((b) => b.done), i1.done, i2.done]);
  for (const b of batch) t.equal(b.result.tokens, 50, "every batch request completed in full");
});

t.test("an interactive request preempts a running batch choice, which restarts from the beginning", async (t) => {
  const engine = new SimEngine(spec!);
  const s = new Scheduler(engine, 4, log);
  const order: string[] = [];
  const b1 = await submit(s, engine, order, request("b1", { maxTokens: 300, priority: Priority.PRIORITY_BATCH }));
  const b2 = await submit(s, engine, order, request("b2", { maxTokens: 300, priority: Priority.PRIORITY_BATCH }));
  await new Promise((r) => setTimeout(r, 50));
  t.equal(s.stats.batchRunning, 2);
  const startedAt = performance.now();
  let firstTokenAt = 0;
  const i = observe(order, "i");
  const observer = { ...i.observer, delta: (c: number, text: string, n: number) => {
    firstTokenAt ||= performance.now();
    i.observer.delta(c, text, n);
  } };
  s.submit(await engine.prepare(request("i", { maxTokens: 5 })), observer);
  await i.done;
  t.ok(firstTokenAt - startedAt < 100, `the interactive request started within a decode step or two (${(firstTokenAt - startedAt).toFixed(1)} ms), not after a batch request`);
  await Promise.all([b1.done, b2.done]);
  t.equal(b1.result.resets + b2.result.resets, 1, "exactly one batch choice was preempted");
  const preempted = b1.result.resets ? b1 : b2;
  t.equal(preempted.result.tokens, 300, "the preempted choice ran again to its full length");
  t.equal(preempted.result.text.split(" ").length, 300, "its output holds only the restarted run");
  t.same(preempted.result.ends, [FinishReason.FINISH_REASON_LENGTH], "one end per choice");
});
