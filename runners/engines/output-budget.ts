import { ErrorCode } from "../../proto/gen/tributary/v1/inference.js";
import type { ModelSpec } from "../../modules/catalog/mod.js";
import { EngineRequestError } from "./engine.js";

/** Whether a prompt of `promptTokens` leaves room for the requested output (0: any output at all). */
export function fitsContext(spec: ModelSpec, promptTokens: number, requested: number): boolean {
  return requested > 0 ? promptTokens + requested <= spec.contextLength : promptTokens < spec.contextLength;
}

/**
 * The output budget of a request: the requested max tokens (checked against the model's
 * limits), or what is left of the context, capped by the model's max output tokens.
 */
export function resolveOutputBudget(spec: ModelSpec, promptTokens: number, requested: number): number {
  if (requested > spec.maxOutputTokens)
    throw new EngineRequestError(
      ErrorCode.ERROR_CODE_INVALID_REQUEST,
      `max_tokens is too large: ${requested}. This model supports at most ${spec.maxOutputTokens} completion tokens.`,
      "max_tokens",
    );
  const room = spec.contextLength - promptTokens;
  if (requested > 0 && promptTokens + requested > spec.contextLength)
    throw new EngineRequestError(
      ErrorCode.ERROR_CODE_CONTEXT_LENGTH_EXCEEDED,
      `This model's maximum context length is ${spec.contextLength} tokens. However, you requested ${promptTokens + requested} tokens ` +
        `(${promptTokens} in the messages, ${requested} in the completion). Please reduce the length of the messages or completion.`,
      "messages",
    );
  if (room < 1)
    throw new EngineRequestError(
      ErrorCode.ERROR_CODE_CONTEXT_LENGTH_EXCEEDED,
      `This model's maximum context length is ${spec.contextLength} tokens. However, your messages resulted in ${promptTokens} tokens. ` +
        `Please reduce the length of the messages.`,
      "messages",
    );
  return requested > 0 ? requested : Math.min(room, spec.maxOutputTokens);
}
