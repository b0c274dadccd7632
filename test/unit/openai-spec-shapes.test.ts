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
