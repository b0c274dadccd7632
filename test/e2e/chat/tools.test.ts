import t from "tap";
import Ajv from "ajv";
import type OpenAI from "openai";
import { sharedStack } from "../../harness/shared-stack.js";
import { TEST_MODEL } from "../../harness/processes.js";

const stack = await sharedStack(t);
const ajv = new Ajv.default({ strict: false });

const weatherParams = {
  type: "object",
  properties: {
    city: { type: "string" },
    days: { type: "integer" },
    unit: { type: "string", enum: ["celsius", "fahrenheit"] },
    hourly: { type: "boolean" },
  },
  required: ["city", "days", "unit", "hourly"],
  additionalProperties: false,
};
const tools: OpenAI.Chat.ChatCompletionTool[] = [
  { type: "function", function: { name: "get_weather", description: "Weather forecast for a city", parameters: weatherParams } },
  { type: "function", function: { name: "get_time", description: "Current time", parameters: { type: "object", properties: { zone: { type: "string" } }, required: ["zone"] } } },
];
const validateWeather = ajv.compile(weatherParams);
const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [{ role: "user", content: "What is the weather in Paris?" }];

t.test("tool_choice required: a tool call whose arguments match the function's schema", async (t) => {
  for (const seed of [1, 2, 3]) {
    const c = await stack.client.chat.completions.create({ model: TEST_MODEL, messages, tools, tool_choice: "required", seed, parallel_tool_calls: false });
    const choice = c.choices[0]!;
    t.equal(choice.finish_reason, "tool_calls");
    t.equal(choice.message.content, null, "content is null with tool calls");
    const calls = choice.message.tool_calls!;
    t.equal(calls.length, 1);
    const call = calls[0]! as OpenAI.Chat.ChatCompletionMessageFunctionToolCall;
    t.match(call.id, /^call_/);
    t.equal(call.type, "function");
    t.ok(["get_weather", "get_time"].includes(call.function.name));
    const args = JSON.parse(call.function.arguments);
    if (call.function.name === "get_weather") t.ok(validateWeather(args), `valid arguments: ${call.function.arguments}`);
    else t.type(args.zone, "string");
  }
});

t.test("a named function is called with schema-valid arguments", async (t) => {
  const c = await stack.client.chat.completions.create({
    model: TEST_MODEL, messages, tools, tool_choice: { type: "function", function: { name: "get_weather" } }, seed: 4,
  });
  const call = c.choices[0]!.message.tool_calls![0]! as OpenAI.Chat.ChatCompletionMessageFunctionToolCall;
  t.equal(call.function.name, "get_weather");
  t.ok(validateWeather(JSON.parse(call.function.arguments)), call.function.arguments);
});

t.test("the whole tool loop works from the openai client", async (t) => {
  const first = await stack.client.chat.completions.create({
    model: TEST_MODEL, messages, tools, tool_choice: { type: "function", function: { name: "get_weather" } }, seed: 8,
  });
  const assistant = first.choices[0]!.message;
  const call = assistant.tool_calls![0]!;
  const second = await stack.client.chat.completions.create({
    model: TEST_MODEL,
    messages: [...messages, assistant, { role: "tool", tool_call_id: call.id, content: JSON.stringify({ temperature: 18, sky: "clear" }) }],
    tools,
    max_tokens: 20,
    seed: 8,
  });
  const reply = second.choices[0]!;
  t.ok(second.usage!.prompt_tokens > first.usage!.prompt_tokens, "the call and its result are part of the prompt");
  t.ok(reply.message.content !== null || reply.message.tool_calls, "the model answers after the tool result");
});

t.test("streamed tool-call deltas: id, type and name once, then argument fragments", async (t) => {
  const stream = await stack.client.chat.completions.create({
    model: TEST_MODEL, messages, tools, tool_choice: { type: "function", function: { name: "get_weather" } }, seed: 12, stream: true,
  });
  let args = "";
  let first: OpenAI.Chat.ChatCompletionChunk.Choice.Delta.ToolCall | undefined;
  let fragments = 0;
  let finish: string | null = null;
  for await (const chunk of stream)
    for (const ch of chunk.choices) {
      for (const tc of ch.delta.tool_calls ?? []) {
        if (!first) {
          first = tc;
          t.equal(ch.delta.role, "assistant", "the first delta carries the role");
          t.equal(ch.delta.content, null);
        } else {
          t.equal(tc.id, undefined, "later fragments have no id");
          t.equal(tc.function?.name, undefined, "later fragments have no name");
        }
        t.equal(tc.index, 0);
        args += tc.function?.arguments ?? "";
        fragments++;
      }
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  t.match(first?.id, /^call_/);
  t.equal(first?.type, "function");
  t.equal(first?.function?.name, "get_weather");
  t.ok(fragments > 1, "arguments arrive in several fragments");
  t.equal(finish, "tool_calls");
  t.ok(validateWeather(JSON.parse(args)), args);
});

t.test("the SDK stream helper assembles the tool call", async (t) => {
  const runner = stack.client.chat.completions.stream({ model: TEST_MODEL, messages, tools, tool_choice: "required", seed: 21, parallel_tool_calls: false });
  const final = await runner.finalChatCompletion();
  const call = final.choices[0]!.message.tool_calls![0]! as OpenAI.Chat.ChatCompletionMessageFunctionToolCall;
  t.doesNotThrow(() => JSON.parse(call.function.arguments));
  t.equal(final.choices[0]!.finish_reason, "tool_calls");
});

t.test("tool_choice none with tools answers in text", async (t) => {
  const c = await stack.client.chat.completions.create({ model: TEST_MODEL, messages, tools, tool_choice: "none", max_tokens: 10, seed: 2 });
  t.equal(c.choices[0]!.message.tool_calls, undefined);
  t.type(c.choices[0]!.message.content, "string");
});

t.test("response_format json_schema output parses and validates", async (t) => {
  const schema = { type: "object", properties: { name: { type: "string" }, age: { type: "integer" }, pets: { type: "array", items: { type: "string" } } }, required: ["name", "age", "pets"], additionalProperties: false };
  const validate = ajv.compile(schema);
  for (const seed of [1, 2]) {
    const c = await stack.client.chat.completions.create({
      model: TEST_MODEL, messages: [{ role: "user", content: "Describe a person as JSON." }], seed, max_tokens: 300,
      response_format: { type: "json_schema", json_schema: { name: "person", schema, strict: true } },
    });
    const text = c.choices[0]!.message.content!;
    t.equal(c.choices[0]!.finish_reason, "stop");
    t.ok(validate(JSON.parse(text)), text);
  }
  const obj = await stack.client.chat.completions.create({
    model: TEST_MODEL, messages: [{ role: "user", content: "Reply in JSON." }], seed: 3, max_tokens: 300, response_format: { type: "json_object" },
  });
  t.type(JSON.parse(obj.choices[0]!.message.content!), "object");
});
