// tier: serial (hostile cases run beside another tenant's streams, whose timing they check)
import t from "tap";
import { MAX_ID_LENGTH } from "../../../lib/ids.js";
import { createBatch, readJsonlFile, waitForBatch, type LineSpec } from "../../harness/batches.js";
import { expectError, hostileCase, startHostileStack } from "../../harness/hostile.js";
import { TEST_MODEL } from "../../harness/processes.js";

// Hostile ids: too long, empty or malformed ids in paths and bodies, for every store (responses,
// conversations and their items, prompt templates, ids inside /v1/responses batch lines). Each
// is refused by the one id rule (lib/ids.ts) before it becomes a KV key: a 404 on a path, a 400
// naming the parameter in a body. A 5 KB id used to push a KV request past nats-server's 4 KiB
// protocol line, which closed the gateway's connection and ended another organization's streams.
// Each case also checks that a stream of organization B running meanwhile finished untouched.

const hostile = await startHostileStack(t);
const { a } = hostile;

const KB = 1024;
/** Ids a path can carry (the request head is at most 4 KiB): just past the rule, long, odd. */
const BAD_PATH_IDS = ["x".repeat(MAX_ID_LENGTH + 1), "resp_" + "x".repeat(3 * KB), "a.b", "a*b", "a>b", "%00", "%F0%9F%98%80", "a%2Eb"];
/** Ids a body can carry. */
const BAD_BODY_IDS = ["x".repeat(MAX_ID_LENGTH + 1), "x".repeat(5 * KB), "x".repeat(10 * KB), "", "a.b", "a\u0000b", "😀", "a b"];

const post = (path: string, body: unknown) => a.fetch(path, { method: "POST", body: JSON.stringify(body) });
const notFound = { status: 404, code: null } as const;

// Things of A's to aim at.
const conversation = await a.client.conversations.create({ items: [{ type: "message", role: "user", content: "Hello" }] });
const stored = await a.client.responses.create({ model: TEST_MODEL, input: "Once upon a time", max_output_tokens: 16 });

hostileCase(t, hostile, "response ids in paths: too long or malformed are 404s", async (t) => {
  for (const id of BAD_PATH_IDS) {
    const what = `id of ${id.length} characters ${JSON.stringify(id.slice(0, 12))}`;
    await expectError(t, `GET ${what}`, await a.fetch(`/v1/responses/${id}`), notFound);
    await expectError(t, `GET input_items ${what}`, await a.fetch(`/v1/responses/${id}/input_items`), notFound);
    await expectError(t, `DELETE ${what}`, await a.fetch(`/v1/responses/${id}`, { method: "DELETE" }), notFound);
  }
  await expectError(t, "cancel of a 3 KB id", await a.fetch(`/v1/responses/resp_${"x".repeat(3 * KB)}/cancel`, { method: "POST" }), notFound);
  const ok = await a.fetch(`/v1/responses/${stored.id}`);
  t.equal(ok.status, 200, "a real id is still found");
});

hostileCase(t, hostile, "conversation and item ids in paths: too long or malformed are 404s", async (t) => {
  for (const id of BAD_PATH_IDS) {
    const what = `id of ${id.length} characters ${JSON.stringify(id.slice(0, 12))}`;
    await expectError(t, `GET conversation ${what}`, await a.fetch(`/v1/conversations/${id}`), notFound);
    await expectError(t, `POST conversation ${what}`, await post(`/v1/conversations/${id}`, { metadata: { k: "v" } }), notFound);
    await expectError(t, `GET items ${what}`, await a.fetch(`/v1/conversations/${id}/items`), notFound);
    await expectError(t, `GET item ${what}`, await a.fetch(`/v1/conversations/${conversation.id}/items/${id}`), notFound);
    await expectError(t, `DELETE item ${what}`, await a.fetch(`/v1/conversations/${conversation.id}/items/${id}`, { method: "DELETE" }), notFound);
    await expectError(t, `DELETE conversation ${what}`, await a.fetch(`/v1/conversations/${id}`, { method: "DELETE" }), notFound);
  }
  const items = await a.client.conversations.items.list(conversation.id);
  t.equal(items.data.length, 1, "the conversation is intact");
});

hostileCase(t, hostile, "ids in response bodies are 400s naming the parameter", async (t) => {
  for (const id of BAD_BODY_IDS) {
    const what = `id of ${id.length} characters`;
    const invalid = (param: string) => ({ status: 400, code: "invalid_value", param });
    await expectError(t, `previous_response_id ${what}`, await post("/v1/responses", { model: TEST_MODEL, input: "hi", previous_response_id: id }), invalid("previous_response_id"));
    await expectError(t, `conversation ${what}`, await post("/v1/responses", { model: TEST_MODEL, input: "hi", conversation: id }), invalid("conversation"));
    await expectError(t, `conversation.id ${what}`, await post("/v1/responses", { model: TEST_MODEL, input: "hi", conversation: { id } }), invalid("conversation.id"));
    await expectError(t, `item_reference ${what}`, await post("/v1/responses", { model: TEST_MODEL, input: [{ type: "item_reference", id }] }), invalid("input[0].id"));
    await expectError(t, `message id ${what}`, await post("/v1/responses", { model: TEST_MODEL, input: [{ role: "user", content: "hi", id }] }), invalid("input[0].id"));
    await expectError(t, `background ${what}`, await post("/v1/responses", { model: TEST_MODEL, input: "hi", background: true, previous_response_id: id }), invalid("previous_response_id"));
  }
});

hostileCase(t, hostile, "item ids in conversation bodies are 400s naming the item", async (t) => {
  for (const id of BAD_BODY_IDS) {
    const what = `item id of ${id.length} characters`;
    const item = { type: "message", role: "user", content: "hi", id };
    await expectError(t, `create with ${what}`, await post("/v1/conversations", { items: [item] }), { status: 400, code: "invalid_value", param: "items[0].id" });
    await expectError(t, `append ${what}`, await post(`/v1/conversations/${conversation.id}/items`, { items: [{ type: "message", role: "user", content: "ok" }, item] }), { status: 400, code: "invalid_value", param: "items[1].id" });
  }
  const items = await a.client.conversations.items.list(conversation.id);
  t.equal(items.data.length, 1, "nothing was appended");
});

hostileCase(t, hostile, "template names in paths: too long or malformed are 404s", async (t) => {
  const names = ["n".repeat(65), "a/b/c/d/e", "n".repeat(3 * KB), "a..%2E", "%00"];
  for (const name of names) {
    const what = `name of ${name.length} characters`;
    await expectError(t, `GET ${what}`, await a.fetch(`/v1/prompts/${name}`), notFound);
    await expectError(t, `DELETE ${what}`, await a.fetch(`/v1/prompts/${name}`, { method: "DELETE" }), notFound);
  }
  await expectError(t, "POST /v1/responses/<3 KB name>", await post(`/v1/responses/${"n".repeat(3 * KB)}`, { inputs: {} }), { status: 404, code: "unknown_url" });
  await expectError(t, "a 3 KB template name in a body", await post("/v1/prompts", { name: "n".repeat(3 * KB), model: TEST_MODEL, input: "hi" }), { status: 400, code: "invalid_value", param: "name" });
});

hostileCase(t, hostile, "ids inside /v1/responses batch lines: each bad line is that line's error, the actor host carries on", async (t) => {
  // Two 20-line batches of 5 KB ids used to disconnect the actor host on every retry, then crash it.
  const line = (i: number, body: Record<string, unknown>): LineSpec => ({ custom_id: `l${i}`, method: "POST", url: "/v1/responses", body: { model: TEST_MODEL, input: "hi", max_output_tokens: 16, ...body } });
  const invalidLines = Array.from({ length: 20 }, (_, i) => line(i, i % 2 ? { previous_response_id: "x".repeat(5 * KB) } : { conversation: "c".repeat(5 * KB) }));
  const invalid = await waitForBatch(a.client, (await createBatch(a.client, invalidLines, { endpoint: "/v1/responses" })).id, 60_000);
  t.equal(invalid.status, "failed", "a batch of invalid lines fails validation");
  const errors = (invalid.errors?.data ?? []) as Array<{ code: string; param: string | null; line: number | null }>;
  t.same(errors.slice(0, 2).map((e) => ({ code: e.code, param: e.param, line: e.line })), [
    { code: "invalid_value", param: "body.conversation", line: 1 },
    { code: "invalid_value", param: "body.previous_response_id", line: 2 },
  ], "the errors name the parameter and the line");

  // Well-formed ids that name nothing: each line fails once, with no retry loop.
  const unknownLines = [
    line(0, { previous_response_id: "resp_doesnotexist" }),
    line(1, { conversation: "conv_doesnotexist" }),
    line(2, {}),
  ];
  const done = await waitForBatch(a.client, (await createBatch(a.client, unknownLines, { endpoint: "/v1/responses" })).id, 60_000);
  t.equal(done.status, "completed");
  t.same(done.request_counts, { total: 3, completed: 1, failed: 2 });
  const failures = await readJsonlFile(a.client, done.error_file_id);
  t.same(failures.map((f) => [f.custom_id, f.response?.status_code]).sort(), [["l0", 400], ["l1", 404]], "the unknown ids are those lines' errors");
  t.same(hostile.stack.actors.logs.filter((r) => r.level === "error"), [], "the actor host logged no error");
});
