import * as Schema from "effect/Schema";
import { checkAtMost, checkLogitBias, checkSchemaSize, checkStop, checkTools, requestLimits } from "../request-limits.js";
import { Anything, FunctionName, IntAtLeast, IntBetween, JsonSchemaObject, Metadata, Nullable, ReasoningEffort, between, decodeBody, decodeTagged } from "./common.js";

// POST /v1/chat/completions, as in ../shared/openai-reference.md §1.1.

const TextPart = Schema.Struct({ type: Schema.Literal("text"), text: Schema.String });
const RefusalPart = Schema.Struct({ type: Schema.Literal("refusal"), refusal: Schema.String });
const ImagePart = Schema.Struct({ type: Schema.Literal("image_url"), image_url: Schema.Struct({ url: Schema.String, detail: Schema.optionalKey(Schema.String) }) });
const AudioPart = Schema.Struct({ type: Schema.Literal("input_audio"), input_audio: Schema.Struct({ data: Schema.String, format: Schema.String }) });
const FilePart = Schema.Struct({ type: Schema.Literal("file"), file: Schema.Struct({ file_data: Schema.optionalKey(Schema.String), file_id: Schema.optionalKey(Schema.String), filename: Schema.optionalKey(Schema.String) }) });
export const UserPart = Schema.Union([TextPart, ImagePart, AudioPart, FilePart]);

const TextContent = Schema.Union([Schema.String, Schema.Array(TextPart)]);

export const ToolCallSchema = Schema.Struct({
  id: Schema.String,
  type: Schema.Literal("function"),
  function: Schema.Struct({ name: Schema.String, arguments: Schema.String }),
});

const SystemMessage = Schema.Struct({ role: Schema.Literals(["system", "developer"]), content: TextContent, name: Schema.optionalKey(Schema.String) });
const UserMessage = Schema.Struct({ role: Schema.Literal("user"), content: Schema.Union([Schema.String, Schema.Array(UserPart)]), name: Schema.optionalKey(Schema.String) });
const AssistantMessage = Schema.Struct({
  role: Schema.Literal("assistant"),
  content: Nullable(Schema.Union([Schema.String, Schema.Array(Schema.Union([TextPart, RefusalPart]))])),
  refusal: Nullable(Schema.String),
  tool_calls: Nullable(Schema.Array(ToolCallSchema)),
  name: Schema.optionalKey(Schema.String),
  function_call: Anything,
  audio: Anything,
  /** The turn's reasoning, as this server (and DeepSeek, llama-server, vLLM, OpenRouter) sends it: either name. */
  reasoning_content: Nullable(Schema.String),
  reasoning: Nullable(Schema.String),
});
const ToolMessage = Schema.Struct({ role: Schema.Literal("tool"), tool_call_id: Schema.String, content: TextContent });
const FunctionMessage = Schema.Struct({ role: Schema.Literal("function"), name: Schema.String, content: Schema.NullOr(Schema.String) });

export const ChatMessageSchema = Schema.Union([SystemMessage, UserMessage, AssistantMessage, ToolMessage, FunctionMessage]);
export type ChatMessageInput = typeof ChatMessageSchema.Type;
const messageByRole = { system: SystemMessage, developer: SystemMessage, user: UserMessage, assistant: AssistantMessage, tool: ToolMessage, function: FunctionMessage };

export const FunctionToolSchema = Schema.Struct({
  type: Schema.Literal("function"),
  function: Schema.Struct({
    name: FunctionName,
    description: Schema.optionalKey(Schema.String),
    parameters: Schema.optionalKey(JsonSchemaObject),
    strict: Nullable(Schema.Boolean),
  }),
});

const ToolChoiceSchema = Schema.Union([
  Schema.Literals(["none", "auto", "required"]),
  Schema.Struct({ type: Schema.Literal("function"), function: Schema.Struct({ name: Schema.String }) }),
]);

const ResponseFormatSchema = Schema.Union([
  Schema.Struct({ type: Schema.Literal("text") }),
  Schema.Struct({ type: Schema.Literal("json_object") }),
  Schema.Struct({
    type: Schema.Literal("json_schema"),
    json_schema: Schema.Struct({
      name: Schema.String.check(Schema.isPattern(/^[a-zA-Z0-9_-]{1,64}$/)),
      description: Schema.optionalKey(Schema.String),
      schema: Schema.optionalKey(JsonSchemaObject),
      strict: Nullable(Schema.Boolean),
    }),
  }),
]);

export const ChatCompletionRequestSchema = Schema.Struct({
  model: Schema.String.check(Schema.isMinLength(1)),
  /** Decoded per element by role in parseChatCompletionRequest (clearer errors than a union). */
  messages: Schema.Array(Schema.Unknown).check(Schema.isMinLength(1)),
  stream: Nullable(Schema.Boolean),
  stream_options: Nullable(Schema.Struct({ include_usage: Schema.optionalKey(Schema.Boolean), include_obfuscation: Schema.optionalKey(Schema.Boolean) })),
  max_completion_tokens: Nullable(IntAtLeast(1)),
  max_tokens: Nullable(IntAtLeast(1)),
  temperature: Nullable(between(0, 2)),
  top_p: Nullable(between(0, 1)),
  /** At most TRIBUTARY_MAX_CHOICES (request-limits.ts), like the other configurable bounds. */
  n: Nullable(IntAtLeast(1)),
  stop: Nullable(Schema.Union([Schema.String, Schema.Array(Schema.String)])),
  presence_penalty: Nullable(between(-2, 2)),
  frequency_penalty: Nullable(between(-2, 2)),
  logit_bias: Nullable(Schema.Record(Schema.String, between(-100, 100))),
  logprobs: Nullable(Schema.Boolean),
  top_logprobs: Nullable(IntBetween(0, 20)),
  seed: Nullable(Schema.Int),
  response_format: Nullable(ResponseFormatSchema),
  tools: Nullable(Schema.Array(FunctionToolSchema)),
  tool_choice: Nullable(ToolChoiceSchema),
  parallel_tool_calls: Nullable(Schema.Boolean),
  reasoning_effort: Nullable(ReasoningEffort),
  metadata: Nullable(Metadata),
  store: Nullable(Schema.Boolean),
  /** Tributary: record a trace of this request for the dashboard. */
  log: Nullable(Schema.Boolean),
  verbosity: Anything,
  service_tier: Anything,
  user: Anything,
  safety_identifier: Anything,
  prompt_cache_key: Anything,
  prompt_cache_retention: Anything,
  modalities: Anything,
  audio: Anything,
  prediction: Anything,
  web_search_options: Anything,
  moderation: Anything,
  functions: Anything,
  function_call: Anything,
});

export type ChatCompletionRequest = Omit<typeof ChatCompletionRequestSchema.Type, "messages"> & { messages: ChatMessageInput[] };

export function parseChatCompletionRequest(json: unknown): ChatCompletionRequest {
  const body = decodeBody(ChatCompletionRequestSchema, json);
  const messages = body.messages.map((m, i) => decodeTagged<ChatMessageInput>(m, `messages[${i}]`, "role", messageByRole));
  const limits = requestLimits();
  checkAtMost(body.n, "n", limits.maxChoices);
  checkStop(body.stop, limits);
  checkLogitBias(body.logit_bias, limits);
  checkTools(body.tools, limits);
  body.tools?.forEach((tool, i) => checkSchemaSize(tool.function.parameters, `tools[${i}].function.parameters`, limits));
  if (body.response_format?.type === "json_schema") checkSchemaSize(body.response_format.json_schema.schema, "response_format.json_schema.schema", limits);
  return { ...body, messages };
}
