// tier: serial (hostile cases run beside another tenant's streams, whose timing they check)
import t from "tap";
import { assertStillServing, startHostileStack } from "../../harness/hostile.js";
import { TEST_MODEL } from "../../harness/processes.js";
import { type Json, mutate as mutateWith, seeded } from "../../harness/fuzz.js";

// Seeded fuzzing of the JSON routes: a bounded number of bodies per route, each a valid body
// with hostile changes (values of the wrong type, huge or negative numbers, long and odd
// strings and ids, deep nesting, prototype-named keys, keys removed or added, broken JSON), and
// hostile ids in paths. No answer may be a 5xx and no process may die. The seed is printed:
// FUZZ_SEED=<seed> replays a run exactly. The machinery is test/harness/fuzz.ts;
// fuzz-platform.test.ts covers the platform routes the same way.

const { seed, rng } = seeded(t);
const BODIES_PER_ROUTE = Number(process.env.FUZZ_BODIES ?? 30);
const mutate = (base: Json) => mutateWith(rng, base);

const hostile = await startHostileStack(t);
const { a } = hostile;

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
