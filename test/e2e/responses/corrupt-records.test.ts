// tier: slow (a stack of its own)
import t, { type Test } from "tap";
import { jetstream } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { startStack } from "../../harness/stack.js";
import { TEST_MODEL } from "../../harness/processes.js";
import { buckets, kvToken, subjects } from "../../../lib/nats/subjects.js";

// Stored values are read through schemas: one that does not decode (written by a bug, an old
// version, an operator's mistake) is the error of the request that reads it (a 500 without
// details, logged with its key), never a crash, and never passed on as if it were valid.
const stack = await startStack(t, {
  env: {
    TRIBUTARY_ENGINE: "sim",
    TRIBUTARY_MODEL_OVERRIDES: JSON.stringify({ [TEST_MODEL]: { sim: { tokens_per_second: 500, first_token_latency_ms: 0 } } }),
  },
});
const nc = await stack.nats.connect();
t.teardown(() => nc.close());
const kvm = new Kvm(nc);

const created = await stack.client.responses.create({ model: TEST_MODEL, input: "Hello", max_output_tokens: 16 });
const projectId = (await stack.fetch("/v1/models")).headers.get("openai-project")!;
const responseKey = (id: string) => `${kvToken(projectId)}.${kvToken(id)}`;

async function expectServerError(t: Test, path: string, key: string): Promise<void> {
  const res = await stack.fetch(path);
  t.equal(res.status, 500, `${path}: 500`);
  const body = (await res.json()) as { error: { type: string; message: string } };
  t.equal(body.error.type, "server_error");
  t.notMatch(body.error.message, key, "no internals in the answer");
  const logged = await stack.gateway.waitForLog((r) => r.msg === "request failed" && JSON.stringify(r.err ?? "").includes(key), 10_000);
  t.match(logged.err, { name: "InvalidValue" }, "logged with the key");
}

t.test("a stored response whose record does not decode is a 500 for its readers only", async (t) => {
  const kv = await kvm.open(buckets.responses);
  const key = responseKey(created.id);
  const good = (await kv.get(key))!.json<{ doc: { response: Record<string, unknown> } }>();
  t.equal(good.doc.response.status, "incomplete", "as stored by the gateway");

  // A value of the wrong shape: valid JSON, a status no response can have.
  await kv.put(key, JSON.stringify({ ...good, doc: { ...good.doc, response: { ...good.doc.response, status: "done" } } }));
  await expectServerError(t, `/v1/responses/${created.id}`, key);
  // Not JSON at all.
  await kv.put(key, "{garbage");
  await expectServerError(t, `/v1/responses/${created.id}`, key);

  const other = await stack.client.responses.create({ model: TEST_MODEL, input: "Still fine?", max_output_tokens: 16 });
  t.equal((await stack.client.responses.retrieve(other.id)).status, "incomplete", "other responses read as before");
  t.equal((await stack.fetch("/healthz")).status, 200, "the gateway is up");

  // Input items are checked too.
  await kv.put(`${responseKey(other.id)}.in.0`, JSON.stringify([{ type: "message", id: "msg_1", role: "robot", status: "completed", content: [] }]));
  await expectServerError(t, `/v1/responses/${other.id}/input_items`, `${responseKey(other.id)}.in`);
});

t.test("conversation items are read through their schema", async (t) => {
  const conversation = await stack.client.conversations.create({ items: [{ type: "message", role: "user", content: "hi" }] });
  const kv = await kvm.open(buckets.conversations);
  const itemKeys: string[] = [];
  for await (const k of await kv.keys(`${kvToken(projectId)}.${kvToken(conversation.id)}.it.>`)) itemKeys.push(k);
  t.equal(itemKeys.length, 1);
  await kv.put(itemKeys[0]!, JSON.stringify({ type: "message", id: 42 }));
  await expectServerError(t, `/v1/conversations/${conversation.id}/items`, itemKeys[0]!);
});

t.test("a background job that does not decode, or whose record does not, is dropped: the worker goes on", async (t) => {
  const js = jetstream(nc);
  await js.publish(subjects.responsesBackground, JSON.stringify({ projectId: 7 }));
  const dropped = await stack.actors.waitForLog((r) => r.msg === "malformed background job dropped", 15_000);
  t.match(dropped.err, { name: "InvalidValue" });

  const kv = await kvm.open(buckets.responses);
  await kv.put(responseKey("resp_broken"), JSON.stringify({ v: 1, ancestors: [], inputChunks: 0, doc: { response: { id: "resp_broken" } } }));
  await js.publish(subjects.responsesBackground, JSON.stringify({ projectId, responseId: "resp_broken" }));
  const undecodable = await stack.actors.waitForLog((r) => r.msg === "background response dropped: its record does not decode", 15_000);
  t.match(JSON.stringify(undecodable.err), responseKey("resp_broken"));

  const bg = await stack.client.responses.create({ model: TEST_MODEL, input: "go", background: true, max_output_tokens: 16 });
  const deadline = Date.now() + 30_000;
  let status = bg.status;
  while ((status === "queued" || status === "in_progress") && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 50));
    status = (await stack.client.responses.retrieve(bg.id)).status;
  }
  t.equal(status, "incomplete", "the next background response runs as usual");
});
