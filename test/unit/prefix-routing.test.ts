import t from "tap";
import { GenerateRequest } from "../../proto/gen/tributary/v1/inference.js";
import { orderByPrefix, PrefixPlacements, prefixKey, prefixRoutingOption, type RoutedRunner } from "../../modules/inference/mod.js";

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
  t.not(prefixKey(chat([["system", SYSTEM], ["user", "one"]], { model: "other" })), a, "the model is part of it");
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
  const option = prefixRoutingOption({ mode: "prefix", loadFactor: 1.5, prefixIdleMs: 60_000 }, catalog);
  t.equal(option?.loadFactor, 1.5);
  t.equal(option?.idleMs, 60_000);
  t.same([...option!.models], ["a/llama"], "the sim engine keeps no KV cache: routed by load");
  t.equal(prefixRoutingOption({ mode: "load", loadFactor: 1.5, prefixIdleMs: 60_000 }, catalog), undefined, "TRIBUTARY_ROUTING=load");
  t.equal(prefixRoutingOption({ mode: "prefix", loadFactor: 1.5, prefixIdleMs: 60_000 }, [catalog[1]!]), undefined, "no llama model");
});

// The remembered placements: bounded-load consistent hashing that counts the live prefixes a
// runner holds against its slots. The clock is passed in (ms), so nothing here waits.

const IDLE_MS = 60_000;
const placements = (maxEntries?: number) => new PrefixPlacements({ loadFactor: 1.25, idleMs: IDLE_MS, ...(maxEntries ? { maxEntries } : {}) });
const keyOf = (i: number) => prefixKey(chat([["developer", `conversation ${i}`], ["user", "begin"]]))!;
/** The first `n` keys whose first rendezvous choice among `runners` is `id`. */
const keysPreferring = (id: string, runners: RoutedRunner[], n: number, from = 0) => {
  const keys: string[] = [];
  for (let i = from; keys.length < n; i++) if (orderByPrefix(runners, keyOf(i), 1.25)[0]!.runnerId === id) keys.push(keyOf(i));
  return keys;
};
/** Routes `key` at `now` and admits it where the decision said (as the client records it). */
const route = (p: PrefixPlacements, runners: RoutedRunner[], key: string, now: number) => {
  const chosen = p.order(runners, key, now)[0]!;
  p.record(key, chosen, now);
  return chosen.runnerId;
};
const twoSlots = () => [runner("r1", 0, 0, 2), runner("r2", 0, 0, 2), runner("r3", 0, 0, 2)];

t.test("3 runners of 2 slots, 6 chains that all hash to one runner: 2 per runner, none overfilled", async (t) => {
  const runners = twoSlots();
  // The worst case of plain rendezvous hashing: every conversation's first choice is r1.
  const keys = keysPreferring("r1", runners, 6);
  for (const key of keys) t.equal(orderByPrefix(runners, key, 1.25)[0]!.runnerId, "r1", "without memory, each would go to r1");
  const p = placements();
  const homes = keys.map((key, i) => route(p, runners, key, i));
  t.same(homes.slice(0, 2), ["r1", "r1"], "the first two fill r1's slots");
  for (const id of ["r1", "r2", "r3"]) t.equal(homes.filter((h) => h === id).length, 2, `${id} holds 2 conversations`);
  // Turn after turn (each chain sequential, runners idle in between), every chain stays put.
  for (let turn = 1; turn <= 5; turn++)
    keys.forEach((key, i) => t.equal(route(p, runners, key, turn * 1000 + i), homes[i], `turn ${turn}: chain ${i} on ${homes[i]}`));
  for (const id of ["r1", "r2", "r3"]) t.equal(p.keysOn(id).length, 2, `${id}: 2 keys remembered`);
});

t.test("the same prefix sticks to its runner, also where rendezvous hashing would not put it, and under load within its bound", async (t) => {
  const runners = twoSlots();
  const [a, b, c] = keysPreferring("r1", runners, 3);
  const p = placements();
  route(p, runners, a!, 0);
  route(p, runners, b!, 1);
  const third = route(p, runners, c!, 2);
  t.not(third, "r1", "r1 is full of live prefixes: the third goes elsewhere");
  // Later r1 is idle and would have room by load: the third still goes to where its cache is.
  for (let i = 0; i < 5; i++) t.equal(p.order(runners, c!, 10 + i)[0]!.runnerId, third, "it keeps its runner");
  // Its runner busy on one slot (another request of its own): a free slot is left, it stays.
  const busy = runners.map((r) => (r.runnerId === third ? runner(third, 1, 0, 2) : r));
  t.equal(p.order(busy, c!, 20)[0]!.runnerId, third, "1 of 2 slots busy: kept");
});

t.test("a full runner spills: no room for the request, or all its slots held by other live prefixes", async (t) => {
  const runners = twoSlots();
  const [a, b, c] = keysPreferring("r1", runners, 3);
  const p = placements();
  route(p, runners, a!, 0);
  // Its home has both slots busy and 2 queued: 4 + 1 > ceil(1.25 × 5 × 2 / 6) = 3: over the bound.
  const loaded = runners.map((r) => (r.runnerId === "r1" ? runner("r1", 2, 2, 2) : r));
  const spilled = p.order(loaded, a!, 1)[0]!.runnerId;
  t.not(spilled, "r1", "the home has no room: another runner takes it");
  const second = orderByPrefix(runners.filter((r) => r.runnerId !== "r1"), a!, 1.25)[0]!.runnerId;
  t.equal(spilled, second, "the key's next runner in rendezvous order");
  // Within the bound it queues at home: 2 busy of 2 slots, nothing queued elsewhere but 4 busy on the others.
  const within = [runner("r1", 2, 0, 2), runner("r2", 2, 0, 2), runner("r3", 2, 0, 2)];
  t.equal(p.order(within, a!, 1)[0]!.runnerId, "r1", "2 + 1 <= ceil(1.25 × 7 × 2 / 6) = 3: it queues at home");

  // r1 holds a and b (live): a new key preferring r1 goes to its next runner with a slot free of live keys.
  route(p, runners, b!, 2);
  const next = orderByPrefix(runners.filter((r) => r.runnerId !== "r1"), c!, 1.25)[0]!.runnerId;
  t.equal(p.order(runners, c!, 3)[0]!.runnerId, next, "r1's slots are held: the new key's next runner");
  // Once a and b are idle past the idle time, their slots no longer hold r1 against new keys.
  t.equal(p.order(runners, c!, 2 + IDLE_MS)[0]!.runnerId, "r1", "their prefixes idle: r1 has room again");
  route(p, runners, c!, 2 + IDLE_MS);
  t.same(p.keysOn("r1").sort(), [b!, c!].sort(), "r1 remembers its 2 most recent keys; the oldest is forgotten, as its cache lost it");
  t.equal(p.homeOf(a!), undefined);
});

t.test("every runner full of live prefixes: capacity decides (the least loaded)", async (t) => {
  const p = placements();
  const runners = twoSlots();
  for (let i = 0; i < 6; i++) route(p, runners, keyOf(i), i);
  for (const id of ["r1", "r2", "r3"]) t.equal(p.keysOn(id).length, 2);
  const byLoad = [runner("r3", 0, 0, 2), runner("r1", 1, 0, 2), runner("r2", 1, 0, 2)];
  for (let i = 100; i < 110; i++) t.equal(p.order(byLoad, keyOf(i), 10)[0]!.runnerId, "r3", "the least loaded");
});

t.test("a runner that is lost re-homes its prefixes; one that joins moves none", async (t) => {
  const runners = twoSlots();
  const p = placements();
  const keys = Array.from({ length: 6 }, (_, i) => keyOf(i));
  const homes = new Map(keys.map((key, i) => [key, route(p, runners, key, i)]));
  const lost = homes.get(keys[0]!)!;
  const left = runners.filter((r) => r.runnerId !== lost);
  for (const key of keys) {
    const now = 100;
    const to = route(p, left, key, now);
    if (homes.get(key) !== lost) t.equal(to, homes.get(key), "a prefix of a staying runner stays");
    else t.not(to, lost, "a prefix of the lost runner moves");
    t.equal(p.homeOf(key) ?? to, to, "and is remembered there (or forgotten when its new runner is over its slots)");
  }
  for (const r of left) t.ok(p.keysOn(r.runnerId).length <= 2, `${r.runnerId} remembers at most its 2 slots' keys`);
  // A runner joins (the lost one back under a new id): the known prefixes stay where their caches are.
  const joined = [...left, runner("r4", 0, 0, 2)];
  const before = keys.map((key) => p.homeOf(key));
  keys.forEach((key, i) => {
    if (before[i]) t.equal(p.order(joined, key, 200)[0]!.runnerId, before[i], "a known prefix does not move to the new runner");
  });
});

t.test("the memory is bounded: slots' worth per runner, and a hard cap overall", async (t) => {
  // Many distinct prefixes (a client inventing them): never more than the runners' slots remembered.
  const runners = twoSlots();
  const p = placements();
  for (let i = 0; i < 5_000; i++) route(p, runners, keyOf(i), i);
  t.equal(p.size, 6, "3 runners × 2 slots: 6 keys remembered after 5,000");
  for (const r of runners) t.equal(p.keysOn(r.runnerId).length, 2);
  // Runners with many slots: the overall cap holds, at it exactly.
  const big = [runner("b1", 0, 0, 512), runner("b2", 0, 0, 512)];
  const capped = placements(100);
  for (let i = 0; i < 100; i++) route(capped, big, keyOf(i), i);
  t.equal(capped.size, 100, "at the cap: all kept");
  route(capped, big, keyOf(100), 100);
  t.equal(capped.size, 100, "one past the cap: the least recent is dropped");
  t.equal(capped.homeOf(keyOf(0)), undefined, "the least recently used key went first");
  t.ok(capped.homeOf(keyOf(100)), "the newest is kept");
  t.equal(capped.keysOn("b1").length + capped.keysOn("b2").length, 100, "the per-runner lists shrink with it");
  for (let i = 101; i < 3_000; i++) route(capped, big, keyOf(i), i);
  t.equal(capped.size, 100);
  // Runners that are gone keep no lists once their keys are dropped.
  const gone = placements(10);
  for (let i = 0; i < 10; i++) route(gone, [runner("old1"), runner("old2")], keyOf(i), i);
  for (let i = 10; i < 30; i++) route(gone, [runner("new1", 0, 0, 64), runner("new2", 0, 0, 64)], keyOf(i), i);
  t.same([...gone.keysOn("old1"), ...gone.keysOn("old2")], [], "nothing left of the runners that left");
});
