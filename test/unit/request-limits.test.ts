import t from "tap";
import { readConfig, requestLimitsConfig } from "../../lib/config.js";
import { checkBodyShape, measureJson, parseChatCompletionRequest, parseResponseCreateRequest } from "../../modules/openai/mod.js";
import { renderBody } from "../../modules/responses/mod.js";

// The bounds of request contents (modules/openai/request-limits.ts) at their edges: at the
// limit passes, one past it fails with the 400 that names the parameter.

const limits = readConfig(requestLimitsConfig, {});
const nested = (depth: number): unknown => {
  let v: unknown = 1;
  for (let i = 0; i < depth; i++) v = { a: v };
  return v;
};
const schema = (depth: number): unknown => {
  // {type, properties: {a: ...}} is two levels of nesting per schema level.
  let v: unknown = { type: "string" };
  for (let i = 0; i < depth; i++) v = { type: "object", properties: { a: v } };
  return v;
};
const messages = [{ role: "user", content: "hi" }];
const refusal = (f: () => unknown) => {
  try {
    f();
    return undefined;
  } catch (err) {
    return err as { _tag: string; param: string | null; code: string };
  }
};

t.test("the defaults", async (t) => {
  t.match(limits, { maxJsonDepth: 64, maxJsonElements: 200_000, maxSchemaDepth: 32, maxTools: 128, maxChoices: 128, maxToolCalls: 1024, maxLogitBias: 1024, maxStopSequences: 4, maxStopChars: 256 });
});

t.test("measureJson counts depth and elements, and stops just past a bound", async (t) => {
  t.same(measureJson(1, { maxDepth: 10, maxElements: 10 }), { depth: 0, elements: 1 });
  t.same(measureJson({}, { maxDepth: 10, maxElements: 10 }), { depth: 1, elements: 1 });
  t.same(measureJson({ a: [1, 2, { b: null }] }, { maxDepth: 10, maxElements: 10 }), { depth: 3, elements: 6 });
  const deep = measureJson(JSON.parse('{"x":'.repeat(100_000) + "1" + "}".repeat(100_000)), { maxDepth: 64, maxElements: 1e6 });
  t.same(deep, { depth: 65, elements: 65, at: "x" }, "100,000 levels cost 65 steps");
  const wide = measureJson({ list: new Array(1_000_000).fill(0) }, { maxDepth: 64, maxElements: 100 });
  t.same(wide, { depth: 2, elements: 101, at: "list" });
});

t.test("body depth: at the limit passes, one past fails naming the top-level parameter", async (t) => {
  // The body object is level 1: metadata-free field `input` holds the rest.
  t.doesNotThrow(() => checkBodyShape({ input: nested(limits.maxJsonDepth - 1) }, limits), "at the limit");
  t.match(refusal(() => checkBodyShape({ input: nested(limits.maxJsonDepth) }, limits)), { _tag: "InvalidParam", code: "json_too_deep", param: "input" }, "one past");
});

t.test("body elements: at the limit passes, one past fails", async (t) => {
  // The body object and its array are 2 of the elements.
  t.doesNotThrow(() => checkBodyShape({ input: new Array(limits.maxJsonElements - 2).fill(0) }, limits));
  t.match(refusal(() => checkBodyShape({ input: new Array(limits.maxJsonElements - 1).fill(0) }, limits)), { code: "json_too_large", param: "input" });
});

t.test("100,000 levels inside a tool's parameters, a response format or a response's tools are 400s", async (t) => {
  const deep = JSON.parse('{"a":'.repeat(100_000) + "1" + "}".repeat(100_000));
  t.match(refusal(() => parseChatCompletionRequest({ model: "m", messages, tools: [{ type: "function", function: { name: "f", parameters: deep } }] })), { code: "json_too_deep", param: "tools" });
  t.match(refusal(() => parseChatCompletionRequest({ model: "m", messages, response_format: { type: "json_schema", json_schema: { name: "s", schema: deep } } })), { code: "json_too_deep", param: "response_format" });
  t.match(refusal(() => parseResponseCreateRequest({ model: "m", tools: [{ type: "function", name: "f", parameters: deep }] })), { code: "json_too_deep", param: "tools" });
});

t.test("schema depth: at the limit passes, one past fails naming the schema", async (t) => {
  // schema(n) is 2n+1 levels deep.
  const atLimit = schema((limits.maxSchemaDepth - 1) / 2 | 0);
  const past = schema(limits.maxSchemaDepth / 2);
  t.equal(measureJson(atLimit, { maxDepth: 100, maxElements: 1e6 }).depth, limits.maxSchemaDepth - 1);
  t.equal(measureJson(past, { maxDepth: 100, maxElements: 1e6 }).depth, limits.maxSchemaDepth + 1);
  const exact = { wrap: atLimit }; // exactly maxSchemaDepth levels
  t.doesNotThrow(() => parseResponseCreateRequest({ model: "m", text: { format: { type: "json_schema", name: "s", schema: exact } } }));
  t.match(refusal(() => parseResponseCreateRequest({ model: "m", text: { format: { type: "json_schema", name: "s", schema: { wrap: exact } } } })), { code: "schema_too_deep", param: "text.format.schema" });
  t.match(refusal(() => parseChatCompletionRequest({ model: "m", messages, tools: [{ type: "function", function: { name: "f", parameters: past } }] })), { code: "schema_too_deep", param: "tools[0].function.parameters" });
});

t.test("schema size: at the limit passes, one past fails", async (t) => {
  const sized = (chars: number) => ({ description: "d".repeat(chars - '{"description":""}'.length) });
  t.equal(JSON.stringify(sized(limits.maxSchemaChars)).length, limits.maxSchemaChars);
  t.doesNotThrow(() => parseResponseCreateRequest({ model: "m", tools: [{ type: "function", name: "f", parameters: sized(limits.maxSchemaChars) }] }));
  t.match(refusal(() => parseResponseCreateRequest({ model: "m", tools: [{ type: "function", name: "f", parameters: sized(limits.maxSchemaChars + 1) }] })), { code: "schema_too_large", param: "tools[0].parameters" });
});

t.test("tools, n, max_tool_calls, logit_bias and stop at their limits", async (t) => {
  const tools = (n: number) => Array.from({ length: n }, (_, i) => ({ type: "function", name: `f${i}` }));
  t.doesNotThrow(() => parseResponseCreateRequest({ model: "m", tools: tools(limits.maxTools) }));
  t.match(refusal(() => parseResponseCreateRequest({ model: "m", tools: tools(limits.maxTools + 1) })), { param: "tools", code: "array_above_max_length" });

  t.doesNotThrow(() => parseChatCompletionRequest({ model: "m", messages, n: limits.maxChoices }));
  t.match(refusal(() => parseChatCompletionRequest({ model: "m", messages, n: limits.maxChoices + 1 })), { param: "n", code: "integer_above_max_value" });

  t.doesNotThrow(() => parseResponseCreateRequest({ model: "m", max_tool_calls: limits.maxToolCalls }));
  t.match(refusal(() => parseResponseCreateRequest({ model: "m", max_tool_calls: limits.maxToolCalls + 1 })), { param: "max_tool_calls" });
  t.match(refusal(() => parseResponseCreateRequest({ model: "m", max_tool_calls: 1e12 })), { param: "max_tool_calls", code: "integer_above_max_value" });

  const bias = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [String(i), 1]));
  t.doesNotThrow(() => parseChatCompletionRequest({ model: "m", messages, logit_bias: bias(limits.maxLogitBias) }));
  t.match(refusal(() => parseChatCompletionRequest({ model: "m", messages, logit_bias: bias(limits.maxLogitBias + 1) })), { param: "logit_bias" });
  t.doesNotThrow(() => parseChatCompletionRequest({ model: "m", messages, logit_bias: { "2147483647": 1 } }), "the largest int32 token id");
  t.match(refusal(() => parseChatCompletionRequest({ model: "m", messages, logit_bias: { "2147483648": 1 } })), { param: "logit_bias" }, "one past int32");
  t.match(refusal(() => parseChatCompletionRequest({ model: "m", messages, logit_bias: { "-1": 1 } })), { param: "logit_bias" });

  const stops = (n: number) => Array.from({ length: n }, (_, i) => `s${i}`);
  t.doesNotThrow(() => parseChatCompletionRequest({ model: "m", messages, stop: stops(limits.maxStopSequences) }));
  t.match(refusal(() => parseChatCompletionRequest({ model: "m", messages, stop: stops(limits.maxStopSequences + 1) })), { param: "stop" });
  t.doesNotThrow(() => parseChatCompletionRequest({ model: "m", messages, stop: "x".repeat(limits.maxStopChars) }));
  t.match(refusal(() => parseChatCompletionRequest({ model: "m", messages, stop: ["ok", "x".repeat(limits.maxStopChars + 1)] })), { param: "stop[1]", code: "string_above_max_length" });
});

t.test("metadata: OpenAI's 16 keys of 64 characters with values of 512", async (t) => {
  const meta = (keys: number, keyChars = 4, valueChars = 4) => Object.fromEntries(Array.from({ length: keys }, (_, i) => [String(i).padStart(keyChars, "k"), "v".repeat(valueChars)]));
  t.doesNotThrow(() => parseResponseCreateRequest({ model: "m", metadata: meta(16, 64, 512) }));
  t.match(refusal(() => parseResponseCreateRequest({ model: "m", metadata: meta(17) })), { param: "metadata" });
  t.match(refusal(() => parseResponseCreateRequest({ model: "m", metadata: meta(1, 65) })), { _tag: "InvalidParam" });
  t.match(refusal(() => parseResponseCreateRequest({ model: "m", metadata: meta(1, 4, 513) })), { _tag: "InvalidParam" });
});

t.test("a template's rendered size is bounded before it is rendered", async (t) => {
  const body = { model: "m", input: "{{x}}{{x}}{{x}}{{x}}" };
  t.equal((renderBody(body, { x: "a".repeat(25) }, 100) as { input: string }).input.length, 100, "at the limit");
  t.match(refusal(() => renderBody(body, { x: "a".repeat(26) }, 100)), { code: "template_too_large", param: "inputs" }, "one past");
  t.equal((renderBody({ model: "m", input: "{{constructor}}" }, {}) as { input: string }).input, "{{constructor}}", "a placeholder named like a prototype member finds no inherited value");
});
