import t from "tap";
import { ChatChunkStream, type ChatStreamOptions } from "../../gateway/sse/chat-stream.js";
import { RecordedSseOutput } from "../harness/recorded-sse-output.js";
import { RunnerLost } from "../../modules/errors/mod.js";
import { FinishReason, type ToolCallDelta } from "../../proto/gen/tributary/v1/inference.js";

// The chat chunk stream, driven with scripted runner events; its output is the exact bytes an
// SSE client receives, recorded write by write, with the socket's backpressure played by hand.


function chatStream(options: Partial<ChatStreamOptions> & { maxPendingBytes?: number } = {}) {
  const { maxPendingBytes = 1_000, ...streamOptions } = options;
  const out = new RecordedSseOutput(maxPendingBytes);
  let overflows = 0;
  const stream = new ChatChunkStream(out, {
    id: "chatcmpl-1", requestId: "req_1", created: 1_700_000_000, model: "m/x", choices: 1, includeUsage: false,
    onOverflow: () => overflows++, ...streamOptions,
  });
  return { out, stream, overflows: () => overflows };
}

const text = (value: string, choiceIndex = 0) => ({ choiceIndex, text: value, toolCalls: [], tokens: 1 });
const calls = (toolCalls: Array<Partial<ToolCallDelta> & { index: number }>, choiceIndex = 0) => ({
  choiceIndex, text: "", tokens: 1, toolCalls: toolCalls.map((c) => ({ id: "", name: "", arguments: "", ...c })),
});
const end = (finishReason = FinishReason.FINISH_REASON_STOP, choiceIndex = 0) => ({ choiceIndex, finishReason, completionTokens: 2 });
/** The `choices[0]` of each chunk event: its index, delta and finish reason. */
const choicesOf = (events: unknown[]) =>
  events.map((e) => (e === "[DONE]" ? e : (e as { choices: Array<{ index: number; delta: unknown; finish_reason: unknown }> }).choices[0] ?? "no choice"));

t.test("the bytes of a short answer: role, content, finish, [DONE]", async (t) => {
  const { out, stream } = chatStream();
  stream.delta(text("Once"));
  stream.delta(text(" upon"));
  stream.choiceEnd(end());
  stream.complete({ promptTokens: 5, completionTokens: 2, cachedPromptTokens: 0 });
  const head = `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"m/x","service_tier":"default","choices":[{"index":0,"delta":`;
  t.same(out.writes, [
    `data: ${head}{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}]}\n\n` +
      `data: ${head}{"content":"Once"},"logprobs":null,"finish_reason":null}]}\n\n`,
    `data: ${head}{"content":" upon"},"logprobs":null,"finish_reason":null}]}\n\n`,
    `data: ${head}{},"logprobs":null,"finish_reason":"stop"}]}\n\n`,
    "data: [DONE]\n\n",
  ]);
  t.ok(out.ended);
});

t.test("while the client is behind, deltas of a choice merge into one chunk that goes out on drain", async (t) => {
  const { out, stream } = chatStream({ choices: 2 });
  stream.delta(text("A", 0));
  t.equal(out.writes.length, 1);
  out.fillUp();
  stream.delta(text("b", 0));
  stream.delta(text("X", 1));
  stream.delta(text("c", 0));
  stream.delta(text("Y", 1));
  stream.choiceEnd(end(FinishReason.FINISH_REASON_LENGTH, 1));
  t.equal(out.writes.length, 1, "nothing is written while the socket is full");
  out.catchUp();
  t.equal(out.writes.length, 2, "one write on drain");
  t.same(choicesOf(out.events), [
    { index: 0, delta: { role: "assistant", content: "", refusal: null }, logprobs: null, finish_reason: null },
    { index: 0, delta: { content: "A" }, logprobs: null, finish_reason: null },
    { index: 0, delta: { content: "bc" }, logprobs: null, finish_reason: null },
    { index: 1, delta: { role: "assistant", content: "", refusal: null }, logprobs: null, finish_reason: null },
    { index: 1, delta: { content: "XY" }, logprobs: null, finish_reason: null },
    { index: 1, delta: {}, logprobs: null, finish_reason: "length" },
  ], "every byte, in order per choice, in fewer chunks");
});

t.test("tool calls: the first chunk names the call, later fragments carry only arguments", async (t) => {
  const { out, stream } = chatStream();
  stream.delta(calls([{ index: 0, id: "call_1", name: "get_weather" }]));
  stream.delta(calls([{ index: 0, arguments: '{"city"' }]));
  stream.delta(calls([{ index: 0, arguments: ':"Paris"}' }]));
  stream.choiceEnd(end(FinishReason.FINISH_REASON_TOOL_CALLS));
  stream.complete(undefined);
  t.same(choicesOf(out.events), [
    { index: 0, delta: { role: "assistant", content: null, tool_calls: [{ index: 0, id: "call_1", type: "function", function: { name: "get_weather", arguments: "" } }] }, logprobs: null, finish_reason: null },
    { index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: '{"city"' } }] }, logprobs: null, finish_reason: null },
    { index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: ':"Paris"}' } }] }, logprobs: null, finish_reason: null },
    { index: 0, delta: {}, logprobs: null, finish_reason: "tool_calls" },
    "[DONE]",
  ]);
});

t.test("tool-call fragments held back while the client is behind are joined per call", async (t) => {
  const { out, stream } = chatStream();
  out.fillUp();
  stream.delta(calls([{ index: 0, id: "call_1", name: "f", arguments: '{"a"' }]));
  stream.delta(calls([{ index: 0, arguments: ":1}" }, { index: 1, id: "call_2", name: "g", arguments: "{" }]));
  stream.delta(calls([{ index: 1, arguments: "}" }]));
  out.catchUp();
  stream.delta(calls([{ index: 1, arguments: " " }]));
  t.same(choicesOf(out.events), [
    {
      index: 0,
      delta: {
        role: "assistant", content: null,
        tool_calls: [
          { index: 0, id: "call_1", type: "function", function: { name: "f", arguments: '{"a":1}' } },
          { index: 1, id: "call_2", type: "function", function: { name: "g", arguments: "{}" } },
        ],
      },
      logprobs: null, finish_reason: null,
    },
    { index: 0, delta: { tool_calls: [{ index: 1, function: { arguments: " " } }] }, logprobs: null, finish_reason: null },
  ]);
});

t.test("include_usage: every chunk says usage null, and a last chunk without choices carries it", async (t) => {
  const { out, stream } = chatStream({ includeUsage: true });
  stream.delta(text("Hi"));
  stream.choiceEnd(end());
  stream.complete({ promptTokens: 7, completionTokens: 3, cachedPromptTokens: 0 });
  const events = out.events;
  t.equal(events.at(-1), "[DONE]");
  for (const e of events.slice(0, -2)) t.equal((e as { usage: unknown }).usage, null);
  t.match(events.at(-2), {
    object: "chat.completion.chunk", choices: [],
    usage: { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10, prompt_tokens_details: { cached_tokens: 0 } },
  });
});

t.test("the end waits for nothing: complete while behind writes the rest, usage and [DONE] in the final write", async (t) => {
  const { out, stream } = chatStream();
  stream.delta(text("a"));
  out.fillUp();
  stream.delta(text("b"));
  stream.choiceEnd(end());
  stream.complete(undefined);
  t.ok(out.ended);
  t.equal(out.writes.length, 2);
  t.same(choicesOf(out.events).slice(2), [{ index: 0, delta: { content: "b" }, logprobs: null, finish_reason: null }, { index: 0, delta: {}, logprobs: null, finish_reason: "stop" }, "[DONE]"]);
});

t.test("an error after the 200 ends the stream with an error event and no [DONE]", async (t) => {
  const { out, stream } = chatStream();
  stream.delta(text("a"));
  out.fillUp();
  stream.delta(text("b"));
  stream.fail(new RunnerLost({ message: "The model runner stopped responding." }));
  t.ok(out.ended);
  const events = out.events;
  t.same(choicesOf(events.slice(0, 3)).map((c) => (c as { delta: unknown }).delta), [{ role: "assistant", content: "", refusal: null }, { content: "a" }, { content: "b" }], "what was held back goes out first");
  t.same(events.at(-1), { error: { message: "The model runner stopped responding.", type: "server_error", param: null, code: "runner_lost" } });
  t.notOk(events.includes("[DONE]"));
});

t.test("a client that falls further behind than maxPendingBytes is dropped; at the limit it is not", async (t) => {
  const atLimit = chatStream({ maxPendingBytes: 10 });
  atLimit.out.fillUp();
  atLimit.stream.delta(text("12345"));
  atLimit.stream.delta(text("67890"));
  t.equal(atLimit.overflows(), 0, "10 pending bytes: still held");
  t.notOk(atLimit.out.ended);

  const over = chatStream({ maxPendingBytes: 10 });
  over.out.fillUp();
  over.stream.delta(text("12345"));
  over.stream.delta(text("678901"));
  t.equal(over.overflows(), 1, "11 pending bytes: the generation is told to stop");
  t.ok(over.out.dropped, "the connection is dropped");
  t.same(over.out.writes, [], "the held events are not written");
  over.stream.delta(text("more"));
  over.stream.complete(undefined);
  t.equal(over.out.writes.length, 0, "nothing is written after that");
});

t.test("logprobs: a content chunk carries its text's tokens; while behind, the merged chunk carries them all", async (t) => {
  const { out, stream } = chatStream();
  const token = (text: string, logprob: number) => ({ bytes: Buffer.from(text), logprob, top: [] });
  const delta = (...tokens: Array<[string, number]>) => ({ ...text(tokens.map(([s]) => s).join("")), tokens: tokens.length, logprobs: { tokens: tokens.map(([s, l]) => token(s, l)) } });
  stream.delta(delta(["Once", -0.5]));
  out.fillUp();
  stream.delta(delta([" up", -1], ["on", -2]));
  stream.delta(delta([" a", -0.25]));
  out.catchUp();
  stream.choiceEnd(end());
  stream.complete(undefined);
  const entry = (s: string, l: number) => ({ token: s, logprob: l, bytes: [...Buffer.from(s)], top_logprobs: [] });
  t.same(choicesOf(out.events), [
    { index: 0, delta: { role: "assistant", content: "", refusal: null }, logprobs: null, finish_reason: null },
    { index: 0, delta: { content: "Once" }, logprobs: { content: [entry("Once", -0.5)], refusal: null }, finish_reason: null },
    { index: 0, delta: { content: " upon a" }, logprobs: { content: [entry(" up", -1), entry("on", -2), entry(" a", -0.25)], refusal: null }, finish_reason: null },
    { index: 0, delta: {}, logprobs: null, finish_reason: "stop" },
    "[DONE]",
  ]);
});
