import t from "tap";
import type OpenAI from "openai";
import { sharedStack } from "../../harness/shared-stack.js";
import { TEST_MODEL } from "../../harness/processes.js";
import { expectApiError } from "./helpers.js";

// Conversations: an ordered history that responses run in it read and append to; items can be
// listed, added, read and deleted; everything is scoped to the project.
const stack = await sharedStack(t);
const client = stack.client;
// Another project of the same organization, with a key of its own.
const otherClient = (await stack.project("other")).client;
const textOf = (item: unknown) => ((item as { content: Array<{ text: string }> }).content[0]!.text);

t.test("create, retrieve, update metadata, delete", async (t) => {
  const empty = await client.conversations.create();
  t.match(empty, { object: "conversation", metadata: {} });
  t.match(empty.id, /^conv_/);
  const conv = await client.conversations.create({ metadata: { topic: "cats" }, items: [{ role: "system", content: "Talk about cats." }] });
  t.same((await client.conversations.retrieve(conv.id)).metadata, { topic: "cats" });
  const updated = await client.conversations.update(conv.id, { metadata: { topic: "dogs" } });
  t.same(updated.metadata, { topic: "dogs" });
  const deleted = await client.conversations.delete(conv.id);
  t.same(deleted, { id: conv.id, object: "conversation.deleted", deleted: true });
  await expectApiError(t, client.conversations.retrieve(conv.id), { status: 404 });
  await expectApiError(t, client.conversations.items.list(conv.id), { status: 404 });
  await expectApiError(t, client.responses.create({ model: TEST_MODEL, input: "hi", conversation: conv.id }), { status: 404, param: "conversation" });
});

t.test("responses in a conversation read its history and append their turn", async (t) => {
  const conv = await client.conversations.create({ items: [{ role: "user", content: "Remember: the cat is called Tom." }] });
  const r1 = await client.responses.create({ model: TEST_MODEL, input: "What is the cat called?", conversation: conv.id, max_output_tokens: 20 });
  t.same(r1.conversation, { id: conv.id });
  const r2 = await client.responses.create({ model: TEST_MODEL, input: "And the dog?", conversation: { id: conv.id }, max_output_tokens: 20 });

  const items = await client.conversations.items.list(conv.id, { order: "asc" });
  t.equal(items.data.length, 5, "initial item, then input and output of each turn");
  t.same(items.data.map((i) => (i as { role?: string }).role), ["user", "user", "assistant", "user", "assistant"]);
  t.equal(textOf(items.data[1]), "What is the cat called?");
  t.equal(items.data[2]!.id, r1.output[0]!.id, "output items keep their ids");
  const r1Inputs = await client.responses.inputItems.list(r1.id);
  t.equal(items.data[1]!.id, r1Inputs.data[0]!.id, "input items keep their ids");
  const desc = await client.conversations.items.list(conv.id);
  t.same(desc.data.map((i) => i.id), items.data.map((i) => i.id).reverse(), "newest first by default");

  const stateless = await client.responses.create({
    model: TEST_MODEL, store: false, max_output_tokens: 20,
    input: [
      { role: "user", content: "Remember: the cat is called Tom." },
      { role: "user", content: "What is the cat called?" },
      ...(r1.output as unknown as OpenAI.Responses.ResponseInputItem[]),
      { role: "user", content: "And the dog?" },
    ],
  });
  t.equal(r2.usage!.input_tokens, stateless.usage!.input_tokens, "the history is exactly the conversation's items");
});

t.test("items: add, retrieve, delete; a deleted item leaves the history", async (t) => {
  const conv = await client.conversations.create();
  const added = await client.conversations.items.create(conv.id, {
    items: [{ role: "user", content: "one" }, { type: "message", role: "user", content: [{ type: "input_text", text: "two" }] }],
  });
  t.equal(added.data.length, 2);
  const [one, two] = added.data;
  const got = await client.conversations.items.retrieve(one!.id!, { conversation_id: conv.id });
  t.equal(textOf(got), "one");
  const after = await client.conversations.items.delete(one!.id!, { conversation_id: conv.id });
  t.equal(after.id, conv.id, "delete returns the conversation");
  await expectApiError(t, client.conversations.items.retrieve(one!.id!, { conversation_id: conv.id }), { status: 404 });
  const list = await client.conversations.items.list(conv.id, { order: "asc" });
  t.same(list.data.map((i) => i.id), [two!.id]);
  const r = await client.responses.create({ model: TEST_MODEL, input: "three", conversation: conv.id, max_output_tokens: 16, store: false });
  const expected = await client.responses.create({
    model: TEST_MODEL, store: false, max_output_tokens: 16, input: [{ role: "user", content: "two" }, { role: "user", content: "three" }],
  });
  t.equal(r.usage!.input_tokens, expected.usage!.input_tokens, "the deleted item is gone from the prompt");

  const ids = (await client.conversations.items.list(conv.id, { order: "asc" })).data.map((i) => i.id);
  t.equal(ids.length, 3);
  const page1 = await client.conversations.items.list(conv.id, { order: "asc", limit: 2 });
  t.equal(page1.data.length, 2);
  t.equal(page1.has_more, true);
  const all: string[] = [];
  for await (const item of client.conversations.items.list(conv.id, { order: "asc", limit: 1 })) all.push(item.id!);
  t.same(all, ids, "the SDK pages through every item");
});

t.test("bad inputs", async (t) => {
  const conv = await client.conversations.create();
  await expectApiError(t, client.conversations.items.create(conv.id, { items: Array.from({ length: 21 }, () => ({ role: "user" as const, content: "x" })) }), { status: 400, param: "items" });
  await expectApiError(t, client.conversations.items.create(conv.id, { items: [{ role: "wizard", content: "x" }] as never }), { status: 400, param: "items[0].role" });
  await expectApiError(t, client.conversations.create({ metadata: { k: "x".repeat(600) } }), { status: 400, param: "metadata.k" });
  await expectApiError(t, client.conversations.items.retrieve("msg_nope", { conversation_id: conv.id }), { status: 404 });
  await expectApiError(t, client.responses.create({ model: TEST_MODEL, input: "x", conversation: "conv_nope" }), { status: 404, param: "conversation" });
});

t.test("a conversation of another project is not found there", async (t) => {
  const conv = await client.conversations.create({ items: [{ role: "user", content: "private" }] });
  await expectApiError(t, otherClient.conversations.retrieve(conv.id), { status: 404 });
  await expectApiError(t, otherClient.conversations.items.list(conv.id), { status: 404 });
  await expectApiError(t, otherClient.conversations.delete(conv.id), { status: 404 });
  await expectApiError(t, otherClient.responses.create({ model: TEST_MODEL, input: "x", conversation: conv.id }), { status: 404 });
  t.equal((await client.conversations.retrieve(conv.id)).id, conv.id);
});
