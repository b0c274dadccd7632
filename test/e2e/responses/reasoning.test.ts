// tier: slow (a stack of its own, serving scripted reasoning models)
import t from "tap";
import type OpenAI from "openai";
import { startStack } from "../../harness/stack.js";
import { eventViolations, specViolations } from "../../harness/openai-spec.js";
import { REPLIES, scriptedModelId, THINKING_OFF_ANSWER, writeScriptedCatalog } from "../../harness/scripted-models.js";

// A reasoning model's reply through the Responses API: a reasoning output item (its thought as a
// reasoning_text part) before the message, response.reasoning_text.delta / .done events in the
// stream, reasoning_tokens counted, reasoning.effort honoured, a function call after the
// reasoning, and reasoning items given back in the input. Models: Qwen3-style GGUFs whose replies
// are scripted (test/harness/scripted-models.ts).

const { catalog } = writeScriptedCatalog();
const stack = await startStack(t, { env: { TRIBUTARY_CATALOG: catalog } });
const THINK = scriptedModelId("think");
/** Departures from OpenAI's schema kept on purpose (Open Responses requires them): test/unit/openai-spec-shapes. */
const EXCEPT = ["/user", "/usage"];
type Loose = Record<string, any>;

t.test("non-streamed: a reasoning item, then the message; reasoning tokens counted; stored as returned", async (t) => {
  const r = await stack.client.responses.create({ model: THINK, input: "Hi" });
  t.same(specViolations("Response", r, ["/user"]), []);
  t.equal(r.status, "completed");
  t.same(r.output.map((o) => o.type), ["reasoning", "message"]);
  const reasoning = r.output[0] as OpenAI.Responses.ResponseReasoningItem;
  t.match(reasoning.id, /^rs_/);
  t.same(reasoning.summary, []);
  t.same(reasoning.content, [{ type: "reasoning_text", text: REPLIES.think.reasoning }]);
  t.equal(reasoning.status, "completed");
  t.equal(r.output_text, REPLIES.think.answer, "the answer alone is the output text");
  t.equal(r.usage!.output_tokens_details.reasoning_tokens, REPLIES.think.reasoningTokens);
  t.equal(r.usage!.output_tokens, 9);
  const stored = await stack.client.responses.retrieve(r.id);
  t.same(stored.output, r.output);
});

t.test("streamed: reasoning item events (reasoning_text.delta, .done), then the message's; the SDK's helper assembles both", async (t) => {
  const events: Loose[] = [];
  const stream = stack.client.responses.stream({ model: THINK, input: "Hi" });
  stream.on("event", (e) => events.push(e));
  const final = await stream.finalResponse();
  for (const e of events) t.same(eventViolations(e as { type: string }, EXCEPT.map((p) => `/response${p}`)), [], e.type);
  const types = events.map((e) => e.type);
  const deltas = types.filter((x) => x === "response.reasoning_text.delta").length;
  t.ok(deltas >= 3, `${deltas} reasoning deltas`);
  t.same(types.slice(0, 4 + deltas + 3), [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
    ...Array(deltas).fill("response.reasoning_text.delta"),
    "response.reasoning_text.done",
    "response.content_part.done",
    "response.output_item.done",
  ], "OpenAI's order for a reasoning item");
  t.equal(types[4 + deltas + 3], "response.output_item.added", "then the message");
  t.equal(types.at(-1), "response.completed");
  const added = events[2]!;
  t.match(added.item, { type: "reasoning", status: "in_progress", summary: [], content: [] });
  t.same(events[3]!.part, { type: "reasoning_text", text: "" });
  const text = events.filter((e) => e.type === "response.reasoning_text.delta").map((e) => e.delta).join("");
  t.equal(text, REPLIES.think.reasoning);
  t.equal(events.find((e) => e.type === "response.reasoning_text.done")!.text, text);
  t.same(final.output.map((o) => o.type), ["reasoning", "message"]);
  t.same((final.output[0] as Loose).content, [{ type: "reasoning_text", text: REPLIES.think.reasoning }]);
  t.equal(final.output_text, REPLIES.think.answer);
  t.equal(final.usage!.output_tokens_details.reasoning_tokens, REPLIES.think.reasoningTokens);
});

t.test("reasoning.effort minimal: thinking off, no reasoning item", async (t) => {
  const r = await stack.client.responses.create({ model: THINK, input: "Hi", reasoning: { effort: "minimal" } });
  t.same(r.output.map((o) => o.type), ["message"]);
  t.equal(r.output_text, THINKING_OFF_ANSWER);
  t.equal(r.usage!.output_tokens_details.reasoning_tokens, 0);
  t.same(r.reasoning, { effort: "minimal", summary: null }, "echoed");
});

t.test("a function call after the reasoning: a reasoning item, then the function_call item with valid arguments", async (t) => {
  const r = await stack.client.responses.create({
    model: scriptedModelId("tool"),
    input: "Weather in Paris?",
    tools: [{ type: "function", name: "get_weather", strict: true, parameters: { type: "object", properties: { city: { type: "string", enum: ["Paris"] } }, required: ["city"], additionalProperties: false } }],
    parallel_tool_calls: false,
  });
  t.same(r.output.map((o) => o.type), ["reasoning", "function_call"]);
  const call = r.output[1] as OpenAI.Responses.ResponseFunctionToolCall;
  t.equal(call.name, "get_weather");
  t.same(JSON.parse(call.arguments), { city: "Paris" });
});

t.test("reasoning items given back in the input (a previous turn's output) are accepted; a malformed one is a 400 naming it", async (t) => {
  const first = await stack.client.responses.create({ model: THINK, input: "Hi", store: false });
  const second = await stack.client.responses.create({ model: THINK, input: [{ role: "user", content: "Hi" }, ...(first.output as never[]), { role: "user", content: "Again" }] });
  t.equal(second.status, "completed");
  const chained = await stack.client.responses.create({ model: THINK, input: "Again", previous_response_id: (await stack.client.responses.create({ model: THINK, input: "Hi" })).id });
  t.equal(chained.output_text, REPLIES.think.answer, "a chain whose history holds a reasoning item");
  const res = await stack.fetch("/v1/responses", { method: "POST", body: JSON.stringify({ model: THINK, input: [{ type: "reasoning", summary: [], content: [{ type: "reasoning_text", text: 7 }] }, { role: "user", content: "Hi" }] }) });
  t.equal(res.status, 400);
  t.match(((await res.json()) as Loose).error.param, /^input\[0\]\.content\[0\]/);
});
