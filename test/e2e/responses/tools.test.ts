import t, { type Test } from "tap";
import Ajv from "ajv";
import type OpenAI from "openai";
import { sharedStack } from "../../harness/shared-stack.js";
import { TEST_MODEL } from "../../harness/processes.js";
import { expectApiError } from "./helpers.js";

// Function calling through the Responses API: function_call output items with schema-valid
// arguments (grammar-constrained), their stream events, and the tool loop both ways (resending
// the items, or previous_response_id).
const stack = await sharedStack(t);
const ajv = new Ajv.default({ strict: false });

const weatherParams = {
  type: "object",
  properties: {
    city: { type: "string", maxLength: 24 },
    days: { type: "integer" },
    unit: { type: "string", enum: ["celsius", "fahrenheit"] },
  },
  required: ["city", "days", "unit"],
  additionalProperties: false,
};
const timeParams = { type: "object", properties: { zone: { type: "string", maxLength: 24 } }, required: ["zone"], additionalProperties: false };
const tools: OpenAI.Responses.FunctionTool[] = [
  { type: "function", name: "get_weather", description: "Weather forecast for a city", parameters: weatherParams, strict: true },
  { type: "function", name: "get_time", description: "Current time", parameters: timeParams, strict: true },
];
const validators: Record<string, ReturnType<typeof ajv.compile>> = { get_weather: ajv.compile(weatherParams), get_time: ajv.compile(timeParams) };
const input = "What is the weather in Paris?";
type Call = OpenAI.Responses.ResponseFunctionToolCall;
const calls = (r: OpenAI.Responses.Response) => r.output.filter((o): o is Call => o.type === "function_call");

function checkCall(t: Test, call: Call) {
  t.match(call.id, /^fc_/);
  t.match(call.call_id, /^call_/);
  t.equal(call.status, "completed");
  t.ok(call.name in validators, call.name);
  const args = JSON.parse(call.arguments) as unknown;
  t.ok(validators[call.name]!(args), `arguments match ${call.name}'s schema: ${call.arguments}`);
}

t.test("tool_choice required: one function_call item with schema-valid arguments", async (t) => {
  for (let i = 0; i < 3; i++) {
    const r = await stack.client.responses.create({ model: TEST_MODEL, input, tools, tool_choice: "required", parallel_tool_calls: false });
    t.equal(r.status, "completed");
    const found = calls(r);
    t.equal(found.length, 1, "parallel_tool_calls false: one call");
    checkCall(t, found[0]!);
    t.same(r.tools.map((x) => (x as OpenAI.Responses.FunctionTool).name), ["get_weather", "get_time"], "tools echoed");
    t.equal(r.tool_choice, "required");
  }
});

t.test("a named function is called", async (t) => {
  const r = await stack.client.responses.create({ model: TEST_MODEL, input, tools, tool_choice: { type: "function", name: "get_time" } });
  const found = calls(r);
  t.ok(found.length >= 1);
  for (const c of found) {
    t.equal(c.name, "get_time");
    checkCall(t, c);
  }
  t.same(r.tool_choice, { type: "function", name: "get_time" });
});

t.test("allowed_tools restricts the calls to the listed functions", async (t) => {
  const r = await stack.client.responses.create({
    model: TEST_MODEL, input, tools,
    tool_choice: { type: "allowed_tools", mode: "required", tools: [{ type: "function", name: "get_weather" }] },
  });
  t.ok(calls(r).length >= 1);
  for (const c of calls(r)) t.equal(c.name, "get_weather");
});

t.test("max_tool_calls caps the calls of a response; 0 means none", async (t) => {
  for (const max of [1, 2]) {
    const r = await stack.client.responses.create({ model: TEST_MODEL, input, tools, tool_choice: "required", max_tool_calls: max } as OpenAI.Responses.ResponseCreateParamsNonStreaming);
    const n = calls(r).length;
    t.ok(n >= 1 && n <= max, `${n} call(s) with max_tool_calls ${max}`);
  }
  const none = await stack.client.responses.create({ model: TEST_MODEL, input, tools, max_tool_calls: 0, max_output_tokens: 32 } as OpenAI.Responses.ResponseCreateParamsNonStreaming);
  t.equal(calls(none).length, 0);
  t.equal(none.output[0]?.type, "message");
  await expectApiError(t, stack.client.responses.create({ model: TEST_MODEL, input, tools, tool_choice: "required", max_tool_calls: 0 } as OpenAI.Responses.ResponseCreateParamsNonStreaming), { status: 400, param: "max_tool_calls" });
});

t.test("tool_choice none answers in text", async (t) => {
  const r = await stack.client.responses.create({ model: TEST_MODEL, input, tools, tool_choice: "none", max_output_tokens: 24 });
  t.equal(calls(r).length, 0);
  t.equal(r.output[0]?.type, "message");
});

t.test("streamed function call: item added, argument deltas, arguments done, item done, completed", async (t) => {
  const stream = await stack.client.responses.create({ model: TEST_MODEL, input, tools, tool_choice: { type: "function", name: "get_weather" }, parallel_tool_calls: false, stream: true });
  const events: OpenAI.Responses.ResponseStreamEvent[] = [];
  for await (const e of stream) events.push(e);
  const types = events.map((e) => e.type);
  const deltas = types.filter((x) => x === "response.function_call_arguments.delta").length;
  t.ok(deltas > 1, `${deltas} argument deltas`);
  t.same(types, [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    ...Array(deltas).fill("response.function_call_arguments.delta"),
    "response.function_call_arguments.done",
    "response.output_item.done",
    "response.completed",
  ]);
  t.same(events.map((e) => e.sequence_number), events.map((_, i) => i));
  const added = events[2] as OpenAI.Responses.ResponseOutputItemAddedEvent;
  t.match(added.item, { type: "function_call", name: "get_weather", arguments: "", status: "in_progress" });
  const args = events.filter((e): e is OpenAI.Responses.ResponseFunctionCallArgumentsDeltaEvent => e.type === "response.function_call_arguments.delta").map((e) => e.delta).join("");
  const done = events.at(-3) as OpenAI.Responses.ResponseFunctionCallArgumentsDoneEvent;
  t.equal(done.arguments, args);
  t.equal((done as unknown as { name: string }).name, "get_weather");
  t.equal(done.item_id, added.item.id);
  const itemDone = events.at(-2) as OpenAI.Responses.ResponseOutputItemDoneEvent;
  t.match(itemDone.item, { type: "function_call", arguments: args, status: "completed" });
  checkCall(t, itemDone.item as Call);

  const helper = stack.client.responses.stream({ model: TEST_MODEL, input, tools, tool_choice: "required", parallel_tool_calls: false });
  const final = await helper.finalResponse();
  t.equal(calls(final).length, 1, "the stream helper assembles the call");
  checkCall(t, calls(final)[0]!);
});

t.test("tool loop with previous_response_id: the result goes in as function_call_output", async (t) => {
  const first = await stack.client.responses.create({ model: TEST_MODEL, input, tools, tool_choice: "required", parallel_tool_calls: false });
  const call = calls(first)[0]!;
  const second = await stack.client.responses.create({
    model: TEST_MODEL,
    previous_response_id: first.id,
    input: [{ type: "function_call_output", call_id: call.call_id, output: JSON.stringify({ temperature: 18, sky: "clear" }) }],
    tools,
    max_output_tokens: 24,
  });
  t.ok(["completed", "incomplete"].includes(second.status!));
  t.equal(second.previous_response_id, first.id);
  t.ok(second.usage!.input_tokens > first.usage!.input_tokens, "the call and its result are part of the prompt");
  const items = await stack.client.responses.inputItems.list(second.id);
  t.match(items.data[0], { type: "function_call_output", call_id: call.call_id, status: "completed" });
});

t.test("tool loop without state: the call item and its output are resent", async (t) => {
  const first = await stack.client.responses.create({ model: TEST_MODEL, input, tools, tool_choice: "required", parallel_tool_calls: false, store: false });
  const call = calls(first)[0]!;
  const second = await stack.client.responses.create({
    model: TEST_MODEL,
    store: false,
    tools,
    max_output_tokens: 24,
    input: [
      { role: "user", content: input },
      ...first.output as OpenAI.Responses.ResponseInputItem[],
      { type: "function_call_output", call_id: call.call_id, output: "18 degrees and clear" },
    ],
  });
  t.ok(["completed", "incomplete"].includes(second.status!));
  t.ok(second.usage!.input_tokens > first.usage!.input_tokens);
});

t.test("a function_call_output answering no call is a 400 naming the item", async (t) => {
  await expectApiError(t, stack.client.responses.create({
    model: TEST_MODEL, tools,
    input: [{ role: "user", content: "hi" }, { type: "function_call_output", call_id: "call_unknown", output: "x" }],
  }), { status: 400, param: "input[1].call_id" });
});

t.test("unsupported tool types and unknown named functions are refused", async (t) => {
  await expectApiError(t, stack.client.responses.create({ model: TEST_MODEL, input, tools: [{ type: "web_search" }] as unknown as OpenAI.Responses.Tool[] }), { status: 400, param: "tools[0].type" });
  await expectApiError(t, stack.client.responses.create({ model: TEST_MODEL, input, tools, tool_choice: { type: "function", name: "nope" } }), { status: 400, param: "tool_choice.name" });
  await expectApiError(t, stack.client.responses.create({ model: TEST_MODEL, input, tool_choice: "required" }), { status: 400, param: "tool_choice" });
  await expectApiError(t, stack.client.responses.create({ model: TEST_MODEL, input, tools: [tools[0]!, tools[0]!] }), { status: 400, param: "tools[1].name" });
  await expectApiError(t, stack.client.responses.create({ model: TEST_MODEL, input, tools: [{ type: "function", name: "bad name!", parameters: {}, strict: true }] }), { status: 400, param: "tools[0].name" });
});
