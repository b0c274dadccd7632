import t from "tap";
import type OpenAI from "openai";
import { sharedStack } from "../../harness/shared-stack.js";
import { TEST_MODEL } from "../../harness/processes.js";
import { expectApiError, SHORT_JSON } from "./helpers.js";

// background: true with the real model: the create returns at once with status queued, a worker
// in the actor host runs it, clients poll GET; with stream: true the events are stored and can
// be replayed from any sequence number.
const stack = await sharedStack(t);
const client = stack.client;
type Created = OpenAI.Responses.Response;

async function pollUntilDone(id: string, seen: string[] = []): Promise<Created> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const r = await client.responses.retrieve(id);
    if (seen.at(-1) !== r.status) seen.push(r.status!);
    if (!["queued", "in_progress"].includes(r.status!)) return r;
    if (Date.now() > deadline) throw new Error(`still ${r.status} after 60 s`);
    await new Promise((res) => setTimeout(res, 20));
  }
}

t.test("a background response is queued, then runs, and is polled to completion", async (t) => {
  const created = await client.responses.create({ model: TEST_MODEL, input: "Tell me a long story.", background: true, max_output_tokens: 1000 });
  t.equal(created.status, "queued");
  t.equal(created.background, true);
  t.same(created.output, []);
  t.equal(created.usage, null);
  const seen: string[] = ["queued"];
  const final = await pollUntilDone(created.id, seen);
  t.equal(final.status, "incomplete", "the story ran into max_output_tokens");
  t.same(final.incomplete_details, { reason: "max_output_tokens" });
  t.equal(final.usage!.output_tokens, 1000);
  t.ok(final.output_text.length > 0);
  const order = ["queued", "in_progress", "incomplete"];
  t.same(seen, order.filter((s) => seen.includes(s)), `statuses in order: ${seen.join(" -> ")}`);
  const items = await client.responses.inputItems.list(created.id);
  t.equal(items.data.length, 1);

  const json = await client.responses.create({ model: TEST_MODEL, input: "JSON please", background: true, max_output_tokens: 400, text: SHORT_JSON });
  const done = await pollUntilDone(json.id);
  t.equal(done.status, "completed");
  t.type(done.completed_at, "number");
  t.type(JSON.parse(done.output_text), "object");
});

t.test("background runs chain and append to conversations like foreground ones", async (t) => {
  const first = await client.responses.create({ model: TEST_MODEL, input: "My cat is Tom.", max_output_tokens: 16 });
  const second = await client.responses.create({ model: TEST_MODEL, input: "Who is Tom?", previous_response_id: first.id, background: true, max_output_tokens: 16 });
  t.equal(second.previous_response_id, first.id);
  const done = await pollUntilDone(second.id);
  const foreground = await client.responses.create({ model: TEST_MODEL, input: "Who is Tom?", previous_response_id: first.id, max_output_tokens: 16 });
  t.equal(done.usage!.input_tokens, foreground.usage!.input_tokens, "same context as a foreground turn");

  const conv = await client.conversations.create();
  const inConv = await client.responses.create({ model: TEST_MODEL, input: "hello", conversation: conv.id, background: true, max_output_tokens: 16 });
  await pollUntilDone(inConv.id);
  const items = await client.conversations.items.list(conv.id, { order: "asc" });
  t.equal(items.data.length, 2, "input and output appended once the run finished");
});

t.test("background + stream: queued events first, then the run; replay from any sequence number", async (t) => {
  const stream = await client.responses.create({ model: TEST_MODEL, input: "A cat in JSON.", background: true, stream: true, max_output_tokens: 300, text: SHORT_JSON });
  const events: OpenAI.Responses.ResponseStreamEvent[] = [];
  for await (const e of stream) events.push(e);
  const types = events.map((e) => e.type);
  t.same(types.slice(0, 5), ["response.created", "response.queued", "response.in_progress", "response.output_item.added", "response.content_part.added"]);
  t.equal(types.at(-1), "response.completed");
  t.same(events.map((e) => e.sequence_number), events.map((_, i) => i), "consecutive sequence numbers across gateway and worker");
  const created = events[0] as OpenAI.Responses.ResponseCreatedEvent;
  t.equal(created.response.status, "queued");
  const id = created.response.id;
  const text = events.filter((e): e is OpenAI.Responses.ResponseTextDeltaEvent => e.type === "response.output_text.delta").map((e) => e.delta).join("");
  const stored = await client.responses.retrieve(id);
  t.equal(stored.output_text, text);

  const res = await stack.fetch(`/v1/responses/${id}?stream=true&starting_after=3`);
  t.equal(res.status, 200);
  const replayed = (await res.text()).split("\n\n").filter((b) => b.startsWith("event:")).map((b) => JSON.parse(b.split("\n")[1]!.slice(6)) as { sequence_number: number; type: string });
  t.same(replayed.map((e) => e.sequence_number), events.slice(4).map((e) => e.sequence_number), "events after 3, with their own numbers");
  t.same(replayed.map((e) => e.type), types.slice(4));

  const helper = client.responses.stream({ response_id: id, starting_after: 4 });
  const seen: number[] = [];
  helper.on("event", (e) => seen.push(e.sequence_number));
  const final = await helper.finalResponse();
  t.equal(final.output_text, text, "the SDK helper resumes a background stream");
  t.equal(seen[0], 5, "events after starting_after only");
});

t.test("bad background requests and cancels", async (t) => {
  await expectApiError(t, client.responses.create({ model: TEST_MODEL, input: "x", background: true, store: false }), { status: 400, param: "background" });
  await expectApiError(t, client.responses.create({ model: "nope/none", input: "x", background: true }), { status: 404, code: "model_not_found" });
  const foreground = await client.responses.create({ model: TEST_MODEL, input: "x", max_output_tokens: 16 });
  await expectApiError(t, client.responses.cancel(foreground.id), { status: 400 });
  await expectApiError(t, client.responses.cancel("resp_unknown"), { status: 404 });
  const res = await stack.fetch(`/v1/responses/${foreground.id}?stream=true`);
  t.equal(res.status, 400, "only background streams can be replayed");
  const bg = await client.responses.create({ model: TEST_MODEL, input: "x", background: true, max_output_tokens: 16 });
  const done = await pollUntilDone(bg.id);
  const again = await client.responses.cancel(bg.id);
  t.equal(again.status, done.status, "cancelling a finished background response changes nothing");
});
