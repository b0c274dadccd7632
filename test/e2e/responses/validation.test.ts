import t, { type Test } from "tap";
import { inProcessGateway } from "../../harness/in-process-gateway.js";
import { TEST_MODEL } from "../../harness/processes.js";

// Every bad input to POST /v1/responses gets OpenAI's error envelope naming the parameter, before
// anything reaches a model: the gateway in process, its generations scripted (errors.test.ts has
// what needs real processes).
const stack = await inProcessGateway(t);

async function expectError(t: Test, body: unknown, expected: { status?: number; param?: string | null; code?: string | null }, raw?: string) {
  const res = await stack.fetch("/v1/responses", { method: "POST", body: raw ?? JSON.stringify(body) });
  const json = (await res.json()) as { error: { message: string; type: string; param: string | null; code: string | null } };
  t.equal(res.status, expected.status ?? 400, `${JSON.stringify(body)?.slice(0, 120)} -> ${json.error.message}`);
  t.same(Object.keys(json.error).sort(), ["code", "message", "param", "type"]);
  t.equal(json.error.type, res.status >= 500 ? "server_error" : "invalid_request_error");
  if (expected.param !== undefined) t.equal(json.error.param, expected.param, "param");
  if (expected.code !== undefined) t.equal(json.error.code, expected.code, "code");
}

const ok = { model: TEST_MODEL, input: "Hello" };

t.test("malformed bodies", async (t) => {
  await expectError(t, undefined, { code: null }, "{\"model\": ");
  await expectError(t, undefined, {}, "");
  await expectError(t, undefined, {}, "[]");
});

t.test("top-level fields", async (t) => {
  await expectError(t, { input: "x" }, { code: "missing_required_parameter", param: "model" });
  await expectError(t, { ...ok, model: "" }, { param: "model" });
  await expectError(t, { ...ok, model: "nope/none" }, { status: 404, code: "model_not_found", param: "model" });
  await expectError(t, { ...ok, frobnicate: 1 }, { code: "unknown_parameter", param: "frobnicate" });
  await expectError(t, { model: TEST_MODEL, input: 42 }, { param: "input" });
  await expectError(t, { model: TEST_MODEL, input: [] }, { code: "missing_required_parameter", param: "input" });
  await expectError(t, { model: TEST_MODEL }, { code: "missing_required_parameter", param: "input" });
  await expectError(t, { ...ok, temperature: 3 }, { param: "temperature" });
  await expectError(t, { ...ok, top_p: 1.5 }, { param: "top_p" });
  await expectError(t, { ...ok, max_output_tokens: 8 }, { param: "max_output_tokens" });
  await expectError(t, { ...ok, max_output_tokens: 4096 }, { param: "max_output_tokens" });
  await expectError(t, { ...ok, max_output_tokens: "many" }, { code: "invalid_type", param: "max_output_tokens" });
  await expectError(t, { ...ok, max_tool_calls: -1 }, { param: "max_tool_calls" });
  await expectError(t, { ...ok, parallel_tool_calls: "yes" }, { param: "parallel_tool_calls" });
  await expectError(t, { ...ok, truncation: "sometimes" }, { param: "truncation" });
  await expectError(t, { ...ok, text: { verbosity: "loud" } }, { param: "text.verbosity" });
  await expectError(t, { ...ok, reasoning: { effort: "extreme" } }, { param: "reasoning.effort" });
  await expectError(t, { ...ok, metadata: Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, "v"])) }, { param: "metadata" });
  await expectError(t, { ...ok, metadata: { k: "v".repeat(513) } }, { param: "metadata.k" });
  await expectError(t, { ...ok, tool_choice: "sometimes" }, { param: "tool_choice" });
  await expectError(t, { ...ok, stream_options: { include_obfuscation: false } }, { param: "stream_options" });
  await expectError(t, { ...ok, top_logprobs: 21 }, { param: "top_logprobs" });
  await expectError(t, { ...ok, top_logprobs: -1 }, { param: "top_logprobs" });
  await expectError(t, { ...ok, include: ["message.output_text.logprobs", 7] }, { param: "include[1]" });
  await expectError(t, { ...ok, include: ["everything"] }, { param: "include[0]" });
  await expectError(t, { ...ok, conversation: 7 }, { param: "conversation" });
  await expectError(t, { ...ok, previous_response_id: 7 }, { param: "previous_response_id" });
  await expectError(t, { ...ok, store: "no" }, { param: "store" });
  await expectError(t, { ...ok, background: 1 }, { param: "background" });
  await expectError(t, { ...ok, service_tier: "gold" }, { param: "service_tier" });
  await expectError(t, { ...ok, prompt: { id: "pmpt_1" } }, { code: "unsupported_parameter", param: "prompt" });
  await expectError(t, { ...ok, instructions: 5 }, { param: "instructions" });
});

t.test("input items", async (t) => {
  const item = (x: unknown) => ({ model: TEST_MODEL, input: [x] });
  await expectError(t, item("hello"), { param: "input[0]", code: "invalid_type" });
  await expectError(t, item({ role: "wizard", content: "x" }), { param: "input[0].role" });
  await expectError(t, item({ role: "user" }), { code: "missing_required_parameter", param: "input[0].content" });
  await expectError(t, item({ type: "message", role: "user", content: [{ type: "picture" }] }), { param: "input[0].content[0].type" });
  await expectError(t, item({ type: "message", role: "user", content: [{ type: "input_text" }] }), { param: "input[0].content[0].text" });
  await expectError(t, item({ role: "user", content: [{ type: "input_image", image_url: "https://example.com/cat.png" }] }), { code: "unsupported_value", param: "input[0].content[0].type" });
  await expectError(t, item({ type: "teleport" }), { param: "input[0].type" });
  await expectError(t, item({ type: "function_call_output", output: "x" }), { code: "missing_required_parameter", param: "input[0].call_id" });
  await expectError(t, item({ type: "function_call", call_id: "c", name: "f" }), { code: "missing_required_parameter", param: "input[0].arguments" });
  await expectError(t, item({ type: "item_reference", id: "msg_nope" }), { param: "input[0].id" });
  await expectError(t, { model: TEST_MODEL, input: [{ role: "user", content: "x" }, { type: "function_call_output", call_id: "call_x", output: "y" }] }, { param: "input[1].call_id" });
});

t.test("authentication and routing", async (t) => {
  const noKey = await fetch(`${stack.url}/v1/responses`, { method: "POST", body: JSON.stringify(ok) });
  t.equal(noKey.status, 401);
  const wrongKey = await fetch(`${stack.url}/v1/responses`, { method: "POST", body: JSON.stringify(ok), headers: { authorization: "Bearer sk-wrong" } });
  t.equal(wrongKey.status, 401);
  const get = await stack.fetch("/v1/responses");
  t.equal(get.status, 405);
  t.match(get.headers.get("allow"), /POST/);
});

t.test("nothing was generated, nothing was logged", async (t) => {
  t.same(stack.generation.requests.map((r) => r.requestId), [], "no request reached the generation source");
  t.same(stack.logs, [], "no warning or error logged");
});
