import t, { type Test } from "tap";
import type OpenAI from "openai";
import { sharedStack } from "../../harness/shared-stack.js";
import { TEST_MODEL } from "../../harness/processes.js";
import { expectApiError, SHORT_JSON } from "./helpers.js";

// Streamed responses: OpenAI's named events in order, sequence numbers from 0, and what the
// SDK's stream helper needs to assemble the final response. (That the runner logs no error
// through such streams is stream-runner-log.test.ts, on a stack of its own: the shared runner's
// logs are everyone's.)
const stack = await sharedStack(t);
type Event = OpenAI.Responses.ResponseStreamEvent;

async function collect(params: Record<string, unknown>): Promise<Event[]> {
  const stream = await stack.client.responses.create({ model: TEST_MODEL, stream: true, ...params } as OpenAI.Responses.ResponseCreateParamsStreaming);
  const events: Event[] = [];
  for await (const e of stream) events.push(e);
  return events;
}

function checkTextSequence(t: Test, events: Event[], terminal: string) {
  t.same(events.map((e) => e.sequence_number), events.map((_, i) => i), "sequence_number counts from 0, one per event");
  const types = events.map((e) => e.type);
  const deltas = types.filter((x) => x === "response.output_text.delta").length;
  t.ok(deltas >= 1, `${deltas} text deltas`);
  t.same(types, [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
    ...Array(deltas).fill("response.output_text.delta"),
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
    terminal,
  ], "OpenAI's event order for a text reply");
  const created = events[0] as OpenAI.Responses.ResponseCreatedEvent;
  t.equal(created.response.status, "in_progress");
  t.same(created.response.output, []);
  t.equal(created.response.usage, null);
  const added = events[2] as OpenAI.Responses.ResponseOutputItemAddedEvent;
  t.equal(added.output_index, 0);
  t.match(added.item, { type: "message", role: "assistant", status: "in_progress", content: [] });
  const partAdded = events[3] as OpenAI.Responses.ResponseContentPartAddedEvent;
  t.same(partAdded.part, { type: "output_text", text: "", annotations: [], logprobs: [] });
  t.equal(partAdded.item_id, added.item.id);
  const text = events.filter((e): e is OpenAI.Responses.ResponseTextDeltaEvent => e.type === "response.output_text.delta").map((e) => e.delta).join("");
  const done = events.find((e): e is OpenAI.Responses.ResponseTextDoneEvent => e.type === "response.output_text.done")!;
  t.equal(done.text, text, "output_text.done carries the whole text");
  const final = (events.at(-1) as OpenAI.Responses.ResponseCompletedEvent).response;
  t.equal(final.id, created.response.id);
  const message = final.output[0] as OpenAI.Responses.ResponseOutputMessage;
  t.equal((message.content[0] as OpenAI.Responses.ResponseOutputText).text, text, "the final response holds the streamed text");
  t.ok(final.usage!.output_tokens > 0);
  t.equal(final.usage!.input_tokens_details.cache_write_tokens, 0, `${terminal} carries usage with cache_write_tokens`);
  return final;
}

t.test("text reply that completes: created, in_progress, item, part, deltas, done events, completed", async (t) => {
  const events = await collect({ input: "A cat, as JSON.", max_output_tokens: 300, text: SHORT_JSON });
  const final = checkTextSequence(t, events, "response.completed");
  t.equal(final.status, "completed");
  t.equal(((events.at(-2) as OpenAI.Responses.ResponseOutputItemDoneEvent).item as OpenAI.Responses.ResponseOutputMessage).status, "completed");
});

t.test("text reply cut by max_output_tokens ends with response.incomplete", async (t) => {
  const events = await collect({ input: "Tell me a story.", max_output_tokens: 20 });
  const final = checkTextSequence(t, events, "response.incomplete");
  t.equal(final.status, "incomplete");
  t.same(final.incomplete_details, { reason: "max_output_tokens" });
  t.equal(((events.at(-2) as OpenAI.Responses.ResponseOutputItemDoneEvent).item as OpenAI.Responses.ResponseOutputMessage).status, "incomplete");
  t.equal(final.usage!.output_tokens, 20);
});

t.test("the SDK stream helper assembles the final response", async (t) => {
  const stream = stack.client.responses.stream({ model: TEST_MODEL, input: "A dog, as JSON.", max_output_tokens: 300, text: SHORT_JSON });
  let deltas = "";
  stream.on("response.output_text.delta", (e) => (deltas += e.delta));
  const final = await stream.finalResponse();
  t.equal(final.status, "completed");
  t.equal(final.output_text, deltas);
  t.type(JSON.parse(final.output_text), "object");
  const stored = await stack.client.responses.retrieve(final.id);
  t.equal(stored.output_text, final.output_text, "the streamed response was stored as streamed");
  t.same(stored.output.map((o) => o.id), final.output.map((o) => o.id));
  t.same(stored.usage, final.usage);
});

t.test("raw framing: event line and data line per event, data.type = event, no [DONE]", async (t) => {
  const res = await stack.fetch("/v1/responses", { method: "POST", body: JSON.stringify({ model: TEST_MODEL, input: "Hi", max_output_tokens: 16, stream: true }) });
  t.equal(res.status, 200);
  t.match(res.headers.get("content-type"), /^text\/event-stream/);
  const raw = await res.text();
  t.notMatch(raw, /\[DONE\]/);
  const blocks = raw.split("\n\n").filter((b) => b.length > 0 && !b.startsWith(":"));
  t.ok(blocks.length >= 8);
  blocks.forEach((block, i) => {
    const lines = block.split("\n");
    t.equal(lines.length, 2, "event + data");
    const type = lines[0]!.replace(/^event: /, "");
    const data = JSON.parse(lines[1]!.replace(/^data: /, "")) as { type: string; sequence_number: number };
    t.equal(data.type, type);
    t.equal(data.sequence_number, i);
  });
});

t.test("stream with store: false is not retrievable", async (t) => {
  const events = await collect({ input: "Hi", max_output_tokens: 16, store: false });
  const id = (events[0] as OpenAI.Responses.ResponseCreatedEvent).response.id;
  await expectApiError(t, stack.client.responses.retrieve(id), { status: 404 });
});

t.test("an error before streaming starts is an ordinary JSON error", async (t) => {
  await expectApiError(t, collect({ model: "nope/missing", input: "Hi" }), { status: 404, code: "model_not_found" });
  await expectApiError(t, collect({ input: "Hi", max_output_tokens: 5000 }), { status: 400, param: "max_output_tokens" });
});

t.test("a client that leaves mid-stream gets nothing stored", async (t) => {
  const abort = new AbortController();
  // log: true makes the gateway write the request's trace once it is done with it, stored or not.
  const body = { model: TEST_MODEL, input: "A long story.", max_output_tokens: 1000, stream: true, log: true };
  const res = await stack.fetch("/v1/responses", { method: "POST", body: JSON.stringify(body), signal: abort.signal });
  const requestId = res.headers.get("x-request-id")!;
  const reader = res.body!.getReader();
  let text = "";
  while (!text.includes("response.output_text.delta")) text += new TextDecoder().decode((await reader.read()).value);
  const id = /"id":"(resp_[^"]+)"/.exec(text)![1]!;
  abort.abort();
  const trace = await traceOf(requestId);
  t.equal(trace.status, "client_disconnected", "the gateway saw the client leave");
  await expectApiError(t, stack.client.responses.retrieve(id), { status: 404 });
});

/** The trace of the request `requestId`, once the gateway has finished it (and flushed its traces). */
async function traceOf(requestId: string): Promise<{ request_id: string; status: string }> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const page = (await (await stack.fetch("/v1/traces?limit=100")).json()) as { data: Array<{ request_id: string; status: string }> };
    const trace = page.data.find((tr) => tr.request_id === requestId);
    if (trace) return trace;
    if (Date.now() > deadline) throw new Error(`no trace of ${requestId} within 10 s: the gateway did not finish the request`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
