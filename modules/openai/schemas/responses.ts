import * as Schema from "effect/Schema";
import { errors } from "../../errors/mod.js";
import { checkAtMost, checkSchemaSize, checkTools, requestLimits } from "../request-limits.js";
import { Anything, FunctionName, Id, IntAtLeast, IntBetween, JsonSchemaObject, Metadata, Nullable, ReasoningEffort, between, decodeBody, decodeTagged } from "./common.js";

// POST /v1/responses, as in ../shared/openai-reference.md §2.1 and §2.3. Input items are decoded
// one by one by their `type` (a message may leave it out), so errors name the item: input[2].call_id.

export const InputText = Schema.Struct({ type: Schema.Literal("input_text"), text: Schema.String });
export const InputImage = Schema.Struct({ type: Schema.Literal("input_image"), image_url: Nullable(Schema.String), file_id: Nullable(Schema.String), detail: Anything });
export const InputFile = Schema.Struct({ type: Schema.Literal("input_file"), file_id: Nullable(Schema.String), file_data: Anything, file_url: Anything, filename: Anything });
const OutputText = Schema.Struct({ type: Schema.Literal("output_text"), text: Schema.String, annotations: Anything, logprobs: Anything });
export const Refusal = Schema.Struct({ type: Schema.Literal("refusal"), refusal: Schema.String });

const contentParts = { input_text: InputText, input_image: InputImage, input_file: InputFile, output_text: OutputText, refusal: Refusal };
export type ContentPart =
  | typeof InputText.Type
  | typeof InputImage.Type
  | typeof InputFile.Type
  | typeof OutputText.Type
  | typeof Refusal.Type;

const MessageItem = Schema.Struct({
  type: Schema.optionalKey(Schema.Literal("message")),
  role: Schema.Literals(["user", "assistant", "system", "developer"]),
  /** A string, or parts decoded one by one (below). */
  content: Schema.Union([Schema.String, Schema.Array(Schema.Unknown)]),
  id: Nullable(Id),
  status: Anything,
  phase: Anything,
});

const FunctionCallItem = Schema.Struct({
  type: Schema.Literal("function_call"),
  call_id: Schema.String.check(Schema.isMinLength(1)),
  name: Schema.String,
  arguments: Schema.String,
  id: Nullable(Id),
  status: Anything,
});

const FunctionCallOutputItem = Schema.Struct({
  type: Schema.Literal("function_call_output"),
  call_id: Schema.String.check(Schema.isMinLength(1)).check(Schema.isMaxLength(64)),
  output: Schema.Union([Schema.String, Schema.Array(Schema.Unknown)]),
  id: Nullable(Id),
  status: Anything,
});

/** A reasoning item given back: its text (content, else summary) goes with the assistant turn after it. */
const ReasoningItem = Schema.Struct({
  type: Schema.Literal("reasoning"),
  id: Nullable(Id),
  summary: Schema.Array(Schema.Struct({ type: Schema.Literal("summary_text"), text: Schema.String })),
  content: Nullable(Schema.Array(Schema.Struct({ type: Schema.Literal("reasoning_text"), text: Schema.String }))),
  encrypted_content: Anything,
  status: Anything,
});

const ItemReference = Schema.Struct({ type: Schema.Literal("item_reference"), id: Id });

const inputItems = {
  message: MessageItem,
  function_call: FunctionCallItem,
  function_call_output: FunctionCallOutputItem,
  reasoning: ReasoningItem,
  item_reference: ItemReference,
};

export type MessageInput = Omit<typeof MessageItem.Type, "content"> & { content: string | ContentPart[] };
export type InputItem =
  | ({ type: "message" } & MessageInput)
  | typeof FunctionCallItem.Type
  | (Omit<typeof FunctionCallOutputItem.Type, "output"> & { output: string | ContentPart[] })
  | typeof ReasoningItem.Type
  | typeof ItemReference.Type;

/** Decodes one input item (`path` names it in errors, e.g. "input[3]"). */
export function decodeInputItem(value: unknown, path: string): InputItem {
  if (typeof value === "object" && value !== null && !Array.isArray(value) && !("type" in value) && "role" in value)
    value = { ...value, type: "message" };
  const item = decodeTagged<InputItem>(value, path, "type", inputItems);
  if (item.type === "message") {
    const content = typeof item.content === "string" ? item.content : item.content.map((p, i) => decodeTagged<ContentPart>(p, `${path}.content[${i}]`, "type", contentParts));
    return { ...item, type: "message", content };
  }
  if (item.type === "function_call_output" && typeof item.output !== "string")
    return { ...item, output: item.output.map((p, i) => decodeTagged<ContentPart>(p, `${path}.output[${i}]`, "type", { input_text: InputText, input_image: InputImage, input_file: InputFile })) };
  return item;
}

export function decodeInputItems(values: readonly unknown[], param: string): InputItem[] {
  return values.map((v, i) => decodeInputItem(v, `${param}[${i}]`));
}

export const FunctionToolSchema = Schema.Struct({
  type: Schema.Literal("function"),
  name: FunctionName,
  description: Nullable(Schema.String),
  parameters: Nullable(JsonSchemaObject),
  strict: Nullable(Schema.Boolean),
});
export type FunctionTool = typeof FunctionToolSchema.Type;

export const ToolChoiceSchema = Schema.Union([
  Schema.Literals(["none", "auto", "required"]),
  Schema.Struct({ type: Schema.Literal("function"), name: Schema.String }),
  Schema.Struct({
    type: Schema.Literal("allowed_tools"),
    mode: Schema.Literals(["auto", "required"]),
    tools: Schema.Array(Schema.Struct({ type: Schema.String, name: Schema.optionalKey(Schema.String) })),
  }),
]);
export type ToolChoice = typeof ToolChoiceSchema.Type;

export const TextFormatSchema = Schema.Union([
  Schema.Struct({ type: Schema.Literal("text") }),
  Schema.Struct({ type: Schema.Literal("json_object") }),
  Schema.Struct({
    type: Schema.Literal("json_schema"),
    name: Schema.String.check(Schema.isPattern(/^[a-zA-Z0-9_-]{1,64}$/, { message: "names must be 1-64 characters of a-z, A-Z, 0-9, underscores and dashes" })),
    schema: Schema.optionalKey(JsonSchemaObject),
    description: Nullable(Schema.String),
    strict: Nullable(Schema.Boolean),
  }),
]);
export type TextFormat = typeof TextFormatSchema.Type;

const Includable = Schema.Literals([
  "file_search_call.results",
  "web_search_call.results",
  "web_search_call.action.sources",
  "message.input_image.image_url",
  "computer_call_output.output.image_url",
  "code_interpreter_call.outputs",
  "reasoning.encrypted_content",
  "message.output_text.logprobs",
]);

export const ResponseCreateSchema = Schema.Struct({
  model: Schema.String.check(Schema.isMinLength(1)),
  input: Schema.optionalKey(Schema.Union([Schema.String, Schema.Array(Schema.Unknown)])),
  instructions: Nullable(Schema.String),
  conversation: Nullable(Schema.Union([Id, Schema.Struct({ id: Id })])),
  previous_response_id: Nullable(Id),
  stream: Nullable(Schema.Boolean),
  stream_options: Nullable(Schema.Struct({ include_obfuscation: Schema.optionalKey(Schema.Boolean) })),
  temperature: Nullable(between(0, 2)),
  top_p: Nullable(between(0, 1)),
  top_logprobs: Nullable(IntBetween(0, 20)),
  max_output_tokens: Nullable(IntAtLeast(16)),
  max_tool_calls: Nullable(IntAtLeast(0)),
  parallel_tool_calls: Nullable(Schema.Boolean),
  /** Decoded per element by type (only function tools run here). */
  tools: Nullable(Schema.Array(Schema.Unknown)),
  tool_choice: Nullable(ToolChoiceSchema),
  text: Nullable(Schema.Struct({
    format: Nullable(TextFormatSchema),
    verbosity: Nullable(Schema.Literals(["low", "medium", "high"])),
  })),
  reasoning: Nullable(Schema.Struct({
    effort: Nullable(ReasoningEffort),
    summary: Nullable(Schema.Literals(["auto", "concise", "detailed"])),
    generate_summary: Nullable(Schema.Literals(["auto", "concise", "detailed"])),
    context: Anything,
    mode: Anything,
  })),
  truncation: Nullable(Schema.Literals(["auto", "disabled"])),
  metadata: Nullable(Metadata),
  store: Nullable(Schema.Boolean),
  background: Nullable(Schema.Boolean),
  include: Nullable(Schema.Array(Includable)),
  user: Nullable(Schema.String),
  /** Tributary: record a trace of this request for the dashboard. */
  log: Nullable(Schema.Boolean),
  service_tier: Nullable(Schema.Literals(["auto", "default", "flex", "scale", "priority"])),
  safety_identifier: Nullable(Schema.String),
  prompt_cache_key: Nullable(Schema.String),
  prompt_cache_retention: Nullable(Schema.Literals(["in_memory", "24h"])),
  prompt_cache_options: Anything,
  context_management: Anything,
  moderation: Anything,
  prompt: Anything,
});

type ResponseCreateBody = typeof ResponseCreateSchema.Type;

/** A decoded request: `input` as items (a string input is one user message), tools decoded. */
export type ResponseCreateRequest = Omit<ResponseCreateBody, "input" | "tools"> & {
  input: InputItem[];
  tools: FunctionTool[];
};

export function parseResponseCreateRequest(json: unknown): ResponseCreateRequest {
  const body = decodeBody(ResponseCreateSchema, json);
  if (body.prompt != null)
    throw errors.invalidParam("prompt", "The 'prompt' parameter is not supported here: run a stored template with POST /v1/responses/{name}.", "unsupported_parameter");
  const limits = requestLimits();
  checkAtMost(body.max_tool_calls, "max_tool_calls", limits.maxToolCalls);
  checkTools(body.tools, limits);
  const input: InputItem[] =
    body.input === undefined ? [] : typeof body.input === "string" ? [{ type: "message", role: "user", content: body.input }] : decodeInputItems(body.input, "input");
  const tools = (body.tools ?? []).map((t, i) => {
    const type = typeof t === "object" && t !== null ? (t as { type?: unknown }).type : undefined;
    if (typeof type === "string" && type !== "function")
      throw errors.invalidParam(`tools[${i}].type`, `Tool type '${type}' is not supported by this server: only 'function' tools are.`, "unsupported_value");
    const tool = decodeTagged<FunctionTool>(t, `tools[${i}]`, "type", { function: FunctionToolSchema });
    checkSchemaSize(tool.parameters, `tools[${i}].parameters`, limits);
    return tool;
  });
  if (body.text?.format?.type === "json_schema") checkSchemaSize(body.text.format.schema, "text.format.schema", limits);
  return { ...body, input, tools };
}
