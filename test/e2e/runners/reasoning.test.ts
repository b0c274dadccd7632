import t, { type Test } from "tap";
import { createLogger } from "../../../lib/log.js";
import { loadCatalog } from "../../../modules/catalog/mod.js";
import { FinishReason, GenerateRequest, ResponseFormat_Type, type TokenLogprob, type ToolCallDelta } from "../../../proto/gen/tributary/v1/inference.js";
import { HarmonyChatWrapper, QwenChatWrapper } from "node-llama-cpp";
import { LlamaEngine } from "../../../runners/engines/llama/llama-engine.js";
import { renderPrompt } from "../../../runners/engines/llama/chat-prompt.js";
import { HARMONY_SCRIPTS, JSON_SCHEMA, JSON_SCRIPTS, JSON_THINKING_OFF_ANSWER, QWEN3_SCRIPTS, REPLIES, scriptedModelId, THINKING_OFF_ANSWER, writeScriptedCatalog, type ScriptName } from "../../harness/scripted-models.js";

// Reasoning in the llama engine, on models whose replies are scripted token by token
// (test/harness/scripted-models.ts): the thought segment of the template (node-llama-cpp's Qwen
// wrapper; its Harmony wrapper for gpt-oss's channels) splits each reply into reasoning and answer
// as it streams, markers split across tokens included; reasoning tokens are counted;
// reasoning_effort turns Qwen3's thinking off, and sets gpt-oss's reasoning level, in the prompt;
// a tool call after the reasoning still parses; reasoning given back renders as the thought; under
// response_format the model reasons freely and only its answer keeps to the grammar.

const NAMES = [...QWEN3_SCRIPTS, ...JSON_SCRIPTS, "hiddenThink", ...HARMONY_SCRIPTS] as const;
const { catalog } = writeScriptedCatalog(NAMES);
const specs = loadCatalog(catalog);
const engines = new Map<ScriptName, LlamaEngine>();
for (const name of NAMES) {
  const spec = specs.find((s) => s.id === scriptedModelId(name))!;
  const engine = new LlamaEngine(spec, { modelPath: async () => spec.source, log: createLogger("test") });
  await engine.load();
  engines.set(name, engine);
}
t.teardown(async () => {
  for (const e of engines.values()) await e.dispose();
});

interface Delta {
  kind: "reasoning" | "text";
  text: string;
  tokens: number;
  logprobs?: TokenLogprob[];
}

async function run(name: ScriptName, request: Partial<GenerateRequest> = {}) {
  const engine = engines.get(name)!;
  const prepared = await engine.prepare(GenerateRequest.fromPartial({
    requestId: "r",
    model: scriptedModelId(name),
    messages: [{ role: "user", content: "Hi" }],
    sampling: { temperature: 1, maxTokens: 64, n: 1 },
    wantRenderedPrompt: true,
    ...request,
  }));
  const deltas: Delta[] = [];
  const calls: ToolCallDelta[] = [];
  const outcome = await engine.runChoice(prepared, 0, 0, {
    text: (text, tokens, logprobs) => deltas.push({ kind: "text", text, tokens, logprobs }),
    reasoning: (text, tokens) => deltas.push({ kind: "reasoning", text, tokens }),
    toolCall: (d) => calls.push(d),
  }, new AbortController().signal);
  const joined = (kind: Delta["kind"]) => deltas.filter((d) => d.kind === kind).map((d) => d.text).join("");
  return { prompt: prepared.renderedPrompt!, deltas, calls, outcome, reasoning: joined("reasoning"), answer: joined("text") };
}

t.test("a thinking reply: reasoning and answer apart, reasoning first, its tokens counted", async (t) => {
  const r = await run("think");
  t.equal(r.reasoning, REPLIES.think.reasoning);
  t.equal(r.answer, REPLIES.think.answer);
  t.equal(r.outcome.finishReason, FinishReason.FINISH_REASON_STOP);
  t.equal(r.outcome.reasoningTokens, REPLIES.think.reasoningTokens, "<think> through </think>");
  t.equal(r.outcome.completionTokens, 9, "every token of the reply (the end of turn is not one)");
  t.equal(r.deltas.reduce((n, d) => n + d.tokens, 0), 9, "the deltas carry every token");
  const firstText = r.deltas.findIndex((d) => d.kind === "text");
  t.ok(r.deltas.slice(0, firstText).every((d) => d.kind === "reasoning") && r.deltas.slice(firstText).every((d) => d.kind === "text"), "all the reasoning, then all the answer");
  t.notMatch(r.reasoning + r.answer, /think>/, "no marker in either");
});

t.test("`</think>` split across three tokens: no piece of it streams out on either side", async (t) => {
  const r = await run("splitClose");
  t.same([r.reasoning, r.answer], [REPLIES.splitClose.reasoning, REPLIES.splitClose.answer]);
  t.equal(r.outcome.reasoningTokens, REPLIES.splitClose.reasoningTokens, "the three closing tokens are reasoning tokens");
  for (const d of r.deltas) t.notMatch(d.text, /[<>]|think/, `delta ${JSON.stringify(d.text)}`);
  t.same(r.deltas.filter((d) => d.kind === "reasoning").map((d) => d.text), ["Hmm", ", ok", "."], "the reasoning streams token by token");
});

t.test("logprobs: the answer's tokens only (reasoning tokens have none)", async (t) => {
  const r = await run("think", { sampling: { temperature: 1, maxTokens: 64, n: 1, logprobs: true, topLogprobs: 2 } } as Partial<GenerateRequest>);
  const logprobs = r.deltas.flatMap((d) => d.logprobs ?? []);
  t.same(logprobs.map((l) => Buffer.from(l.bytes).toString("utf8")), ["\n\nHello", " there", "!"], "the answer's tokens, the first with the whitespace it was written with");
  t.ok(logprobs.every((l) => l.logprob > -1e-3 && l.top.length === 2), "a scripted token is certain");
  t.ok(r.deltas.filter((d) => d.kind === "reasoning").every((d) => d.logprobs === undefined));
});

t.test("reasoning_effort none and minimal turn thinking off in the prompt (Qwen3's enable_thinking=false); the others leave it on", async (t) => {
  for (const effort of ["none", "minimal"]) {
    const r = await run("think", { reasoningEffort: effort });
    t.ok(r.prompt.endsWith("<|im_start|>assistant\n<think>\n\n</think>\n\n"), `${effort}: the prompt holds an empty thought`);
    t.same([r.reasoning, r.answer, r.outcome.reasoningTokens], ["", THINKING_OFF_ANSWER, 0], `${effort}: the reply is all answer`);
  }
  for (const effort of ["", "low", "medium", "high", "xhigh", "max"]) {
    const r = await run("think", { reasoningEffort: effort });
    t.ok(r.prompt.endsWith("<|im_start|>assistant\n"), `${JSON.stringify(effort)}: the template's default, thinking on`);
    t.equal(r.reasoning, REPLIES.think.reasoning);
  }
});

/** A reply that reasoned, then called get_weather for Paris: no answer text, the call whole. */
function checkCallAfterReasoning(t: Test, r: Awaited<ReturnType<typeof run>>, script: "tool" | "harmonyTool"): void {
  t.equal(r.reasoning, REPLIES[script].reasoning);
  t.equal(r.answer, "", "no answer text: the call's prefix or message header is not content");
  t.equal(r.outcome.finishReason, FinishReason.FINISH_REASON_TOOL_CALLS);
  t.equal(r.outcome.reasoningTokens, REPLIES[script].reasoningTokens);
  t.equal(r.calls[0]?.name, "get_weather");
  t.same(JSON.parse(r.calls.map((c) => c.arguments).join("")), { city: "Paris" });
}

t.test("a tool call after the reasoning parses: the call's name and arguments valid for its schema", async (t) => {
  const parameters = { type: "object", properties: { city: { type: "string", enum: ["Paris"] } }, required: ["city"] };
  const r = await run("tool", {
    tools: [{ name: "get_weather", description: "The weather in a city", parametersJson: JSON.stringify(parameters), strict: true }],
    parallelToolCalls: false,
  });
  checkCallAfterReasoning(t, r, "tool");
});

t.test("reasoning given back in the history goes to the template as the turn's thought", async (t) => {
  // Qwen's template keeps only the last turn's thought: one earlier in the conversation is left out.
  const r = await run("think", {
    messages: [
      { role: "user", content: "Hi", name: "", toolCalls: [], toolCallId: "" },
      { role: "assistant", content: "Hello.", name: "", toolCalls: [], toolCallId: "", reasoning: "Greet back." },
      { role: "user", content: "Again", name: "", toolCalls: [], toolCallId: "" },
    ],
  });
  t.notMatch(r.prompt, /Greet back/, "an earlier turn's thought is not rendered (keepOnlyLastThought, like Qwen3's template)");
  t.match(r.prompt, /<\|im_start\|>assistant\nHello\.<\|im_end\|>/);
  t.equal(r.reasoning, REPLIES.think.reasoning);
  const kept = renderPrompt(new QwenChatWrapper({ keepOnlyLastThought: false }), [
    { role: "user", content: "Hi", name: "", toolCalls: [], toolCallId: "" },
    { role: "assistant", content: "Hello.", name: "", toolCalls: [], toolCallId: "", reasoning: "Greet back." },
    { role: "user", content: "Again", name: "", toolCalls: [], toolCallId: "" },
  ], undefined).text.toString();
  t.match(kept, "<|im_start|>assistant\n<think>\nGreet back.\n</think>Hello.<|im_end|>", "a template that keeps thoughts renders it as the turn's thought segment");
});

const jsonSchema = { responseFormat: { type: ResponseFormat_Type.TYPE_JSON_SCHEMA, name: "answer", schemaJson: JSON.stringify(JSON_SCHEMA) } };
const sampling = (more: Partial<NonNullable<GenerateRequest["sampling"]>>) => ({ sampling: { temperature: 1, maxTokens: 64, n: 1, ...more } }) as Partial<GenerateRequest>;

t.test("response_format after reasoning: the thought opened in the prompt and free, the answer alone under the grammar", async (t) => {
  const r = await run("json", jsonSchema);
  t.ok(r.prompt.endsWith("<|im_start|>assistant\n<think>"), "the reply starts inside the thought");
  t.equal(r.reasoning, REPLIES.json.reasoning);
  t.equal(r.answer, REPLIES.json.answer, "the answer, without the blank line after the thought");
  t.same(JSON.parse(r.answer), { answer: "yes" });
  t.equal(r.outcome.finishReason, FinishReason.FINISH_REASON_STOP, "the value complete");
  t.equal(r.outcome.reasoningTokens, REPLIES.json.reasoningTokens);
  t.equal(r.outcome.completionTokens, 12, "the reasoning's tokens and the answer's (<think> is the prompt's)");
  t.equal(r.deltas.reduce((n, d) => n + d.tokens, 0), 12, "the deltas carry every token");
  const firstText = r.deltas.findIndex((d) => d.kind === "text");
  t.ok(firstText > 0 && r.deltas.slice(firstText).every((d) => d.kind === "text"), "all the reasoning, then all the answer");

  const object = await run("json", { responseFormat: { type: ResponseFormat_Type.TYPE_JSON_OBJECT, name: "", schemaJson: "" } });
  t.same([object.reasoning, object.answer], [REPLIES.json.reasoning, REPLIES.json.answer], "json_object too");

  const plain = await run("json");
  t.ok(plain.prompt.endsWith("<|im_start|>assistant\n"), "without a response format the model opens its thought itself");
  t.same([plain.reasoning, plain.answer], [REPLIES.json.reasoning, REPLIES.json.answer]);
});

t.test("response_format: a token that closes the thought and starts the answer is taken back; the answer is decoded under the grammar", async (t) => {
  const r = await run("jsonSplitClose", jsonSchema);
  t.equal(r.reasoning, REPLIES.jsonSplitClose.reasoning);
  const value = JSON.parse(r.answer) as { answer?: unknown };
  t.ok(value.answer === "yes" || value.answer === "no", `valid for the schema: ${r.answer}`);
  t.equal(r.outcome.finishReason, FinishReason.FINISH_REASON_STOP);
  t.notMatch(r.reasoning + r.answer, /[<>]|think/, "no piece of the marker on either side");
});

t.test("response_format with thinking off: the grammar from the first token, as without reasoning", async (t) => {
  for (const effort of ["none", "minimal"]) {
    const r = await run("json", { ...jsonSchema, reasoningEffort: effort });
    t.ok(r.prompt.endsWith("<think>\n\n</think>\n\n"), `${effort}: the template's empty thought, nothing opened after it`);
    t.same([r.reasoning, r.answer, r.outcome.reasoningTokens], ["", JSON_THINKING_OFF_ANSWER, 0], effort);
  }
});

t.test("response_format after reasoning: logprobs of the answer's tokens only, stop sequences in the answer", async (t) => {
  const r = await run("json", { ...jsonSchema, ...sampling({ logprobs: true, topLogprobs: 1 }) });
  t.same(r.deltas.flatMap((d) => d.logprobs ?? []).map((l) => Buffer.from(l.bytes).toString("utf8")), ['\n\n{"', "answer", '":', ' "', "yes", '"}']);
  const stopped = await run("json", { ...jsonSchema, ...sampling({ stop: ["yes"] }) });
  t.same([stopped.reasoning, stopped.answer, stopped.outcome.finishReason], [REPLIES.json.reasoning, '{"answer": "', FinishReason.FINISH_REASON_STOP]);
});

t.test("response_format: a thought still open when max_tokens runs out ends with length and no answer", async (t) => {
  const r = await run("json", { ...jsonSchema, ...sampling({ maxTokens: 3 }) });
  t.same([r.reasoning, r.answer, r.outcome.finishReason, r.outcome.completionTokens], ["The user wants", "", FinishReason.FINISH_REASON_LENGTH, 3]);
  const closedAtTheEnd = await run("json", { ...jsonSchema, ...sampling({ maxTokens: 6 }) });
  t.same([closedAtTheEnd.reasoning, closedAtTheEnd.answer, closedAtTheEnd.outcome.finishReason], [REPLIES.json.reasoning, "", FinishReason.FINISH_REASON_LENGTH], "a thought that closes on the last token leaves no room for the answer");
});

t.test("`<think>` and `</think>` as control tokens (hidden from text): the decoder shows them, the reply still splits", async (t) => {
  const r = await run("hiddenThink");
  t.same([r.reasoning, r.answer, r.outcome.reasoningTokens], [REPLIES.hiddenThink.reasoning, REPLIES.hiddenThink.answer, REPLIES.hiddenThink.reasoningTokens]);
  t.notMatch(r.reasoning + r.answer, /think>/);
});

// gpt-oss (harmony): `<|channel|>analysis<|message|>...<|end|>` is the reasoning,
// `<|start|>assistant<|channel|>final<|message|>...` the answer, `<|return|>` the end.
const HARMONY_MARKUP = /<\||\|>|channel|analysis|final\b|assistant|<\|mess|age\|>|<\|en|d\|>/;

t.test("gpt-oss: the analysis channel is the reasoning, the final channel the answer, no markup in either", async (t) => {
  for (const name of ["harmonyThink", "harmonySplit"] as const) {
    const r = await run(name);
    t.ok(r.prompt.endsWith("<|start|>user<|message|>Hi<|end|><|start|>assistant"), `${name}: the Harmony wrapper's prompt`);
    t.same([r.reasoning, r.answer], [REPLIES[name].reasoning, REPLIES[name].answer], name);
    t.equal(r.outcome.finishReason, FinishReason.FINISH_REASON_STOP);
    t.equal(r.outcome.reasoningTokens, REPLIES[name].reasoningTokens, `${name}: the analysis message's tokens, its header through <|end|>`);
    t.equal(r.deltas.reduce((n, d) => n + d.tokens, 0), r.outcome.completionTokens, `${name}: the deltas carry every token`);
    for (const d of r.deltas) t.notMatch(d.text, HARMONY_MARKUP, `${name}: delta ${JSON.stringify(d.text)}`);
    const firstText = r.deltas.findIndex((d) => d.kind === "text");
    t.ok(r.deltas.slice(firstText).every((d) => d.kind === "text"), `${name}: all the reasoning, then all the answer`);
  }
  const think = await run("harmonyThink");
  t.equal(think.outcome.completionTokens, 18, "every token of the reply (<|return|> ends it and is not one)");
  t.same(think.deltas.filter((d) => d.kind === "reasoning").map((d) => d.text), ["Let", " me", " think", "."], "the reasoning streams token by token");
  t.same(think.deltas.filter((d) => d.kind === "text").map((d) => d.text), ["Hello", " there", "!"], "the answer too, once its header (in plain pieces) is whole");
});

t.test("gpt-oss under response_format: the analysis free, then the final message's header, then the answer under the grammar", async (t) => {
  // The script's final message follows its analysis in plain pieces; under the grammar the engine
  // writes the header itself and the answer is the grammar's (unscripted: any value the schema allows).
  const r = await run("harmonyThink", { ...jsonSchema, ...sampling({ maxTokens: 48 }) });
  t.ok(r.prompt.endsWith("<|start|>assistant<|channel|>analysis<|message|>"), "the reply starts inside the analysis message");
  t.equal(r.reasoning, REPLIES.harmonyThink.reasoning);
  t.equal(r.outcome.finishReason, FinishReason.FINISH_REASON_STOP, `the value complete: ${JSON.stringify(r.answer)}`);
  t.match(JSON.parse(r.answer), { answer: /^(yes|no)$/ }, "the answer keeps to the schema");
  t.notMatch(r.answer, /<\||\|>|channel/, "no header in the answer");
});

t.test("gpt-oss: logprobs cover the final message's text, not its header", async (t) => {
  const r = await run("harmonySplit", { sampling: { temperature: 1, maxTokens: 64, n: 1, logprobs: true, topLogprobs: 0 } } as Partial<GenerateRequest>);
  t.same(r.deltas.flatMap((d) => d.logprobs ?? []).map((l) => Buffer.from(l.bytes).toString("utf8")), ["Sure", "!"]);
});

t.test("gpt-oss: reasoning_effort sets the reasoning level of the system message (none and minimal: low; it cannot be turned off)", async (t) => {
  const levels: Record<string, string> = { "": "medium", none: "low", minimal: "low", low: "low", medium: "medium", high: "high", xhigh: "high", max: "high" };
  for (const [effort, level] of Object.entries(levels)) {
    const r = await run("harmonyThink", { reasoningEffort: effort });
    t.match(r.prompt, new RegExp(`^<\\|start\\|>system<\\|message\\|>[^]*\nReasoning: ${level}\n[^]*?<\\|end\\|>`), `${JSON.stringify(effort)}: Reasoning: ${level}`);
    t.equal(r.prompt.match(/Reasoning: /g)?.length, 1);
    t.same([r.reasoning, r.answer], [REPLIES.harmonyThink.reasoning, REPLIES.harmonyThink.answer], `${JSON.stringify(effort)}: the reply still splits`);
  }
});

t.test("gpt-oss: a tool call in the commentary channel after the analysis parses, none of its header in the answer", async (t) => {
  const parameters = { type: "object", properties: { city: { type: "string", enum: ["Paris"] } }, required: ["city"] };
  const r = await run("harmonyTool", {
    tools: [{ name: "get_weather", description: "The weather in a city", parametersJson: JSON.stringify(parameters), strict: true }],
    parallelToolCalls: false,
  });
  t.match(r.prompt, "namespace functions {", "the tools are in the developer message");
  checkCallAfterReasoning(t, r, "harmonyTool");
});

t.test("gpt-oss: reasoning given back in the history renders as the turn's analysis message where the template keeps it", async (t) => {
  const history = [
    { role: "user", content: "Hi", name: "", toolCalls: [], toolCallId: "" },
    { role: "assistant", content: "Hello.", name: "", toolCalls: [], toolCallId: "", reasoning: "Greet back." },
    { role: "user", content: "Again", name: "", toolCalls: [], toolCallId: "" },
  ];
  const r = await run("harmonyThink", { messages: history });
  t.notMatch(r.prompt, /Greet back/, "an earlier turn's analysis is dropped (keepOnlyLastThought, as gpt-oss's template drops it)");
  t.match(r.prompt, "<|end|><|start|>assistant<|channel|>final<|message|>Hello.<|end|><|start|>user<|message|>Again<|end|><|start|>assistant");
  t.equal(r.reasoning, REPLIES.harmonyThink.reasoning);
  const kept = renderPrompt(new HarmonyChatWrapper({ keepOnlyLastThought: false }), history, undefined).text.toString();
  t.match(kept, "<|start|>user<|message|>Hi<|end|><|start|>assistant<|channel|>analysis<|message|>Greet back.<|end|><|start|>assistant<|channel|>final<|message|>Hello.<|end|>", "a template that keeps thoughts renders it as the analysis channel");
});
