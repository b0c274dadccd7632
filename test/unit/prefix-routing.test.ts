import t from "tap";
import { GenerateRequest } from "../../proto/gen/tributary/v1/inference.js";
import { orderByPrefix, prefixKey, prefixRoutingOption, type RoutedRunner } from "../../modules/inference/mod.js";

// The routing decision that knows the cache: which prefix a request shares with others (its
// key), which runner the key prefers, and the load bound past which it goes elsewhere.

const chat = (messages: Array<[string, string]>, extra: Partial<GenerateRequest> = {}) =>
  GenerateRequest.fromPartial({ model: "m", messages: messages.map(([role, content]) => ({ role, content })), ...extra });
const SYSTEM = "You are a careful assistant. ".repeat(20);

t.test("the key: the system prompt when there is one, else the first turn", async (t) => {
  const a = prefixKey(chat([["system", SYSTEM], ["user", "one"]]));
  t.ok(a, "a key");
  t.equal(prefixKey(chat([["system", SYSTEM], ["user", "two"], ["assistant", "x"], ["user", "y"]])), a, "same system prompt, other questions: same key");
  t.not(prefixKey(chat([["system", SYSTEM + "!"], ["user", "one"]])), a, "another system prompt: another key");
  t.not(prefixKey(chat([["developer", SYSTEM], ["user", "one"]])), a, "the role is part of it");
  t.not(prefixKey(chat([["system", SYSTEM], ["user", "one"]], { tools: [{ name: "f", description: "", parametersJson: "", strict: false }] })), a, "tools are part of it");
  const turn = prefixKey(chat([["user", "Tell me about rivers."]]));
  t.equal(prefixKey(chat([["user", "Tell me about rivers."], ["assistant", "They flow."], ["user", "More?"]])), turn, "a conversation keeps its first turn's key");
  t.not(prefixKey(chat([["user", "Tell me about lakes."]])), turn);
  t.equal(prefixKey(GenerateRequest.fromPartial({ model: "m", prompt: "abc" })), prefixKey(GenerateRequest.fromPartial({ model: "m", prompt: "abc" })), "raw prompts have keys");
  t.equal(prefixKey(GenerateRequest.fromPartial({ model: "m", prompt: "" })), undefined, "nothing to share: no key");
  // Only the start of a huge system prompt is read: two that differ past it share a key.
  const huge = "x".repeat(20_000);
  t.equal(prefixKey(chat([["system", huge + "a"]])), prefixKey(chat([["system", huge + "b"]])), "the key reads a bounded prefix");
});

const runner = (runnerId: string, slotsBusy = 0, queueLength = 0, slotsTotal = 4): RoutedRunner => ({ runnerId, slotsTotal, slotsBusy, queueLength });

t.test("each key prefers one runner, the same whatever the load order, and keys spread over runners", async (t) => {
  const runners = [runner("r1"), runner("r2"), runner("r3")];
  const chosen = new Map<string, number>();
  for (let i = 0; i < 300; i++) {
    const key = prefixKey(chat([["system", `prompt ${i}`]]))!;
    const first = orderByPrefix(runners, key, 1.25)[0]!.runnerId;
    t.equal(orderByPrefix([...runners].reverse(), key, 1.25)[0]!.runnerId, first, "independent of the order given");
    chosen.set(first, (chosen.get(first) ?? 0) + 1);
  }
  t.equal(chosen.size, 3, "every runner is preferred by some keys");
  for (const [id, n] of chosen) t.ok(n > 60, `${id} preferred by ${n} of 300 keys`);
});

t.test("a runner that leaves moves only its own keys", async (t) => {
  const all = [runner("r1"), runner("r2"), runner("r3")];
  const without = all.filter((r) => r.runnerId !== "r3");
  let moved = 0;
  for (let i = 0; i < 200; i++) {
    const key = prefixKey(chat([["system", `prompt ${i}`]]))!;
    const before = orderByPrefix(all, key, 1.25)[0]!.runnerId;
    const after = orderByPrefix(without, key, 1.25)[0]!.runnerId;
    if (before !== "r3") t.equal(after, before, "a key of a staying runner stays");
    else moved++;
  }
  t.ok(moved > 0, `${moved} keys of r3 moved`);
});

t.test("room: the preferred runner keeps the key while it has a free slot, then up to its share times the factor", async (t) => {
  const key = prefixKey(chat([["system", SYSTEM]]))!;
  const preferred = orderByPrefix([runner("a"), runner("b")], key, 1.25)[0]!.runnerId;
  const other = preferred === "a" ? "b" : "a";
  // 4 slots each. Bound once the slots are full: ceil(1.25 × (work + 1) × 4 / 8).
  const at = (preferredWork: number, otherWork: number, factor = 1.25) =>
    orderByPrefix([runner(other, otherWork), runner(preferred, preferredWork)], key, factor).map((r) => r.runnerId);
  t.same(at(3, 0), [preferred, other], "3 + 1 <= 4 slots: a free slot, kept");
  t.same(at(4, 0), [other, preferred], "slots full, 4 + 1 > ceil(1.25 × 5 / 2) = 4: the other runner takes it");
  t.same(at(4, 2), [preferred, other], "slots full, 4 + 1 <= ceil(1.25 × 7 / 2) = 5: it queues there");
  t.same(at(8, 6), [preferred, other], "8 + 1 <= ceil(1.25 × 15 / 2) = 10: kept");
  t.same(at(12, 6), [other, preferred], "12 + 1 > ceil(1.25 × 19 / 2) = 12: the other runner takes it");
  t.same(at(4, 0, 3), [preferred, other], "a higher factor keeps it longer: 5 <= ceil(3 × 5 / 2) = 8");
});

t.test("a spilled request goes to the next runner in the key's order that has room", async (t) => {
  const key = prefixKey(chat([["system", SYSTEM]]))!;
  const idle = [runner("x"), runner("y"), runner("z")];
  const first = orderByPrefix(idle, key, 1.25)[0]!.runnerId;
  // Rendezvous hashing: the key's second choice is its first among the others.
  const second = orderByPrefix(idle.filter((r) => r.runnerId !== first), key, 1.25)[0]!.runnerId;
  // The first choice full and over its bound (12 in flight of 4 slots: ceil(1.25 × 13 / 3) = 6).
  const busy = idle.map((r) => (r.runnerId === first ? runner(r.runnerId, 4, 8) : r));
  for (let i = 0; i < 5; i++) t.equal(orderByPrefix(busy, key, 1.25)[0]!.runnerId, second, "the key's second choice, not just any runner");
});

t.test("slots weigh the share: a bigger runner takes more before spilling", async (t) => {
  // "big" has 12 of the 16 slots, "small" 4. All work in flight is on the preferred runner.
  const keyPreferring = (id: string) => {
    for (let i = 0; ; i++) {
      const key = prefixKey(chat([["system", `prompt ${i}`]]))!;
      if (orderByPrefix([runner("big", 0, 0, 12), runner("small", 0, 0, 4)], key, 1.25)[0]!.runnerId === id) return key;
    }
  };
  const first = (key: string, bigWork: number, smallWork: number) =>
    orderByPrefix([runner("big", bigWork, 0, 12), runner("small", smallWork, 0, 4)], key, 1.25)[0]!.runnerId;
  const toSmall = keyPreferring("small");
  t.equal(first(toSmall, 0, 3), "small", "3 + 1 <= 4 slots: kept");
  t.equal(first(toSmall, 0, 4), "big", "slots full, 4 + 1 > ceil(1.25 × 5 × 4/16) = 2: spills");
  const toBig = keyPreferring("big");
  t.equal(first(toBig, 11, 0), "big", "11 + 1 <= 12 slots: kept");
  t.equal(first(toBig, 14, 0), "big", "slots full, 14 + 1 <= ceil(1.25 × 15 × 12/16) = 15: kept");
  t.equal(first(toBig, 15, 0), "small", "15 + 1 > ceil(1.25 × 16 × 12/16) = 15: spills");
});

t.test("no key, or one runner: load order unchanged", async (t) => {
  const byLoad = [runner("x", 0), runner("y", 3)];
  t.same(orderByPrefix(byLoad, undefined, 1.25), byLoad);
  t.same(orderByPrefix([runner("x", 9)], "k", 1.25).map((r) => r.runnerId), ["x"]);
});

t.test("prefix routing applies to models whose engine has a cache to reuse", async (t) => {
  const catalog = [{ id: "a/llama", engine: "llama" as const }, { id: "b/sim", engine: "sim" as const }];
  const option = prefixRoutingOption({ mode: "prefix", loadFactor: 1.5 }, catalog);
  t.equal(option?.loadFactor, 1.5);
  t.same([...option!.models], ["a/llama"], "the sim engine keeps no KV cache: routed by load");
  t.equal(prefixRoutingOption({ mode: "load", loadFactor: 1.5 }, catalog), undefined, "TRIBUTARY_ROUTING=load");
  t.equal(prefixRoutingOption({ mode: "prefix", loadFactor: 1.5 }, [catalog[1]!]), undefined, "no llama model");
});
