import t, { type Test } from "tap";
import type OpenAI from "openai";
import { sharedStack } from "../../harness/shared-stack.js";
import { TEST_MODEL } from "../../harness/processes.js";

// Prompt templates: stored per project with POST /v1/prompts, run with POST /v1/responses/{name}
// and body {inputs, template?, log?, stream?}; {{placeholders}} in instructions and input.
const stack = await sharedStack(t);
// Another project of the same organization, with a key of its own.
const other = await stack.project("other");

async function call(method: string, path: string, body?: unknown, key = stack.key) {
  const res = await fetch(stack.gateway.url + path, {
    method,
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, body: (res.headers.get("content-type")?.includes("json") ? await res.json() : await res.text()) as Record<string, unknown> & { error?: { param: string | null; code: string | null } } };
}

async function expect400(t: Test, res: Awaited<ReturnType<typeof call>>, param: string) {
  t.equal(res.status, 400, JSON.stringify(res.body));
  t.equal(res.body.error?.param, param);
}

const greeting = {
  name: "greeting",
  description: "Greets a person",
  model: TEST_MODEL,
  instructions: "You greet {{ person }} warmly.",
  input: "Say hello to {{person}} from {{city}}.",
  max_output_tokens: 20,
  metadata: { app: "demo" },
};

t.test("create, read, list, replace", async (t) => {
  const created = await call("POST", "/v1/prompts", greeting);
  t.equal(created.status, 200);
  t.match(created.body, { object: "prompt", name: "greeting", description: "Greets a person", version: 1, variables: ["city", "person"] });
  t.same((created.body.body as Record<string, unknown>).input, greeting.input);
  const got = await call("GET", "/v1/prompts/greeting");
  t.same(got.body, created.body);
  const replaced = await call("POST", "/v1/prompts", { ...greeting, max_output_tokens: 16 });
  t.equal(replaced.body.version, 2);
  t.equal(replaced.body.created_at, created.body.created_at);
  await call("POST", "/v1/prompts", { name: "support/welcome", model: TEST_MODEL, input: "Welcome {{name}}!" });
  const list = await call("GET", "/v1/prompts");
  t.same((list.body.data as Array<{ name: string }>).map((p) => p.name), ["greeting", "support/welcome"]);
  t.equal((await call("GET", "/v1/prompts/support/welcome")).body.name, "support/welcome");
});

t.test("running a template renders instructions and input with the inputs", async (t) => {
  const res = await stack.client.post<OpenAI.Responses.Response>("/responses/greeting", { body: { inputs: { person: "Ann", city: "Paris" }, log: true } });
  t.match(res.id, /^resp_/);
  t.equal(res.instructions, "You greet Ann warmly.");
  t.equal(res.max_output_tokens, 16, "the template's settings apply");
  t.same(res.metadata, { app: "demo" });
  const items = await stack.client.responses.inputItems.list(res.id);
  t.match(items.data[0], { role: "user", content: [{ type: "input_text", text: "Say hello to Ann from Paris." }] });

  const nested = await call("POST", "/v1/responses/support/welcome", { inputs: { name: 42 } });
  t.equal(nested.status, 200);
  const nestedItems = await stack.client.responses.inputItems.list(nested.body.id as string);
  t.match(nestedItems.data[0], { content: [{ text: "Welcome 42!" }] }, "numbers are written as text");
});

t.test("template overrides the stored input text for one call", async (t) => {
  const res = await call("POST", "/v1/responses/greeting", { template: "Wave at {{ person }} and {{friend}}.", inputs: { person: "Bo", friend: "Cy" } });
  t.equal(res.status, 200, JSON.stringify(res.body));
  t.equal(res.body.instructions, "You greet Bo warmly.");
  const items = await stack.client.responses.inputItems.list(res.body.id as string);
  t.match(items.data[0], { content: [{ text: "Wave at Bo and Cy." }] });
});

t.test("a template runs streamed", async (t) => {
  const res = await fetch(`${stack.gateway.url}/v1/responses/greeting`, {
    method: "POST",
    headers: { authorization: `Bearer ${stack.key}`, "content-type": "application/json" },
    body: JSON.stringify({ inputs: { person: "Di", city: "Rome" }, stream: true }),
  });
  t.match(res.headers.get("content-type"), /^text\/event-stream/);
  const types = (await res.text()).split("\n\n").filter((b) => b.startsWith("event:")).map((b) => b.split("\n")[0]!.slice(7));
  t.equal(types[0], "response.created");
  t.equal(types.at(-1), "response.incomplete");
});

t.test("inputs must match the placeholders", async (t) => {
  await expect400(t, await call("POST", "/v1/responses/greeting", { inputs: { person: "Ann" } }), "inputs.city");
  await expect400(t, await call("POST", "/v1/responses/greeting", { inputs: { person: "Ann", city: "Oslo", mood: "happy" } }), "inputs.mood");
  await expect400(t, await call("POST", "/v1/responses/greeting", { inputs: { person: { first: "Ann" }, city: "Oslo" } }), "inputs.person");
  await expect400(t, await call("POST", "/v1/responses/greeting", { inputs: { person: "Ann", city: "Oslo" }, temperature: 1 }), "temperature");
  t.equal((await call("POST", "/v1/responses/missing-one", { inputs: {} })).status, 404);
});

t.test("bad templates are refused and change nothing", async (t) => {
  await expect400(t, await call("POST", "/v1/prompts", { ...greeting, name: "bad name" }), "name");
  await expect400(t, await call("POST", "/v1/prompts", { ...greeting, name: "resp_x" }), "name");
  await expect400(t, await call("POST", "/v1/prompts", { ...greeting, stream: true }), "stream");
  await expect400(t, await call("POST", "/v1/prompts", { ...greeting, temperature: 9 }), "temperature");
  await expect400(t, await call("POST", "/v1/prompts", { ...greeting, input: [{ role: "wizard", content: "x" }] }), "input[0].role");
  await expect400(t, await call("POST", "/v1/prompts", { name: "x" }), "model");
  t.equal((await call("POST", "/v1/prompts", { ...greeting, model: "nope/none" })).status, 404);
  t.equal((await call("GET", "/v1/prompts/greeting")).body.version, 2, "unchanged");
});

t.test("templates are per project, and deleted ones are gone", async (t) => {
  t.equal((await call("GET", "/v1/prompts/greeting", undefined, other.key)).status, 404);
  t.equal((await call("POST", "/v1/responses/greeting", { inputs: { person: "A", city: "B" } }, other.key)).status, 404);
  t.same((await call("GET", "/v1/prompts", undefined, other.key)).body.data, []);
  const deleted = await call("DELETE", "/v1/prompts/greeting");
  t.same(deleted.body, { id: "greeting", object: "prompt.deleted", deleted: true });
  t.equal((await call("POST", "/v1/responses/greeting", { inputs: { person: "A", city: "B" } })).status, 404);
  t.equal((await call("DELETE", "/v1/prompts/greeting")).status, 404);
});
