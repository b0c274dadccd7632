import type { GenerateRequest } from "../../proto/gen/tributary/v1/inference.js";
import type { ModelSpec } from "../catalog/mod.js";

// The token charge taken at admission, before any tokenizer has seen the request (the gateway
// has none): prompt tokens estimated from characters, plus the output the request may produce.
// The charge is settled against the real usage when the request ends.

/** Characters per token of common BPE vocabularies on English text. */
export const CHARS_PER_TOKEN = 4;
/** Tokens a chat template adds around each message (role markers, separators). */
export const TOKENS_PER_MESSAGE = 4;

export function estimatePromptTokens(request: GenerateRequest): number {
  let chars = request.prompt.length;
  for (const m of request.messages) {
    chars += m.content.length + m.name.length;
    for (const c of m.toolCalls) chars += c.name.length + c.arguments.length;
  }
  for (const t of request.tools) chars += t.name.length + t.description.length + t.parametersJson.length;
  chars += request.responseFormat?.schemaJson.length ?? 0;
  return Math.ceil(chars / CHARS_PER_TOKEN) + TOKENS_PER_MESSAGE * request.messages.length;
}

/** Prompt estimate + the requested max tokens (or what the model would allow) for each choice. */
export function estimateRequestTokens(request: GenerateRequest, spec: ModelSpec): number {
  const prompt = estimatePromptTokens(request);
  const requested = request.sampling?.maxTokens ?? 0;
  const output = requested > 0 ? requested : Math.min(spec.maxOutputTokens, Math.max(1, spec.contextLength - prompt));
  const choices = Math.max(1, request.sampling?.n ?? 1);
  return prompt + output * choices;
}
