// tier: slow (a stack of its own)
import t from "tap";
import { GenerateRequest } from "../../../proto/gen/tributary/v1/inference.js";
import { orderByPrefix, prefixKey } from "../../../modules/inference/mod.js";
import { startStack } from "../../harness/stack.js";
import { TEST_MODEL } from "../../harness/processes.js";

// Routing that knows the cache, with two runners of the real tiny model: requests that share a
// system prompt go to the runner that has it cached, and that runner finds it in a slot's KV
// cache (usage.prompt_tokens_details.cached_tokens); a burst sharing one prompt fills that
// runner's slots, then spreads over both runners (the load bound).

// Slow heartbeats: between two, the gateway counts its own admissions (a heartbeat in the middle
// of the burst below would replace that count with what the runner has started so far).
const stack = await startStack(t, { runners: 2, runnerEnv: { TRIBUTARY_HEARTBEAT_MS: "2000" } });
const [r1, r2] = stack.runners.map((r) => r.runnerId);

const system = (i: number) => `Rules of house ${i}: answer briefly, stay kind, and mention the river. `.repeat(6);
const messages = (i: number, question: string) => [
  { role: "system" as const, content: system(i) },
  { role: "user" as const, content: question },
];
/** The runner the routing decision prefers for prompt i when both are idle. */
const preferred = (i: number) =>
  orderByPrefix([{ runnerId: r1!, slotsTotal: 8, slotsBusy: 0, queueLength: 0 }, { runnerId: r2!, slotsTotal: 8, slotsBusy: 0, queueLength: 0 }],
    prefixKey(GenerateRequest.fromPartial({ model: TEST_MODEL, messages: messages(i, "x") })), 1.25)[0]!.runnerId;

// Two system prompts the decision sends to each runner, so that the test sees both.
const prompts: number[] = [];
for (let i = 0; prompts.length < 4; i++) {
  const want = prompts.length < 2 ? r1 : r2;
  if (preferred(i) === want) prompts.push(i);
}

t.test("requests sharing a system prompt go to one runner, which finds the prompt cached", async (t) => {
  const served = new Map<number, string[]>();
  const cached = new Map<number, number[]>();
  for (let round = 0; round < 3; round++)
    for (const i of prompts) {
      const { data, response } = await stack.client.chat.completions
        .create({ model: TEST_MODEL, messages: messages(i, `Question ${round} about ${i}?`), max_tokens: 4 })
        .withResponse();
      served.set(i, [...(served.get(i) ?? []), response.headers.get("x-tributary-runner")!]);
      cached.set(i, [...(cached.get(i) ?? []), data.usage!.prompt_tokens_details!.cached_tokens!]);
      t.ok(data.usage!.prompt_tokens_details!.cached_tokens! < data.usage!.prompt_tokens, "cached tokens are part of the prompt");
    }
  for (const i of prompts) {
    t.same(new Set(served.get(i)), new Set([preferred(i)]), `prompt ${i}: every request on ${preferred(i)}`);
    // The system prompt is well over 100 tokens: later requests find at least that much cached.
    for (const n of cached.get(i)!.slice(1)) t.ok(n > 100, `prompt ${i}: ${n} prompt tokens found cached`);
  }
  t.same(new Set(prompts.map(preferred)), new Set([r1, r2]), "both runners hold prompts");
});

t.test("a burst sharing one prompt fills its runner's slots, then spreads (the load bound)", async (t) => {
  const i = prompts[0]!;
  // Streams held open (long outputs, aborted at the end): all twelve are in flight together,
  // more than the preferred runner's 8 slots.
  const abort = new AbortController();
  const runners = await Promise.all(
    Array.from({ length: 12 }, async (_, k) => {
      const { response } = await stack.client.chat.completions
        .create({ model: TEST_MODEL, messages: messages(i, `Burst ${k}?`), max_tokens: 1000, stream: true }, { signal: abort.signal })
        .withResponse();
      return response.headers.get("x-tributary-runner")!;
    }),
  );
  abort.abort();
  const onPreferred = runners.filter((r) => r === preferred(i)).length;
  t.ok(onPreferred >= 6, `${onPreferred} of 12 on the preferred runner`);
  t.ok(onPreferred < 12, `${12 - onPreferred} of 12 spilled to the other runner`);
});
