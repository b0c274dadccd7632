// tier: slow (a stack of its own, serving scripted reasoning models)
import t from "tap";
import { startStack } from "../../harness/stack.js";
import { specViolations } from "../../harness/openai-spec.js";
import { JSON_SCHEMA, JSON_THINKING_OFF_ANSWER, QWEN3_SCRIPTS, REPLIES, scriptedModelId, THINKING_OFF_ANSWER, writeScriptedCatalog } from "../../harness/scripted-models.js";

// A reasoning model's reply through chat completions: the thought apart from the answer, under
// both names clients read it by (reasoning_content and reasoning), streamed and not, for every
// choice; reasoning_tokens counted; reasoning_effort honoured; either name accepted back in the
// history; response_format after the reasoning (the content alone is the JSON); gpt-oss's
// channels (harmony) split the same way. Models: Qwen3-style and gpt-oss-style GGUFs whose replies
// are scripted (test/harness/scripted-models.ts).

const { catalog } = writeScriptedCatalog([...QWEN3_SCRIPTS, "json", "harmonyThink"]);
const stack = await startStack(t, { env: { TRIBUTARY_CATALOG: catalog } });
const THINK = scriptedModelId("think");
const messages = [{ role: "user" as const, content: "Hi" }];
type Loose = Record<string, any>;

t.test("non-streamed: the answer in content, the thought in reasoning_content and reasoning, its tokens counted", async (t) => {
  const c = await stack.client.chat.completions.create({ model: THINK, messages, n: 2 });
  t.same(specViolations("CreateChatCompletionResponse", c), [], "the spec's shape (the two reasoning keys are additions)");
  for (const choice of c.choices) {
    const m = choice.message as Loose;
    t.equal(m.content, REPLIES.think.answer, `choice ${choice.index}: the answer alone`);
    t.equal(m.reasoning_content, REPLIES.think.reasoning);
    t.equal(m.reasoning, REPLIES.think.reasoning);
    t.equal(choice.finish_reason, "stop");
  }
  t.equal(c.usage!.completion_tokens_details!.reasoning_tokens, 2 * REPLIES.think.reasoningTokens, "both choices' reasoning tokens");
  t.equal(c.usage!.completion_tokens, 2 * 9);
});

t.test("streamed: reasoning deltas first, then the answer's, for every choice; the usage chunk counts them", async (t) => {
  const stream = await stack.client.chat.completions.create({ model: THINK, messages, n: 2, stream: true, stream_options: { include_usage: true } });
  const seen = [{ reasoning: "", content: "", order: "" }, { reasoning: "", content: "", order: "" }];
  let usage: Loose | undefined;
  for await (const chunk of stream) {
    t.same(specViolations("CreateChatCompletionStreamResponse", chunk), []);
    if (chunk.usage) usage = chunk.usage;
    for (const choice of chunk.choices) {
      const d = choice.delta as Loose;
      const s = seen[choice.index]!;
      if (d.reasoning_content) {
        t.equal(d.reasoning, d.reasoning_content, "both names in the same delta");
        s.reasoning += d.reasoning_content;
        if (!s.order.endsWith("r")) s.order += "r";
      }
      if (d.content) {
        s.content += d.content;
        if (!s.order.endsWith("c")) s.order += "c";
      }
    }
  }
  for (const s of seen) t.same(s, { reasoning: REPLIES.think.reasoning, content: REPLIES.think.answer, order: "rc" });
  t.equal(usage?.completion_tokens_details.reasoning_tokens, 2 * REPLIES.think.reasoningTokens);
});

t.test("a `</think>` split across tokens never shows in a chunk", async (t) => {
  const res = await stack.fetch("/v1/chat/completions", { method: "POST", body: JSON.stringify({ model: scriptedModelId("splitClose"), messages, stream: true }) });
  const text = await res.text();
  t.notMatch(text, /think>|"<\/"|<\//, "no piece of the marker in the stream");
  const deltas = text.split("\n\n").filter((e) => e.startsWith("data: {")).map((e) => JSON.parse(e.slice(6)).choices[0]?.delta ?? {});
  t.equal(deltas.map((d) => d.reasoning_content ?? "").join(""), REPLIES.splitClose.reasoning);
  t.equal(deltas.map((d) => d.content ?? "").join(""), REPLIES.splitClose.answer);
});

t.test("reasoning_effort none and minimal: thinking off, no reasoning keys, no reasoning tokens", async (t) => {
  for (const effort of ["none", "minimal"] as const) {
    const c = await stack.client.chat.completions.create({ model: THINK, messages, reasoning_effort: effort } as never) as Loose;
    t.equal(c.choices[0].message.content, THINKING_OFF_ANSWER, effort);
    t.notOk("reasoning_content" in c.choices[0].message || "reasoning" in c.choices[0].message, "no reasoning keys without reasoning");
    t.equal(c.usage.completion_tokens_details.reasoning_tokens, 0);
  }
  const high = await stack.client.chat.completions.create({ model: THINK, messages, reasoning_effort: "high" }) as Loose;
  t.equal(high.choices[0].message.reasoning_content, REPLIES.think.reasoning, "high: the template's default, thinking on");
});

t.test("a tool call after the reasoning: tool_calls parse, the reasoning kept beside them", async (t) => {
  const c = await stack.client.chat.completions.create({
    model: scriptedModelId("tool"),
    messages: [{ role: "user", content: "Weather in Paris?" }],
    tools: [{ type: "function", function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string", enum: ["Paris"] } }, required: ["city"] } } }],
    parallel_tool_calls: false,
  });
  const choice = c.choices[0]!;
  t.equal(choice.finish_reason, "tool_calls");
  t.equal(choice.message.content, null);
  t.equal((choice.message as Loose).reasoning_content, REPLIES.tool.reasoning);
  const call = choice.message.tool_calls![0]! as Loose;
  t.equal(call.function.name, "get_weather");
  t.same(JSON.parse(call.function.arguments), { city: "Paris" });
});

t.test("logprobs with reasoning: the answer's tokens only", async (t) => {
  const c = await stack.client.chat.completions.create({ model: THINK, messages, logprobs: true });
  t.same(c.choices[0]!.logprobs!.content!.map((l) => l.token), ["\n\nHello", " there", "!"]);
});

t.test("the reasoning of an assistant turn given back: either name, both when equal; different ones are a 400", async (t) => {
  const history = (extra: Loose) => [{ role: "user", content: "Hi" }, { role: "assistant", content: "Hello.", ...extra }, { role: "user", content: "Again" }];
  for (const extra of [{ reasoning_content: "Greet." }, { reasoning: "Greet." }, { reasoning_content: "Greet.", reasoning: "Greet." }, { reasoning_content: null }]) {
    const res = await stack.fetch("/v1/chat/completions", { method: "POST", body: JSON.stringify({ model: THINK, messages: history(extra) }) });
    t.equal(res.status, 200, JSON.stringify(extra));
  }
  const bad = async (extra: Loose, param: string) => {
    const res = await stack.fetch("/v1/chat/completions", { method: "POST", body: JSON.stringify({ model: THINK, messages: history(extra) }) });
    t.equal(res.status, 400, JSON.stringify(extra));
    t.equal(((await res.json()) as Loose).error.param, param);
  };
  await bad({ reasoning_content: "A", reasoning: "B" }, "messages[1].reasoning");
  await bad({ reasoning_content: 5 }, "messages[1].reasoning_content");
  await bad({ reasoning: ["x"] }, "messages[1].reasoning");
});

t.test("response_format json_schema: the model reasons first, the content alone is JSON valid for the schema", async (t) => {
  const JSON_MODEL = scriptedModelId("json");
  const response_format = { type: "json_schema" as const, json_schema: { name: "answer", schema: JSON_SCHEMA, strict: true } };
  const c = await stack.client.chat.completions.create({ model: JSON_MODEL, messages, response_format });
  const m = c.choices[0]!.message as Loose;
  t.equal(m.reasoning_content, REPLIES.json.reasoning);
  t.same(JSON.parse(m.content), { answer: "yes" }, m.content);
  t.equal(c.choices[0]!.finish_reason, "stop");
  t.equal(c.usage!.completion_tokens_details!.reasoning_tokens, REPLIES.json.reasoningTokens);

  const stream = await stack.client.chat.completions.create({ model: JSON_MODEL, messages, response_format, stream: true });
  const seen = { reasoning: "", content: "", order: "" };
  for await (const chunk of stream) {
    const d = (chunk.choices[0]?.delta ?? {}) as Loose;
    if (d.reasoning_content) [seen.reasoning, seen.order] = [seen.reasoning + d.reasoning_content, seen.order.endsWith("r") ? seen.order : seen.order + "r"];
    if (d.content) [seen.content, seen.order] = [seen.content + d.content, seen.order.endsWith("c") ? seen.order : seen.order + "c"];
  }
  t.same(seen, { reasoning: REPLIES.json.reasoning, content: REPLIES.json.answer, order: "rc" }, "streamed: the reasoning, then the JSON");

  const off = await stack.client.chat.completions.create({ model: JSON_MODEL, messages, response_format, reasoning_effort: "none" } as never) as Loose;
  t.equal(off.choices[0].message.content, JSON_THINKING_OFF_ANSWER, "thinking off: JSON from the first token");

  const short = await stack.client.chat.completions.create({ model: JSON_MODEL, messages, response_format, max_tokens: 3 });
  t.equal(short.choices[0]!.finish_reason, "length", "the reasoning ate the budget");
  t.notOk(short.choices[0]!.message.content, "no content");
  t.equal((short.choices[0]!.message as Loose).reasoning_content, "The user wants");
});

t.test("gpt-oss: the analysis channel in reasoning_content, the final channel in content, no channel markup in any chunk", async (t) => {
  const GPT_OSS = scriptedModelId("harmonyThink");
  const c = await stack.client.chat.completions.create({ model: GPT_OSS, messages, reasoning_effort: "none" } as never) as Loose;
  t.equal(c.choices[0].message.content, REPLIES.harmonyThink.answer);
  t.equal(c.choices[0].message.reasoning_content, REPLIES.harmonyThink.reasoning, "effort none: gpt-oss still reasons (at its low level)");
  t.equal(c.usage.completion_tokens_details.reasoning_tokens, REPLIES.harmonyThink.reasoningTokens);
  const res = await stack.fetch("/v1/chat/completions", { method: "POST", body: JSON.stringify({ model: GPT_OSS, messages, stream: true, reasoning_effort: "high" }) });
  const text = await res.text();
  t.notMatch(text, /<\||\|>|channel|analysis/, "no piece of a channel header in the stream");
  const deltas = text.split("\n\n").filter((e) => e.startsWith("data: {")).map((e) => JSON.parse(e.slice(6)).choices[0]?.delta ?? {});
  t.equal(deltas.map((d) => d.reasoning_content ?? "").join(""), REPLIES.harmonyThink.reasoning);
  t.equal(deltas.map((d) => d.content ?? "").join(""), REPLIES.harmonyThink.answer);
});
