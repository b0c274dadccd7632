import t from "tap";
import { assertStillServing, startHostileStack } from "../../harness/hostile.js";
import { TEST_MODEL } from "../../harness/processes.js";

// Seeded fuzzing of the JSON routes: a bounded number of bodies per route, each a valid body
// with hostile changes (values of the wrong type, huge or negative numbers, long and odd
// strings and ids, deep nesting, prototype-named keys, keys removed or added, broken JSON), and
// hostile ids in paths. No answer may be a 5xx and no process may die. The seed is printed:
// FUZZ_SEED=<seed> replays a run exactly.

const seed = Number(process.env.FUZZ_SEED ?? Math.floor(Math.random() * 2 ** 32));
const BODIES_PER_ROUTE = Number(process.env.FUZZ_BODIES ?? 30);
t.comment(`fuzz seed ${seed} (replay with FUZZ_SEED=${seed})`);

const hostile = await startHostileStack(t);
const { a } = hostile;

/** mulberry32: a small, fast, seedable generator; the same seed gives the same bodies. */
function generator(s: number) {
  let state = s >>> 0;
  const next = () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let x = state;
    x = Math.imul(x ^ (x >>> 15), x | 1);
    x ^= x + Math.imul(x ^ (x >>> 7), x | 61);
    return ((x ^ (x >>> 14)) >>> 0) / 2 ** 32;
  };
  return {
    next,
    int: (n: number) => Math.floor(next() * n),
    pick: <T>(items: readonly T[]): T => items[Math.floor(next() * items.length)]!,
  };
}
const rng = generator(seed);

const nestedText = (depth: number) => '{"a":'.repeat(depth) + "1" + "}".repeat(depth);
/** Hostile values, as JSON text (some cannot be written as JS values: __proto__ keys, deep nesting). */
const HOSTILE_VALUES: readonly string[] = [
  "null", "true", "0", "-1", "1.5", "1e12", "2147483648", "4294967296", "9007199254740993", "1e308", "-1e308", "-0",
  '""', '"x"', JSON.stringify("x".repeat(10_000)), JSON.stringify("resp_" + "x".repeat(5 * 1024)), '"a.b*>%"', '"\\u0000"', '"\\ud800"', '"😀"',
  "[]", "{}", "[[[[[[[[]]]]]]]]", '{"__proto__":{"polluted":1}}', '{"constructor":{"prototype":1}}', '["__proto__"]',
  nestedText(70), nestedText(5_000), JSON.stringify(Array.from({ length: 300 }, (_, i) => i)), '{"type":"function","name":"f"}',
];

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type Path = Array<string | number>;

/** Paths to every value of `value` (arrays and objects included). Only valid base bodies are walked. */
function paths(value: Json, prefix: Path = []): Path[] {
  const out: Path[] = [prefix];
  if (Array.isArray(value)) value.forEach((v, i) => out.push(...paths(v, [...prefix, i])));
  else if (value && typeof value === "object") for (const [k, v] of Object.entries(value)) out.push(...paths(v, [...prefix, k]));
  return out;
}

const at = (value: Json, path: Path): Json => path.reduce<Json>((v, k) => (v as Record<string | number, Json>)[k]!, value);
const pathKey = (path: Path) => JSON.stringify(path);

/**
 * Writes `value` as JSON text with changes: at a changed path, the change's JSON text (or
 * nothing: the key or element is removed). Hostile values are text, so they can hold what a JS
 * value cannot carry through JSON.stringify (__proto__ keys, nesting thousands deep).
 */
function write(value: Json, changes: ReadonlyMap<string, string | undefined>, path: Path = []): string | undefined {
  const key = pathKey(path);
  if (changes.has(key)) return changes.get(key);
  if (Array.isArray(value)) return "[" + value.map((v, i) => write(v, changes, [...path, i])).filter((s) => s !== undefined).join(",") + "]";
  if (value && typeof value === "object")
    return "{" + Object.entries(value).map(([k, v]) => [k, write(v, changes, [...path, k])] as const).filter(([, v]) => v !== undefined).map(([k, v]) => `${JSON.stringify(k)}:${v}`).join(",") + "}";
  return JSON.stringify(value);
}

const ADDED_KEYS = ["__proto__", "constructor", "toString", "valueOf", "extra", "stream", "background", "n", "tools", "id"];

/** One hostile variant of `base`: one to three changes at random places, sometimes broken JSON. */
function mutate(base: Json): string {
  const all = paths(base);
  const objects = all.filter((p) => { const v = at(base, p); return v !== null && typeof v === "object" && !Array.isArray(v); });
  const changes = new Map<string, string | undefined>();
  const count = 1 + rng.int(3);
  for (let c = 0; c < count; c++) {
    switch (rng.int(5)) {
      case 0: { // remove a key or element (not the body itself)
        const path = rng.pick(all);
        if (path.length > 0) changes.set(pathKey(path), undefined);
        break;
      }
      case 1: { // add a key, prototype-named ones included
        const path = rng.pick(objects);
        const inner = JSON.stringify(at(base, path)).slice(1, -1);
        changes.set(pathKey(path), `{${inner}${inner ? "," : ""}${JSON.stringify(rng.pick(ADDED_KEYS))}:${rng.pick(HOSTILE_VALUES)}}`);
        break;
      }
      default: // replace a value with a hostile one
        changes.set(pathKey(rng.pick(all)), rng.pick(HOSTILE_VALUES));
    }
  }
  let text = write(base, changes) ?? "{}";
  if (rng.int(15) === 0) text = text.slice(0, rng.int(text.length)); // truncated JSON
  return text;
}

// Things of A's for the paths to name.
const conversation = await a.client.conversations.create({ items: [{ type: "message", role: "user", content: "Hello" }] });
const stored = await a.client.responses.create({ model: TEST_MODEL, input: "Once upon a time", max_output_tokens: 16 });
await a.fetch("/v1/prompts", { method: "POST", body: JSON.stringify({ name: "fuzz", model: TEST_MODEL, max_output_tokens: 16, input: "Tell me about {{topic}}" }) });

const ROUTES: Array<{ path: string; base: Json }> = [
  { path: "/v1/chat/completions", base: { model: TEST_MODEL, messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "Hi" }], max_tokens: 4, temperature: 0.5, stop: ["\n"], logit_bias: { "1": 1 }, tools: [{ type: "function", function: { name: "f", parameters: { type: "object", properties: { a: { type: "string" } } } } }], response_format: { type: "text" }, metadata: { k: "v" } } },
  { path: "/v1/responses", base: { model: TEST_MODEL, input: [{ role: "user", content: [{ type: "input_text", text: "Hi" }] }], instructions: "Be brief.", max_output_tokens: 16, previous_response_id: stored.id, tools: [{ type: "function", name: "f", parameters: { type: "object", properties: {} } }], text: { format: { type: "json_schema", name: "s", schema: { type: "object", properties: { a: { type: "string" } } } } }, metadata: { k: "v" } } },
  { path: "/v1/conversations", base: { items: [{ type: "message", role: "user", content: "Hi" }], metadata: { k: "v" } } },
  { path: `/v1/conversations/${conversation.id}/items`, base: { items: [{ type: "message", role: "user", content: "More" }, { type: "function_call_output", call_id: "c1", output: "ok" }] } },
  { path: "/v1/prompts", base: { name: "fuzzed", model: TEST_MODEL, input: "About {{topic}}", max_output_tokens: 16, description: "d" } },
  { path: "/v1/responses/fuzz", base: { inputs: { topic: "rivers" }, template: "More about {{topic}}" } },
  { path: "/v1/batches", base: { input_file_id: "file-abc", endpoint: "/v1/responses", completion_window: "24h", metadata: { k: "v" } } },
  { path: `/v1/conversations/${conversation.id}`, base: { metadata: { k: "v" } } },
];

const failures: string[] = [];
async function check(method: string, path: string, body?: string): Promise<void> {
  let status: number;
  try {
    const res = await a.fetch(path, { method, ...(body === undefined ? {} : { body }) });
    status = res.status;
    await res.arrayBuffer(); // a stream is read to its end
  } catch (err) {
    failures.push(`${method} ${path.slice(0, 80)}: no answer (${(err as Error).message}) for ${body?.slice(0, 300)}`);
    return;
  }
  if (status >= 500) failures.push(`${method} ${path.slice(0, 80)}: ${status} for ${body?.slice(0, 300)}`);
}

for (const route of ROUTES)
  t.test(`POST ${route.path}: ${BODIES_PER_ROUTE} hostile bodies, no 5xx`, async (t) => {
    const before = failures.length;
    for (let i = 0; i < BODIES_PER_ROUTE; i++) await check("POST", route.path, mutate(route.base));
    t.same(failures.slice(before), [], `no 5xx (seed ${seed})`);
  });

t.test(`hostile ids in paths: ${BODIES_PER_ROUTE} per route, no 5xx`, async (t) => {
  const before = failures.length;
  const ids = () => rng.pick(["x".repeat(129), "resp_" + "x".repeat(rng.int(3000)), "a.b", "%00", "%2E%2E", "*", ">", "%F0%9F%98%80", "..", "resp_" + "%25".repeat(200), "%ED%A0%80"]);
  for (let i = 0; i < BODIES_PER_ROUTE; i++) {
    const id = ids();
    const [method, path] = rng.pick<[string, string]>([
      ["GET", `/v1/responses/${id}`], ["DELETE", `/v1/responses/${id}`], ["GET", `/v1/responses/${id}/input_items`], ["POST", `/v1/responses/${id}/cancel`],
      ["GET", `/v1/conversations/${id}`], ["GET", `/v1/conversations/${conversation.id}/items/${id}`], ["GET", `/v1/conversations/${id}/items?after=${id}`],
      ["GET", `/v1/prompts/${id}`], ["GET", `/v1/files/${id}`], ["GET", `/v1/batches/${id}`], ["GET", `/v1/responses/${stored.id}/input_items?after=${id}&limit=${id}`],
    ]);
    await check(method, path);
  }
  t.same(failures.slice(before), [], `no 5xx (seed ${seed})`);
});

t.test("after the fuzzing, everything still serves", async (t) => {
  await assertStillServing(t, hostile);
  for (const runner of hostile.stack.runners) t.equal(runner.child.exitCode, null, "the runner is alive");
  t.same(hostile.stack.gateway.logs.filter((r) => r.level === "error"), [], "the gateway logged no error");
  if (failures.length) t.comment(`replay: FUZZ_SEED=${seed}`);
});
