import t from "tap";
import { ChatChunkStream } from "../../gateway/sse/chat-stream.js";
import { ChatCompletionAccumulator, newResponseObject, parseResponseCreateRequest, ResponseOutputBuilder, responseUsage, type ResponseEvent } from "../../modules/openai/mod.js";
import { FinishReason } from "../../proto/gen/tributary/v1/inference.js";
import { eventViolations, specViolations } from "../harness/openai-spec.js";
import { RecordedSseOutput } from "../harness/recorded-sse-output.js";

// The objects we send, checked against OpenAI's own schema (spec 2.3.0): every required key, the
// types, and null only where the spec allows null (an optional key the spec does not make
// nullable is left out instead).

const usage = { promptTokens: 5, completionTokens: 7, cachedPromptTokens: 2 };

/**
 * Departures from the spec on purpose: Open Responses' schema (stricter, and what OpenAI sends)
 * requires `user`, string or null, and `usage`, null until the response finishes.
 */
const RESPONSE_EXCEPT = ["/user", "/usage"];

t.test("chat.completion: text, tool calls, several choices", async (t) => {
  const acc = new ChatCompletionAccumulator(2);
  acc.delta({ choiceIndex: 0, text: "Hello", toolCalls: [], tokens: 1 });
  acc.choiceEnd({ choiceIndex: 0, finishReason: FinishReason.FINISH_REASON_STOP, completionTokens: 1 });
  acc.delta({ choiceIndex: 1, text: "", toolCalls: [{ index: 0, id: "call_1", name: "f", arguments: "{}" }], tokens: 1 });
  acc.choiceEnd({ choiceIndex: 1, finishReason: FinishReason.FINISH_REASON_TOOL_CALLS, completionTokens: 1 });
  const completion = acc.toCompletion("chatcmpl-1", 1_700_000_000, "m/x", usage);
  t.same(specViolations("CreateChatCompletionResponse", completion), []);
  t.same(specViolations("CreateChatCompletionResponse", JSON.parse(acc.toCompletionJson("chatcmpl-1", 1_700_000_000, "m/x", usage))), [], "the hand-written JSON too");
  t.notOk("system_fingerprint" in completion, "system_fingerprint (a string, not nullable) is left out rather than null");
});

t.test("chat.completion.chunk: every chunk of a stream, with the usage chunk", async (t) => {
  const out = new RecordedSseOutput(10_000);
  const stream = new ChatChunkStream(out, { id: "chatcmpl-1", requestId: "req_1", created: 1_700_000_000, model: "m/x", choices: 2, includeUsage: true, onOverflow: () => {} });
  stream.delta({ choiceIndex: 0, text: "Hi", toolCalls: [], tokens: 1 });
  stream.delta({ choiceIndex: 1, text: "", toolCalls: [{ index: 0, id: "call_1", name: "f", arguments: "{" }], tokens: 1 });
  stream.delta({ choiceIndex: 1, text: "", toolCalls: [{ index: 0, id: "", name: "", arguments: "}" }], tokens: 1 });
  stream.choiceEnd({ choiceIndex: 0, finishReason: FinishReason.FINISH_REASON_LENGTH, completionTokens: 1 });
  stream.choiceEnd({ choiceIndex: 1, finishReason: FinishReason.FINISH_REASON_TOOL_CALLS, completionTokens: 2 });
  stream.complete(usage);
  const chunks = out.events.filter((e) => e !== "[DONE]");
  t.ok(chunks.length >= 6);
  for (const [i, chunk] of chunks.entries()) {
    t.same(specViolations("CreateChatCompletionStreamResponse", chunk), [], `chunk ${i}`);
    t.notOk("system_fingerprint" in (chunk as object), `chunk ${i} has no system_fingerprint`);
  }
});

t.test("response: the object, its items and every event", async (t) => {
  const body = parseResponseCreateRequest({ model: "m/x", input: "hi", tools: [{ type: "function", name: "f" }] });
  const response = newResponseObject(body, { id: "resp_1", createdAt: 1_700_000_000, conversationId: null }, "in_progress");
  t.same(specViolations("Response", response, RESPONSE_EXCEPT), [], "in progress");
  const events: ResponseEvent[] = [];
  const builder = new ResponseOutputBuilder((e) => events.push(e));
  response.output = builder.output;
  builder.delta({ choiceIndex: 0, text: "Hello", tokens: 1, toolCalls: [] });
  builder.delta({ choiceIndex: 0, text: "", tokens: 1, toolCalls: [{ index: 0, id: "call_1", name: "f", arguments: "{}" }] });
  builder.end(FinishReason.FINISH_REASON_STOP);
  response.status = "completed";
  response.completed_at = 1_700_000_001;
  response.usage = responseUsage(usage);
  t.same(specViolations("Response", response, ["/user"]), [], "completed, with its usage");
  events.push({ type: "response.completed", response });
  const events2 = events.map((e, sequence_number) => ({ ...e, sequence_number }));
  for (const e of events2) t.same(eventViolations(e, RESPONSE_EXCEPT.map((p) => `/response${p}`)), [], e.type);
});

t.test("with reasoning: the chat message and chunks, the response's reasoning item and its events", async (t) => {
  const withReasoning = { ...usage, reasoningTokens: 3 };
  const acc = new ChatCompletionAccumulator(1, { logprobs: true });
  acc.delta({ choiceIndex: 0, text: "", toolCalls: [], tokens: 3, reasoning: "Let me think." });
  acc.delta({ choiceIndex: 0, text: "Hi", toolCalls: [], tokens: 1, logprobs: { tokens: [{ bytes: Buffer.from("Hi"), logprob: -0.5, top: [] }] } });
  acc.choiceEnd({ choiceIndex: 0, finishReason: FinishReason.FINISH_REASON_STOP, completionTokens: 4 });
  const completion = acc.toCompletion("chatcmpl-1", 1_700_000_000, "m/x", withReasoning);
  t.same(specViolations("CreateChatCompletionResponse", completion), []);
  t.match(completion.choices[0]!.message, { reasoning_content: "Let me think.", reasoning: "Let me think." });
  t.equal(completion.usage.completion_tokens_details.reasoning_tokens, 3);
  t.equal(acc.toCompletionJson("chatcmpl-1", 1_700_000_000, "m/x", withReasoning), JSON.stringify(completion), "the hand-written JSON is the object's");

  const out = new RecordedSseOutput(10_000);
  const stream = new ChatChunkStream(out, { id: "chatcmpl-1", requestId: "req_1", created: 1_700_000_000, model: "m/x", choices: 1, includeUsage: true, onOverflow: () => {} });
  stream.delta({ choiceIndex: 0, text: "", toolCalls: [], tokens: 2, reasoning: "Let me" });
  out.fillUp();
  stream.delta({ choiceIndex: 0, text: "", toolCalls: [], tokens: 1, reasoning: " think." });
  stream.delta({ choiceIndex: 0, text: "Hi", toolCalls: [], tokens: 1 });
  out.catchUp();
  stream.choiceEnd({ choiceIndex: 0, finishReason: FinishReason.FINISH_REASON_STOP, completionTokens: 4 });
  stream.complete(withReasoning);
  const chunks = out.events.filter((e): e is { choices: Array<{ delta: Record<string, string> }> } => e !== "[DONE]");
  for (const [i, chunk] of chunks.entries()) t.same(specViolations("CreateChatCompletionStreamResponse", chunk), [], `chunk ${i}`);
  const deltas = chunks.flatMap((c) => c.choices.map((ch) => ch.delta));
  t.same(deltas.map((d) => d.reasoning_content ?? "").join(""), "Let me think.");
  t.ok(deltas.every((d) => d.reasoning === d.reasoning_content), "both names, equal");
  t.ok(deltas.findIndex((d) => d.reasoning_content === " think.") < deltas.findIndex((d) => d.content === "Hi"), "reasoning merged while behind still goes before the answer");

  const body = parseResponseCreateRequest({ model: "m/x", input: "hi" });
  const response = newResponseObject(body, { id: "resp_1", createdAt: 1_700_000_000, conversationId: null }, "in_progress");
  const events: ResponseEvent[] = [];
  const builder = new ResponseOutputBuilder((e) => events.push(e));
  response.output = builder.output;
  builder.delta({ choiceIndex: 0, text: "", tokens: 2, toolCalls: [], reasoning: "Let me" });
  builder.delta({ choiceIndex: 0, text: "", tokens: 1, toolCalls: [], reasoning: " think." });
  builder.delta({ choiceIndex: 0, text: "Hi", tokens: 1, toolCalls: [] });
  builder.end(FinishReason.FINISH_REASON_STOP);
  Object.assign(response, { status: "completed", completed_at: 1_700_000_001, usage: responseUsage(withReasoning) });
  t.same(specViolations("Response", response, ["/user"]), [], "a response with a reasoning item");
  t.same(response.output[0], { type: "reasoning", id: response.output[0]!.id, summary: [], content: [{ type: "reasoning_text", text: "Let me think." }], status: "completed" });
  t.equal(response.usage?.output_tokens_details.reasoning_tokens, 3);
  const numbered = [...events, { type: "response.completed", response }].map((e, sequence_number) => ({ ...e, sequence_number }));
  for (const e of numbered) t.same(eventViolations(e, RESPONSE_EXCEPT.map((p) => `/response${p}`)), [], e.type);
});
