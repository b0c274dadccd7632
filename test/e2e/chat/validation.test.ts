import t, { type Test } from "tap";
import { AuthenticationError, BadRequestError } from "openai";
import { inProcessGateway } from "../../harness/in-process-gateway.js";
import { TEST_MODEL } from "../../harness/processes.js";

// Every bad request to POST /v1/chat/completions gets OpenAI's error envelope naming the
// parameter, before anything reaches a model: the gateway in process, its generations scripted
// (errors.test.ts has the refusals that need a runner).
const MB = 1024 * 1024;
const BODY_LIMIT = 8 * MB; // TRIBUTARY_MAX_BODY_BYTES' default
const stack = await inProcessGateway(t);
const user = [{ role: "user" as const, content: "Hello" }];

interface ErrorBody {
  error: { message: string; type: string; param: string | null; code: string | null };
}

async function expectError(
  t: Test,
  init: { method?: string; path?: string; body?: unknown; raw?: string; headers?: Record<string, string> },
  expected: { status: number; type?: string; code?: string | null; param?: string | null; message?: RegExp },
) {
  const res = await stack.fetch(init.path ?? "/v1/chat/completions", {
    method: init.method ?? "POST",
    body: init.raw ?? (init.body === undefined ? undefined : JSON.stringify(init.body)),
    headers: init.headers,
  });
  t.equal(res.status, expected.status, "status");
  t.match(res.headers.get("content-type"), /application\/json/);
  const body = (await res.json()) as ErrorBody;
  t.hasStrict(Object.keys(body.error).sort(), ["code", "message", "param", "type"], "all four keys of the envelope");
  t.type(body.error.message, "string");
  if (expected.type) t.equal(body.error.type, expected.type, "type");
  if (expected.code !== undefined) t.equal(body.error.code, expected.code, "code");
  if (expected.param !== undefined) t.equal(body.error.param, expected.param, "param");
  if (expected.message) t.match(body.error.message, expected.message, "message");
  return body;
}


t.test("malformed or empty JSON is a 400 invalid_request_error", async (t) => {
  await expectError(t, { raw: "{\"model\": " }, { status: 400, type: "invalid_request_error", code: null, message: /could not parse the JSON body/ });
  await expectError(t, { raw: "" }, { status: 400, type: "invalid_request_error" });
  await expectError(t, { raw: "[1,2]" }, { status: 400, type: "invalid_request_error" });
});

t.test("missing and invalid fields name the parameter", async (t) => {
  await expectError(t, { body: { messages: user } }, { status: 400, code: "missing_required_parameter", param: "model" });
  await expectError(t, { body: { model: TEST_MODEL } }, { status: 400, code: "missing_required_parameter", param: "messages" });
  await expectError(t, { body: { model: TEST_MODEL, messages: [] } }, { status: 400, param: "messages" });
  await expectError(t, { body: { model: TEST_MODEL, messages: [{ role: "wizard", content: "x" }] } }, { status: 400, param: "messages[0].role" });
  await expectError(t, { body: { model: TEST_MODEL, messages: [{ role: "user" }] } }, { status: 400, code: "missing_required_parameter", param: "messages[0].content" });
  await expectError(t, { body: { model: TEST_MODEL, messages: user, temperature: 2.5 } }, { status: 400, param: "temperature" });
  await expectError(t, { body: { model: TEST_MODEL, messages: user, top_p: -0.1 } }, { status: 400, param: "top_p" });
  await expectError(t, { body: { model: TEST_MODEL, messages: user, n: 0 } }, { status: 400, param: "n" });
  await expectError(t, { body: { model: TEST_MODEL, messages: user, max_tokens: "ten" } }, { status: 400, param: "max_tokens" });
  await expectError(t, { body: { model: TEST_MODEL, messages: user, stop: ["a", "b", "c", "d", "e"] } }, { status: 400, param: "stop" });
  await expectError(t, { body: { model: TEST_MODEL, messages: user, presence_penalty: 3 } }, { status: 400, param: "presence_penalty" });
  await expectError(t, { body: { model: TEST_MODEL, messages: user, logit_bias: { abc: 1 } } }, { status: 400, param: "logit_bias" });
  await expectError(t, { body: { model: TEST_MODEL, messages: user, reasoning_effort: "extreme" } }, { status: 400, param: "reasoning_effort" });
  await expectError(t, { body: { model: TEST_MODEL, messages: user, logprobs: "yes" } }, { status: 400, param: "logprobs" });
  await expectError(t, { body: { model: TEST_MODEL, messages: user, logprobs: true, top_logprobs: 21 } }, { status: 400, param: "top_logprobs" });
  await expectError(t, { body: { model: TEST_MODEL, messages: user, logprobs: true, top_logprobs: -1 } }, { status: 400, param: "top_logprobs" });
  await expectError(t, { body: { model: TEST_MODEL, messages: user, logprobs: true, top_logprobs: 2.5 } }, { status: 400, param: "top_logprobs" });
  await expectError(t, { body: { model: TEST_MODEL, messages: user, frobnicate: true } }, { status: 400, code: "unknown_parameter", param: "frobnicate" });
});

t.test("cross-field rules", async (t) => {
  await expectError(t, { body: { model: TEST_MODEL, messages: [...user, { role: "tool", tool_call_id: "call_x", content: "42" }] } }, { status: 400, param: "messages[1].tool_call_id" });
  await expectError(t, { body: { model: TEST_MODEL, messages: user, tool_choice: "required" } }, { status: 400, param: "tool_choice" });
  const tools = [{ type: "function", function: { name: "f", parameters: { type: "object", properties: {} } } }];
  await expectError(t, { body: { model: TEST_MODEL, messages: user, tools, tool_choice: { type: "function", function: { name: "g" } } } }, { status: 400, param: "tool_choice" });
  await expectError(t, { body: { model: TEST_MODEL, messages: user, tools: [{ type: "function", function: { name: "bad name!" } }] } }, { status: 400, param: "tools[0].function.name" });
  await expectError(t, { body: { model: TEST_MODEL, messages: user, tools: [...tools, ...tools] } }, { status: 400, param: "tools[1].function.name" });
  await expectError(t, { body: { model: TEST_MODEL, messages: user, response_format: { type: "json_schema", json_schema: { name: "x" } } } }, { status: 400, code: "missing_required_parameter", param: "response_format.json_schema.schema" });
  await expectError(t, { body: { model: TEST_MODEL, messages: user, stream_options: { include_usage: true } } }, { status: 400, param: "stream_options" });
  await expectError(t, { body: { model: TEST_MODEL, messages: user, top_logprobs: 3 } }, { status: 400, param: "top_logprobs" });
  await expectError(t, { body: { model: TEST_MODEL, messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "http://x/y.png" } }] }] } }, { status: 400, param: "messages[0].content[0].type" });
});

t.test("unknown model 404, unknown route 404, wrong method 405", async (t) => {
  await expectError(t, { body: { model: "acme/unknown", messages: user } }, { status: 404, code: "model_not_found", param: "model" });
  await expectError(t, { method: "GET", path: "/v1/nothing/here" }, { status: 404, type: "invalid_request_error", message: /Unknown request URL: GET \/v1\/nothing\/here/ });
  const res = await stack.fetch("/v1/chat/completions", { method: "GET" });
  t.equal(res.status, 405);
  t.equal(res.headers.get("allow"), "POST");
  t.equal(((await res.json()) as ErrorBody).error.type, "invalid_request_error");
});

t.test("a body over the limit is a 413 and nothing is processed", async (t) => {
  const huge = "x".repeat(BODY_LIMIT + 10);
  await expectError(t, { body: { model: TEST_MODEL, messages: [{ role: "user", content: huge }] } }, { status: 413, code: "request_too_large" });
  // Chunked upload without a content-length: refused once the limit is crossed.
  const stream = new ReadableStream({
    start(controller) {
      controller.enqueue(new TextEncoder().encode(`{"model":"${TEST_MODEL}","messages":[{"role":"user","content":"`));
      for (let i = 0; i < BODY_LIMIT / MB + 1; i++) controller.enqueue(new TextEncoder().encode("y".repeat(MB)));
      controller.enqueue(new TextEncoder().encode(`"}]}`));
      controller.close();
    },
  });
  const res = await fetch(stack.url + "/v1/chat/completions", {
    method: "POST", body: stream, duplex: "half", headers: { authorization: `Bearer ${stack.key}` },
  } as RequestInit).catch((e: Error) => e);
  if (res instanceof Error) t.pass("the connection was closed on the oversized body");
  else t.equal(res.status, 413);
  const ok = await stack.client.chat.completions.create({ model: TEST_MODEL, messages: user, max_tokens: 2 });
  t.equal(ok.choices.length, 1, "the gateway keeps serving");
});

t.test("authentication: missing, malformed and wrong keys are 401", async (t) => {
  await expectError(t, { body: { model: TEST_MODEL, messages: user }, headers: { authorization: "" } }, { status: 401, code: null });
  await expectError(t, { body: { model: TEST_MODEL, messages: user }, headers: { authorization: "Basic abc" } }, { status: 401 });
  await expectError(t, { body: { model: TEST_MODEL, messages: user }, headers: { authorization: "Bearer sk-wrong" } }, { status: 401, code: "invalid_api_key" });
  await expectError(t, { method: "GET", path: "/v1/models", headers: { authorization: "Bearer sk-wrong" } }, { status: 401, code: "invalid_api_key" });
  const { default: OpenAI } = await import("openai");
  const bad = new OpenAI({ apiKey: "sk-wrong", baseURL: `${stack.url}/v1`, maxRetries: 0 });
  const err = await bad.models.list().catch((e: unknown) => e);
  t.ok(err instanceof AuthenticationError);
});

t.test("the SDK maps 400s to BadRequestError with code and param", async (t) => {
  const err = await stack.client.chat.completions.create({ model: TEST_MODEL, messages: [{ role: "user" as const, content: "x" }], temperature: 9 }).catch((e: unknown) => e);
  t.ok(err instanceof BadRequestError);
  t.equal((err as BadRequestError).param, "temperature");
});

t.test("only the request that was valid reached the generation source; nothing was logged", async (t) => {
  t.equal(stack.generation.requests.length, 1, "the one completion after the oversized bodies");
  t.same(stack.logs, []);
});
