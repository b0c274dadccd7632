import t, { type Test } from "tap";
import { sharedStack } from "../../harness/shared-stack.js";
import { TEST_MODEL } from "../../harness/processes.js";

// A bad input to POST /v1/responses through the real processes: OpenAI's error envelope naming the
// parameter (a runner's refusal among them), and nothing changed. Every other bad parameter is
// checked in process (validation.test.ts).
const stack = await sharedStack(t);

async function expectError(t: Test, body: unknown, expected: { status?: number; param?: string | null; code?: string | null }, raw?: string) {
  const res = await stack.fetch("/v1/responses", { method: "POST", body: raw ?? JSON.stringify(body) });
  const json = (await res.json()) as { error: { message: string; type: string; param: string | null; code: string | null } };
  t.equal(res.status, expected.status ?? 400, `${JSON.stringify(body)?.slice(0, 120)} -> ${json.error.message}`);
  t.same(Object.keys(json.error).sort(), ["code", "message", "param", "type"]);
  t.equal(json.error.type, res.status >= 500 ? "server_error" : "invalid_request_error");
  if (expected.param !== undefined) t.equal(json.error.param, expected.param, "param");
  if (expected.code !== undefined) t.equal(json.error.code, expected.code, "code");
}

t.test("malformed JSON and a bad parameter", async (t) => {
  await expectError(t, undefined, { code: null }, "{\"model\": ");
  await expectError(t, { model: TEST_MODEL, input: "Hello", temperature: 3 }, { param: "temperature" });
});

t.test("a refused request changes nothing", async (t) => {
  const conv = await stack.client.conversations.create({ items: [{ role: "user", content: "first" }] });
  await expectError(t, { model: TEST_MODEL, conversation: conv.id, input: [{ role: "user", content: "x" }, { type: "function_call_output", call_id: "nope", output: "y" }] }, { param: "input[1].call_id" });
  await expectError(t, { model: TEST_MODEL, conversation: conv.id, input: "x".repeat(20_000) }, { code: "context_length_exceeded", param: "input" });
  const items = await stack.client.conversations.items.list(conv.id);
  t.equal(items.data.length, 1, "the conversation did not grow");
});
