import t from "tap";
import { GenerateRequest } from "../../proto/gen/tributary/v1/inference.js";
import { parseCatalog } from "../../modules/catalog/mod.js";
import { createLogger } from "../../lib/log.js";
import type { ChoiceOutcome, ChoiceSink, PreparedRequest } from "../../runners/engines/engine.js";
import { SimEngine } from "../../runners/engines/sim/sim-engine.js";
import { Scheduler, type RequestObserver } from "../../runners/scheduler/scheduler.js";

// The scheduler asks the engine which free slot a choice should run in (the llama engine: the
// one whose cache holds the longest prefix of its prompt) and takes the slot freed last when the
// engine has no preference.

const [spec] = parseCatalog("models: [{ id: t/sim, engine: sim, context_length: 200000, slots: 4, queue_limit: 4, sim: { tokens_per_second: 1000, first_token_latency_ms: 0 } }]", "t", {});

/** The sim engine, told which slot it wants per prompt, recording where each choice ran. */
class PreferringEngine extends SimEngine {
  readonly ranIn: Array<{ prompt: string; slot: number }> = [];
  constructor(private readonly wants: (prompt: string) => number | undefined) {
    super(spec!);
  }
  preferredSlot(prepared: PreparedRequest, free: readonly number[]): number {
    const slot = this.wants(prepared.request.prompt);
    return slot === undefined ? -1 : free.indexOf(slot);
  }
  override runChoice(prepared: PreparedRequest, choiceIndex: number, slot: number, sink: ChoiceSink, signal: AbortSignal): Promise<ChoiceOutcome> {
    this.ranIn.push({ prompt: prepared.request.prompt, slot });
    return super.runChoice(prepared, choiceIndex, slot, sink, signal);
  }
}

async function run(s: Scheduler, engine: SimEngine, prompt: string): Promise<void> {
  let done!: () => void;
  const finished = new Promise<void>((r) => (done = r));
  const observer: RequestObserver = { delta: () => {}, toolCall: () => {}, choiceEnd: () => {}, choiceReset: () => {}, final: () => done() };
  s.submit(await engine.prepare(GenerateRequest.fromPartial({ requestId: prompt, model: "t/sim", prompt, sampling: { maxTokens: 2, n: 1 } })), observer);
  await finished;
}

t.test("the engine's preferred free slot is taken", async (t) => {
  const engine = new PreferringEngine((p) => (p === "cached in 2" ? 2 : undefined));
  const s = new Scheduler(engine, 4, createLogger("test"));
  await run(s, engine, "anything");
  await run(s, engine, "cached in 2");
  await run(s, engine, "anything else");
  t.same(engine.ranIn.map((r) => r.slot), [0, 2, 2], "no preference: the slot freed last (0 first, then 2 after it ran there)");
});

t.test("a preference for a busy slot (not among the free ones) falls back to the slot freed last", async (t) => {
  const engine = new PreferringEngine(() => 7);
  const s = new Scheduler(engine, 4, createLogger("test"));
  await run(s, engine, "a");
  t.same(engine.ranIn.map((r) => r.slot), [0]);
});
