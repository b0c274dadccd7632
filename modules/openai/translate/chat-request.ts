import {
  Priority,
  ResponseFormat_Type,
  ToolChoice_Mode,
  Truncation,
  type ChatMessage,
  type GenerateRequest,
  type ToolChoice,
  type ToolDefinition,
} from "../../../proto/gen/tributary/v1/inference.js";
import type { ModelSpec } from "../../catalog/mod.js";
import { errors } from "../../errors/mod.js";
import type { ChatCompletionRequest, ChatMessageInput } from "../schemas/chat-completions.js";
import { forcedFunction, functionNames, requireToolsFor } from "./tool-choice.js";

function textOf(content: unknown, param: string): string {
  if (content === null || content === undefined) return "";
  if (typeof content === "string") return content;
  const parts = content as Array<{ type: string; text?: string; refusal?: string }>;
  return parts
    .map((p, i) => {
      if (p.type === "text") return p.text ?? "";
      if (p.type === "refusal") return p.refusal ?? "";
      throw errors.invalidParam(`${param}[${i}].type`, `Invalid content part type '${p.type}': this model accepts text only.`, "unsupported_value");
    })
    .join("\n");
}

/**
 * An assistant turn's reasoning given back: `reasoning_content` or `reasoning` (a client echoing
 * this server's messages sends both, equal); two different ones are a 400.
 */
function reasoningOf(m: { reasoning_content?: string | null; reasoning?: string | null }, i: number): string | undefined {
  const a = m.reasoning_content ?? undefined;
  const b = m.reasoning ?? undefined;
  if (a !== undefined && b !== undefined && a !== b)
    throw errors.invalidParam(`messages[${i}].reasoning`, `Invalid value for 'messages[${i}].reasoning': it differs from 'messages[${i}].reasoning_content'; send one of them, or both equal.`);
  return a ?? b;
}

/** OpenAI messages to the contract's messages, checking that tool results answer earlier calls. */
export function toChatMessages(messages: readonly ChatMessageInput[]): ChatMessage[] {
  const callIds = new Set<string>();
  return messages.map((m, i) => {
    const param = `messages[${i}].content`;
    switch (m.role) {
      case "assistant": {
        const toolCalls = (m.tool_calls ?? []).map((c) => ({ id: c.id, name: c.function.name, arguments: c.function.arguments }));
        for (const c of toolCalls) callIds.add(c.id);
        return { role: "assistant", content: textOf(m.content, param), name: m.name ?? "", toolCalls, toolCallId: "", reasoning: reasoningOf(m, i) };
      }
      case "tool":
        if (!callIds.has(m.tool_call_id))
          throw errors.invalidParam(
            `messages[${i}].tool_call_id`,
            `Invalid parameter: messages with role 'tool' must be a response to a preceding message with 'tool_calls' (no call has id '${m.tool_call_id}').`,
          );
        return { role: "tool", content: textOf(m.content, param), name: "", toolCalls: [], toolCallId: m.tool_call_id };
      case "function":
        return { role: "user", content: `Result of function ${m.name}: ${m.content ?? ""}`, name: "", toolCalls: [], toolCallId: "" };
      default:
        return { role: m.role, content: textOf(m.content, param), name: m.name ?? "", toolCalls: [], toolCallId: "" };
    }
  });
}

export function toToolDefinitions(tools: ChatCompletionRequest["tools"]): ToolDefinition[] {
  return (tools ?? []).map((t) => ({
    name: t.function.name,
    description: t.function.description ?? "",
    parametersJson: t.function.parameters ? JSON.stringify(t.function.parameters) : "",
    strict: t.function.strict ?? false,
  }));
}

export interface RequestContext {
  requestId: string;
  deadlineUnixMs: number;
  priority?: Priority;
}

/** Checks what the schema cannot (cross-field rules, model limits) and builds the runner request. */
export function chatToGenerateRequest(body: ChatCompletionRequest, spec: ModelSpec, ctx: RequestContext): GenerateRequest {
  const maxTokens = body.max_completion_tokens ?? body.max_tokens ?? 0;
  const maxParam = body.max_completion_tokens != null ? "max_completion_tokens" : "max_tokens";
  if (maxTokens > spec.maxOutputTokens)
    throw errors.invalidParam(maxParam, `${maxParam} is too large: ${maxTokens}. This model supports at most ${spec.maxOutputTokens} completion tokens, whereas you provided ${maxTokens}.`);
  if ((body.top_logprobs ?? 0) > 0 && body.logprobs !== true)
    throw errors.invalidParam("top_logprobs", "Invalid value for 'top_logprobs': it needs 'logprobs' set to true.");
  if (body.stream_options && !body.stream)
    throw errors.invalidParam("stream_options", "The 'stream_options' parameter is only allowed when 'stream' is enabled.");

  const tools = toToolDefinitions(body.tools);
  const names = functionNames(tools.map((t) => t.name), (i) => `tools[${i}].function.name`);
  let toolChoice: ToolChoice = { mode: ToolChoice_Mode.MODE_AUTO, functionName: "" };
  const choice = body.tool_choice;
  requireToolsFor(choice, tools.length);
  if (choice === "none") toolChoice = { mode: ToolChoice_Mode.MODE_NONE, functionName: "" };
  else if (choice === "required") toolChoice = { mode: ToolChoice_Mode.MODE_REQUIRED, functionName: "" };
  else if (choice != null && typeof choice === "object") toolChoice = forcedFunction(choice.function.name, names, "tool_choice");

  let responseFormat = { type: ResponseFormat_Type.TYPE_TEXT, name: "", schemaJson: "" };
  const format = body.response_format;
  if (format?.type === "json_object") responseFormat = { type: ResponseFormat_Type.TYPE_JSON_OBJECT, name: "", schemaJson: "" };
  if (format?.type === "json_schema") {
    if (!format.json_schema.schema) throw errors.missingParam("response_format.json_schema.schema");
    responseFormat = { type: ResponseFormat_Type.TYPE_JSON_SCHEMA, name: format.json_schema.name, schemaJson: JSON.stringify(format.json_schema.schema) };
  }

  const stop = body.stop == null ? [] : typeof body.stop === "string" ? [body.stop] : [...body.stop];
  return {
    requestId: ctx.requestId,
    model: spec.id,
    messages: toChatMessages(body.messages),
    prompt: "",
    sampling: {
      temperature: body.temperature ?? undefined,
      topP: body.top_p ?? undefined,
      seed: body.seed ?? undefined,
      stop: stop.filter((s) => s.length > 0),
      maxTokens,
      frequencyPenalty: body.frequency_penalty ?? 0,
      presencePenalty: body.presence_penalty ?? 0,
      logitBias: Object.entries(body.logit_bias ?? {}).map(([token, bias]) => ({ token: Number(token), bias })),
      n: body.n ?? 1,
      logprobs: body.logprobs === true ? true : undefined,
      topLogprobs: body.logprobs === true ? (body.top_logprobs ?? 0) : undefined,
    },
    tools,
    toolChoice,
    parallelToolCalls: body.parallel_tool_calls ?? true,
    responseFormat,
    priority: ctx.priority ?? Priority.PRIORITY_INTERACTIVE,
    deadlineUnixMs: ctx.deadlineUnixMs,
    replySubject: "",
    batchReplySubject: "",
    // "": the template's own default (a reasoning model thinks).
    reasoningEffort: body.reasoning_effort ?? "",
    // Nobody watches the tokens of a non-streamed reply arrive: send each choice whole.
    coalesceDeltas: !body.stream,
    maxToolCalls: 0,
    truncation: Truncation.TRUNCATION_DISABLED,
  };
}
