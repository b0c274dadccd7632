import t, { type Test } from "tap";
import { sharedStack } from "../../harness/shared-stack.js";
import { TEST_MODEL } from "../../harness/processes.js";

// Chat completions' refusals through the real processes: the model's limits (the runner's
// tokenizer, vocabulary and slots), a bad parameter, and the health probes. Every other bad
// request is checked in process (validation.test.ts).
const stack = await sharedStack(t);
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


t.test("a bad parameter through the real processes", async (t) => {
  await expectError(t, { body: { model: TEST_MODEL, messages: user, temperature: 2.5 } }, { status: 400, param: "temperature" });
});

t.test("tool parameters the runner cannot turn into a grammar name the tool", async (t) => {
  await expectError(t, { body: { model: TEST_MODEL, messages: user, tools: [{ type: "function", function: { name: "f", parameters: { type: "bogus" } } }] } }, { status: 400, param: "tools[0].function.parameters" });
});

t.test("model limits: output budget, context length, vocabulary, slots", async (t) => {
  await expectError(t, { body: { model: TEST_MODEL, messages: user, max_tokens: 5000 } }, { status: 400, param: "max_tokens", message: /at most 1024/ });
  const long = "Once upon a time there was a little dog who liked to run in the park. ".repeat(150);
  await expectError(t, { body: { model: TEST_MODEL, messages: [{ role: "user", content: long }] } }, { status: 400, code: "context_length_exceeded", message: /maximum context length is 2048 tokens/ });
  const medium = "Once upon a time there was a cat. ".repeat(100);
  await expectError(t, { body: { model: TEST_MODEL, messages: [{ role: "user", content: medium }], max_tokens: 1024 } }, { status: 400, code: "context_length_exceeded" });
  await expectError(t, { body: { model: TEST_MODEL, messages: user, logit_bias: { "99999": 5 } } }, { status: 400, param: "logit_bias" });
  await expectError(t, { body: { model: TEST_MODEL, messages: user, n: 9 } }, { status: 400, param: "n" });
});

t.test("health probes need no key", async (t) => {
  const res = await fetch(stack.gateway.url + "/healthz");
  t.equal(res.status, 200);
  const ready = await fetch(stack.gateway.url + "/readyz");
  t.equal(ready.status, 200);
});
