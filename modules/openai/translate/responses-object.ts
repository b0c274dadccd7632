import type { Usage } from "../../../proto/gen/tributary/v1/inference.js";
import { responseTokenUsage, type ResponseUsage } from "../token-usage.js";
import type { ContentPart, ResponseCreateRequest } from "../schemas/responses.js";

// The Response object and its items as they go on the wire (../shared/openai-reference.md §2.2,
// §2.3): every key present, null where there is no value, so strict clients parse them.

export type ResponseStatus = "queued" | "in_progress" | "completed" | "incomplete" | "failed" | "cancelled";
export type ItemStatus = "in_progress" | "completed" | "incomplete";

export interface OutputTextPart {
  type: "output_text";
  text: string;
  annotations: unknown[];
  /** The text's tokens' logprobs, when the request asked for them (include message.output_text.logprobs). */
  logprobs: unknown[];
}

export interface MessageItem {
  type: "message";
  id: string;
  role: "user" | "assistant" | "system" | "developer";
  status: ItemStatus;
  content: Array<OutputTextPart | ContentPart>;
}

export interface FunctionCallItem {
  type: "function_call";
  id: string;
  call_id: string;
  name: string;
  arguments: string;
  status: ItemStatus;
}

export interface FunctionCallOutputItem {
  type: "function_call_output";
  id: string;
  call_id: string;
  output: string | ContentPart[];
  status: ItemStatus;
}

export interface ReasoningItem {
  type: "reasoning";
  id: string;
  summary: unknown[];
  content?: unknown;
  encrypted_content?: unknown;
  status?: unknown;
}

/** An item as stored and listed (input items, output items, conversation items): it has an id. */
export type Item = MessageItem | FunctionCallItem | FunctionCallOutputItem | ReasoningItem;
export type OutputItem = MessageItem | FunctionCallItem | ReasoningItem;

/** The reasoning text of a reasoning item this server wrote: one part, its thought as the model wrote it. */
export interface ReasoningTextPart {
  type: "reasoning_text";
  text: string;
}

export type { ResponseUsage };

export interface ResponseError {
  code: string;
  message: string;
}

export interface ResponseObject {
  id: string;
  object: "response";
  created_at: number;
  completed_at: number | null;
  status: ResponseStatus;
  background: boolean;
  conversation: { id: string } | null;
  error: ResponseError | null;
  incomplete_details: { reason: "max_output_tokens" | "content_filter" } | null;
  instructions: string | null;
  max_output_tokens: number | null;
  max_tool_calls: number | null;
  model: string;
  output: OutputItem[];
  parallel_tool_calls: boolean;
  previous_response_id: string | null;
  prompt_cache_key: string | null;
  prompt_cache_retention: string | null;
  reasoning: { effort: string | null; summary: string | null };
  safety_identifier: string | null;
  service_tier: string;
  store: boolean;
  temperature: number;
  text: { format: unknown; verbosity: string };
  tool_choice: unknown;
  tools: unknown[];
  top_logprobs: number;
  top_p: number;
  presence_penalty: number;
  frequency_penalty: number;
  truncation: "auto" | "disabled";
  usage: ResponseUsage | null;
  user: string | null;
  metadata: Record<string, string>;
}

export function responseUsage(usage: Usage | undefined): ResponseUsage {
  return responseTokenUsage(usage?.promptTokens ?? 0, usage?.completionTokens ?? 0, usage?.cachedPromptTokens ?? 0, usage?.reasoningTokens ?? 0);
}

/** The response object of `body` before it produced anything: the request's settings echoed. */
export function newResponseObject(
  body: ResponseCreateRequest,
  ids: { id: string; createdAt: number; conversationId: string | null },
  status: ResponseStatus,
): ResponseObject {
  return {
    id: ids.id,
    object: "response",
    created_at: ids.createdAt,
    completed_at: null,
    status,
    background: body.background ?? false,
    conversation: ids.conversationId ? { id: ids.conversationId } : null,
    error: null,
    incomplete_details: null,
    instructions: body.instructions ?? null,
    max_output_tokens: body.max_output_tokens ?? null,
    max_tool_calls: body.max_tool_calls ?? null,
    model: body.model,
    output: [],
    parallel_tool_calls: body.parallel_tool_calls ?? true,
    previous_response_id: body.previous_response_id ?? null,
    prompt_cache_key: body.prompt_cache_key ?? null,
    prompt_cache_retention: body.prompt_cache_retention ?? null,
    reasoning: { effort: body.reasoning?.effort ?? null, summary: body.reasoning?.summary ?? null },
    safety_identifier: body.safety_identifier ?? null,
    service_tier: "default",
    store: body.store ?? true,
    temperature: body.temperature ?? 1,
    text: { format: body.text?.format ?? { type: "text" }, verbosity: body.text?.verbosity ?? "medium" },
    tool_choice: body.tool_choice ?? "auto",
    tools: body.tools.map((t) => ({
      type: "function",
      name: t.name,
      description: t.description ?? null,
      parameters: t.parameters ?? null,
      strict: t.strict ?? true,
    })),
    top_logprobs: body.top_logprobs ?? 0,
    top_p: body.top_p ?? 1,
    presence_penalty: 0,
    frequency_penalty: 0,
    truncation: body.truncation ?? "disabled",
    usage: null,
    user: body.user ?? null,
    metadata: { ...(body.metadata ?? {}) },
  };
}
