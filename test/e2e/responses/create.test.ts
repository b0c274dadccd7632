import t from "tap";
import type OpenAI from "openai";
import { sharedStack } from "../../harness/shared-stack.js";
import { TEST_MODEL } from "../../harness/processes.js";
import { SHORT_JSON } from "./helpers.js";

// POST /v1/responses without streaming: the response object, its output and usage, and every
// request field echoed back. (The tiny model never ends a story by itself: a reply that must
// complete is asked for as JSON, which ends when the object closes.)
const stack = await sharedStack(t);
type Loose = Record<string, unknown>;

const REQUIRED_KEYS = [
  "id", "object", "created_at", "completed_at", "status", "background", "conversation", "error", "incomplete_details",
  "instructions", "max_output_tokens", "max_tool_calls", "model", "output", "parallel_tool_calls", "previous_response_id",
  "prompt_cache_key", "reasoning", "safety_identifier", "service_tier", "store", "temperature", "text", "tool_choice", "tools",
  "top_logprobs", "top_p", "presence_penalty", "frequency_penalty", "truncation", "usage", "user", "metadata",
];

t.test("a string input gives a completed response with one assistant message", async (t) => {
  const before = Math.floor(Date.now() / 1000);
  const r = await stack.client.responses.create({ model: TEST_MODEL, input: "Describe a cat in JSON.", max_output_tokens: 400, text: SHORT_JSON });
  for (const key of REQUIRED_KEYS) t.ok(key in r, `has ${key}`);
  t.match(r.id, /^resp_/);
  t.equal(r.object, "response");
  t.ok(r.created_at >= before && r.created_at <= Math.floor(Date.now() / 1000) + 1, "created_at in Unix seconds");
  t.equal(r.model, TEST_MODEL);
  t.equal(r.status, "completed");
  t.type(r.completed_at, "number");
  t.equal(r.error, null);
  t.equal(r.incomplete_details, null);
  t.equal(r.output.length, 1);
  const message = r.output[0]!;
  t.equal(message.type, "message");
  if (message.type !== "message") return;
  t.match(message.id, /^msg_/);
  t.equal(message.role, "assistant");
  t.equal(message.status, "completed");
  t.equal(message.content.length, 1);
  const part = message.content[0]!;
  t.equal(part.type, "output_text");
  if (part.type !== "output_text") return;
  t.ok(part.text.length > 0, "some text");
  t.same(part.annotations, []);
  t.same(part.logprobs, []);
  t.equal(r.output_text, part.text, "the SDK's output_text is the message text");
  const u = r.usage!;
  t.ok(u.input_tokens > 0);
  t.ok(u.output_tokens > 0 && u.output_tokens <= 400);
  t.equal(u.total_tokens, u.input_tokens + u.output_tokens);
  // Of the input, what the runner found cached (a prefix shared with an earlier request in its slot).
  t.ok(u.input_tokens_details.cached_tokens >= 0 && u.input_tokens_details.cached_tokens < u.input_tokens, "cached tokens are part of the input");
  t.same(u.output_tokens_details, { reasoning_tokens: 0 });
  // Required by the spec (2.3.0, ResponseUsage); the Python SDK reads a missing one as None.
  t.equal(u.input_tokens_details.cache_write_tokens, 0, "cache_write_tokens is there");
});

t.test("defaults are echoed with OpenAI's values", async (t) => {
  const r = await stack.client.responses.create({ model: TEST_MODEL, input: "Hi", max_output_tokens: 16 });
  t.equal(r.instructions, null);
  t.equal(r.temperature, 1);
  t.equal(r.top_p, 1);
  t.equal(r.parallel_tool_calls, true);
  t.equal(r.tool_choice, "auto");
  t.same(r.tools, []);
  t.same(r.text, { format: { type: "text" }, verbosity: "medium" });
  t.equal(r.truncation, "disabled");
  t.equal((r as unknown as Loose).store, true);
  t.equal(r.background, false);
  t.same(r.metadata, {});
  t.equal(r.previous_response_id, null);
  t.equal(r.conversation, null);
  t.equal(r.service_tier, "default");
  t.equal((r as unknown as Loose).max_tool_calls, null);
  t.equal(r.user, null);
});

t.test("every request field is accepted and echoed", async (t) => {
  const body = {
    model: TEST_MODEL,
    input: "Once upon a time",
    instructions: "You tell short stories.",
    temperature: 0.4,
    top_p: 0.9,
    max_output_tokens: 64,
    max_tool_calls: 2,
    parallel_tool_calls: false,
    text: { format: { type: "text" as const }, verbosity: "low" as const },
    reasoning: { effort: "low" as const },
    truncation: "auto" as const,
    metadata: { team: "search", run: "7" },
    store: true,
    user: "user-42",
    log: true,
    safety_identifier: "hash-1",
    prompt_cache_key: "stories",
    service_tier: "auto" as const,
    include: ["reasoning.encrypted_content" as const],
  };
  const r = await stack.client.responses.create(body as Parameters<typeof stack.client.responses.create>[0] & { stream?: false });
  t.ok(r.status === "completed" || r.status === "incomplete", String(r.status));
  t.equal(r.instructions, body.instructions);
  t.equal(r.temperature, 0.4);
  t.equal(r.top_p, 0.9);
  t.equal(r.max_output_tokens, 64);
  t.equal((r as unknown as Loose).max_tool_calls, 2);
  t.equal(r.parallel_tool_calls, false);
  t.same(r.text, { format: { type: "text" }, verbosity: "low" });
  t.same(r.reasoning, { effort: "low", summary: null });
  t.equal(r.truncation, "auto");
  t.same(r.metadata, body.metadata);
  t.equal(r.user, "user-42");
  t.equal(r.safety_identifier, "hash-1");
  t.equal(r.prompt_cache_key, "stories");
  t.ok(r.usage!.output_tokens <= 64);
});

t.test("input as items: messages with roles, string or typed content parts", async (t) => {
  const short = await stack.client.responses.create({ model: TEST_MODEL, input: "Hello", max_output_tokens: 16 });
  const r = await stack.client.responses.create({
    model: TEST_MODEL,
    max_output_tokens: 16,
    input: [
      { role: "system", content: "Be brief." },
      { role: "developer", content: [{ type: "input_text", text: "Speak of cats." }] },
      { role: "user", content: "Hello" },
      { type: "message", role: "assistant", content: [{ type: "output_text", text: "Hi there, friend.", annotations: [] }] },
      { type: "message", role: "user", content: [{ type: "input_text", text: "Tell me more" }, { type: "input_text", text: "about the cat." }] },
    ] as unknown as OpenAI.Responses.ResponseInput,
  });
  t.ok(["completed", "incomplete"].includes(r.status!));
  t.ok(r.usage!.input_tokens > short.usage!.input_tokens, "every item is part of the prompt");
});

t.test("max_output_tokens reached: status incomplete with incomplete_details", async (t) => {
  const r = await stack.client.responses.create({ model: TEST_MODEL, input: "Tell me a long story.", max_output_tokens: 16, temperature: 0 });
  t.equal(r.status, "incomplete");
  t.same(r.incomplete_details, { reason: "max_output_tokens" });
  t.equal(r.completed_at, null);
  t.equal(r.usage!.output_tokens, 16);
  t.equal((r.output[0] as unknown as Loose).status, "incomplete", "the message item is incomplete too");
});
