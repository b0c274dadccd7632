import t from "tap";
import { sharedStack } from "../../harness/shared-stack.js";
import { TEST_MODEL } from "../../harness/processes.js";
import { expectApiError } from "./helpers.js";

// Stored responses (store defaults to true): retrieve, list input items, delete; store: false
// keeps nothing; and another project's key (a second project of the same organization) never
// sees them.
const stack = await sharedStack(t);
const otherClient = (await stack.project("other")).client;

t.test("a created response is retrieved as it was returned", async (t) => {
  const created = await stack.client.responses.create({ model: TEST_MODEL, input: "Hello there", max_output_tokens: 16, metadata: { k: "v" } });
  const got = await stack.client.responses.retrieve(created.id);
  t.same(got, created);
});

t.test("input items: ids, the string input as a user message, order, pagination", async (t) => {
  const single = await stack.client.responses.create({ model: TEST_MODEL, input: "Just this", max_output_tokens: 16 });
  const one = await stack.client.responses.inputItems.list(single.id);
  t.equal(one.data.length, 1);
  t.match(one.data[0], { type: "message", role: "user", status: "completed", content: [{ type: "input_text", text: "Just this" }] });
  t.match(one.data[0]!.id, /^msg_/);

  const texts = Array.from({ length: 7 }, (_, i) => `message ${i}`);
  const r = await stack.client.responses.create({ model: TEST_MODEL, input: texts.map((text) => ({ role: "user" as const, content: text })), max_output_tokens: 16 });
  const textOf = (item: unknown) => ((item as { content: Array<{ text: string }> }).content[0]!.text);
  const desc = await stack.client.responses.inputItems.list(r.id);
  t.same(desc.data.map(textOf), [...texts].reverse(), "newest first by default");
  const raw = await (await stack.fetch(`/v1/responses/${r.id}/input_items?order=asc&limit=3`)).json() as { data: unknown[]; has_more: boolean; first_id: string; last_id: string; object: string };
  t.equal(raw.object, "list");
  t.same(raw.data.map(textOf), texts.slice(0, 3));
  t.equal(raw.has_more, true);
  t.equal(raw.first_id, (raw.data[0] as { id: string }).id);
  t.equal(raw.last_id, (raw.data[2] as { id: string }).id);
  const all: string[] = [];
  for await (const item of stack.client.responses.inputItems.list(r.id, { order: "asc", limit: 2 })) all.push(textOf(item));
  t.same(all, texts, "the SDK pages through every item with after=");
  await expectApiError(t, stack.client.responses.inputItems.list(r.id, { limit: 0 }), { status: 400, param: "limit" });
  await expectApiError(t, stack.client.responses.inputItems.list(r.id, { after: "msg_nope" }), { status: 400, param: "after" });
});

t.test("delete removes the response and its items", async (t) => {
  const r = await stack.client.responses.create({ model: TEST_MODEL, input: "Bye", max_output_tokens: 16 });
  const res = await stack.fetch(`/v1/responses/${r.id}`, { method: "DELETE" });
  t.equal(res.status, 200);
  t.same(await res.json(), { id: r.id, object: "response", deleted: true });
  await expectApiError(t, stack.client.responses.retrieve(r.id), { status: 404, code: null });
  await expectApiError(t, stack.client.responses.inputItems.list(r.id), { status: 404 });
  await expectApiError(t, stack.client.responses.delete(r.id), { status: 404 });
  await expectApiError(t, stack.client.responses.create({ model: TEST_MODEL, input: "again", previous_response_id: r.id }), { status: 400, param: "previous_response_id", code: "previous_response_not_found" });
});

t.test("store: false keeps nothing", async (t) => {
  const r = await stack.client.responses.create({ model: TEST_MODEL, input: "Secret", max_output_tokens: 16, store: false });
  t.equal((r as unknown as { store: boolean }).store, false);
  await expectApiError(t, stack.client.responses.retrieve(r.id), { status: 404 });
  await expectApiError(t, stack.client.responses.create({ model: TEST_MODEL, input: "more", previous_response_id: r.id }), { status: 400, param: "previous_response_id" });
});

t.test("a response of another project is not found there", async (t) => {
  const mine = await stack.client.responses.create({ model: TEST_MODEL, input: "Mine", max_output_tokens: 16 });
  await expectApiError(t, otherClient.responses.retrieve(mine.id), { status: 404 });
  await expectApiError(t, otherClient.responses.inputItems.list(mine.id), { status: 404 });
  await expectApiError(t, otherClient.responses.delete(mine.id), { status: 404 });
  await expectApiError(t, otherClient.responses.create({ model: TEST_MODEL, input: "x", previous_response_id: mine.id }), { status: 400, param: "previous_response_id" });
  t.equal((await stack.client.responses.retrieve(mine.id)).id, mine.id, "still there for its own project");
  const theirs = await otherClient.responses.create({ model: TEST_MODEL, input: "Theirs", max_output_tokens: 16 });
  await expectApiError(t, stack.client.responses.retrieve(theirs.id), { status: 404 });
  t.equal((await otherClient.responses.retrieve(theirs.id)).id, theirs.id);
});

t.test("unknown ids are 404 with OpenAI's envelope", async (t) => {
  const res = await stack.fetch("/v1/responses/resp_doesnotexist");
  t.equal(res.status, 404);
  const body = await res.json() as { error: Record<string, unknown> };
  t.same(Object.keys(body.error).sort(), ["code", "message", "param", "type"]);
  t.equal(body.error.type, "invalid_request_error");
});
