import {
  Priority,
  ResponseFormat_Type,
  ToolChoice_Mode,
  Truncation,
  type ChatMessage,
  type GenerateRequest,
  type ResponseFormat,
  type ToolChoice,
  type ToolDefinition,
} from "../../../proto/gen/tributary/v1/inference.js";
import type { ModelSpec } from "../../catalog/mod.js";
import { errors } from "../../errors/mod.js";
import type { ResponseCreateRequest } from "../schemas/responses.js";
import { forcedFunction, functionNames, requireToolsFor } from "./tool-choice.js";

/** What a Responses request asks of the runner besides its messages, checked against the model. */
export interface GenerationOptions {
  tools: ToolDefinition[];
  toolChoice: ToolChoice;
  responseFormat: ResponseFormat;
  maxToolCalls: number;
}

/**
 * Checks what the schema cannot (cross-field rules, model limits, tool references) before any
 * state is read or written, and resolves tools, tool choice and text format for the runner.
 */
export function checkResponseRequest(body: ResponseCreateRequest, spec: ModelSpec): GenerationOptions {
  if (body.max_output_tokens != null && body.max_output_tokens > spec.maxOutputTokens)
    throw errors.invalidParam(
      "max_output_tokens",
      `max_output_tokens is too large: ${body.max_output_tokens}. This model supports at most ${spec.maxOutputTokens} output tokens.`,
    );
  if (body.previous_response_id != null && body.conversation != null)
    throw errors.invalidParam("previous_response_id", "Mutually exclusive parameters: 'previous_response_id' and 'conversation' cannot be used together.", "mutually_exclusive_parameters");
  if (body.background && body.store === false)
    throw errors.invalidParam("background", "Background responses must be stored: 'background' requires 'store' to be true.");
  if (body.stream_options && !body.stream)
    throw errors.invalidParam("stream_options", "The 'stream_options' parameter is only allowed when 'stream' is enabled.");

  const names = functionNames(body.tools.map((t) => t.name), (i) => `tools[${i}].name`);
  let tools: ToolDefinition[] = body.tools.map((t) => ({
    name: t.name,
    description: t.description ?? "",
    parametersJson: t.parameters ? JSON.stringify(t.parameters) : "",
    strict: t.strict ?? true,
  }));

  let toolChoice: ToolChoice = { mode: ToolChoice_Mode.MODE_AUTO, functionName: "" };
  const choice = body.tool_choice;
  requireToolsFor(choice, tools.length);
  if (choice === "none") toolChoice = { mode: ToolChoice_Mode.MODE_NONE, functionName: "" };
  else if (choice === "required") toolChoice = { mode: ToolChoice_Mode.MODE_REQUIRED, functionName: "" };
  else if (choice != null && typeof choice === "object" && choice.type === "function") toolChoice = forcedFunction(choice.name, names, "tool_choice.name");
  else if (choice != null && typeof choice === "object" && choice.type === "allowed_tools") {
    // The model may call only these: the others are not offered to it at all.
    const allowed = new Set<string>();
    choice.tools.forEach((t, i) => {
      if (t.type !== "function" || !t.name || !names.has(t.name))
        throw errors.invalidParam(`tool_choice.tools[${i}]`, `Invalid value for 'tool_choice.tools[${i}]': expected a function in 'tools', like {"type": "function", "name": "..."}.`);
      allowed.add(t.name);
    });
    tools = tools.filter((t) => allowed.has(t.name));
    toolChoice = { mode: choice.mode === "required" ? ToolChoice_Mode.MODE_REQUIRED : ToolChoice_Mode.MODE_AUTO, functionName: "" };
  }
  const maxToolCalls = body.max_tool_calls ?? 0;
  if (body.max_tool_calls === 0 && tools.length > 0) {
    // No call may be made: the model answers in text, which a forced call contradicts.
    if (toolChoice.mode === ToolChoice_Mode.MODE_REQUIRED || toolChoice.mode === ToolChoice_Mode.MODE_FUNCTION)
      throw errors.invalidParam("max_tool_calls", "max_tool_calls is 0, but tool_choice requires a tool call.");
    toolChoice = { mode: ToolChoice_Mode.MODE_NONE, functionName: "" };
  }

  let responseFormat: ResponseFormat = { type: ResponseFormat_Type.TYPE_TEXT, name: "", schemaJson: "" };
  const format = body.text?.format;
  if (format?.type === "json_object") responseFormat = { type: ResponseFormat_Type.TYPE_JSON_OBJECT, name: "", schemaJson: "" };
  if (format?.type === "json_schema") {
    if (!format.schema) throw errors.missingParam("text.format.schema");
    responseFormat = { type: ResponseFormat_Type.TYPE_JSON_SCHEMA, name: format.name, schemaJson: JSON.stringify(format.schema) };
  }
  return { tools, toolChoice, responseFormat, maxToolCalls };
}

/**
 * Whether the output text carries logprobs: asked with `include: ["message.output_text.logprobs"]`,
 * or by asking for alternatives (`top_logprobs` > 0), which come inside them.
 */
export function wantsLogprobs(body: ResponseCreateRequest): boolean {
  return (body.top_logprobs ?? 0) > 0 || (body.include?.includes("message.output_text.logprobs") ?? false);
}

export interface ResponseGenerationContext {
  requestId: string;
  deadlineUnixMs: number;
  priority?: Priority;
}

/** The runner request of a response: its messages (history included) and the checked options. */
export function responseToGenerateRequest(
  body: ResponseCreateRequest,
  spec: ModelSpec,
  options: GenerationOptions,
  messages: ChatMessage[],
  ctx: ResponseGenerationContext,
): GenerateRequest {
  return {
    requestId: ctx.requestId,
    model: spec.id,
    messages,
    prompt: "",
    sampling: {
      temperature: body.temperature ?? undefined,
      topP: body.top_p ?? undefined,
      seed: undefined,
      stop: [],
      maxTokens: body.max_output_tokens ?? 0,
      frequencyPenalty: 0,
      presencePenalty: 0,
      logitBias: [],
      n: 1,
      logprobs: wantsLogprobs(body) ? true : undefined,
      topLogprobs: wantsLogprobs(body) ? (body.top_logprobs ?? 0) : undefined,
    },
    tools: options.tools,
    toolChoice: options.toolChoice,
    parallelToolCalls: body.parallel_tool_calls ?? true,
    responseFormat: options.responseFormat,
    priority: ctx.priority ?? Priority.PRIORITY_INTERACTIVE,
    deadlineUnixMs: ctx.deadlineUnixMs,
    replySubject: "",
    batchReplySubject: "",
    // "": the template's own default (a reasoning model thinks).
    reasoningEffort: body.reasoning?.effort ?? "",
    maxToolCalls: options.maxToolCalls,
    truncation: body.truncation === "auto" ? Truncation.TRUNCATION_AUTO : Truncation.TRUNCATION_DISABLED,
    // Nobody watches the tokens of a non-streamed response arrive: send the choice whole.
    coalesceDeltas: !body.stream,
  };
}
