import * as Schema from "effect/Schema";
import { isWellFormedTemplateName, TEMPLATE_NAME_RULE } from "../../../lib/ids.js";
import { errors } from "../../errors/mod.js";
import { Nullable, decodeBody } from "./common.js";
import { ResponseCreateSchema, parseResponseCreateRequest } from "./responses.js";

// Prompt templates (POST /v1/prompts) and running one (POST /v1/responses/{name}).

const TemplateName = Schema.String.check(Schema.makeFilter((name: string) => isWellFormedTemplateName(name) || TEMPLATE_NAME_RULE));

/** Response fields a template may not fix: they belong to the call that runs it. */
const PER_CALL = ["stream", "stream_options", "background", "previous_response_id", "conversation", "prompt", "log"] as const;

const { stream: _s, stream_options: _so, background: _b, previous_response_id: _p, conversation: _c, prompt: _pr, log: _l, ...templateFields } = ResponseCreateSchema.fields;

export const PromptCreateSchema = Schema.Struct({
  name: TemplateName,
  description: Nullable(Schema.String.check(Schema.isMaxLength(512))),
  ...templateFields,
});

export interface PromptCreateRequest {
  name: string;
  description: string | null;
  /** The response body the template runs (placeholders in instructions and input). */
  body: Record<string, unknown>;
}

export function parsePromptCreateRequest(json: unknown): PromptCreateRequest {
  if (json && typeof json === "object" && !Array.isArray(json))
    for (const key of PER_CALL)
      if (Object.hasOwn(json, key)) throw errors.invalidParam(key, `'${key}' cannot be part of a template: give it when running the template.`, "unknown_parameter");
  const decoded = decodeBody(PromptCreateSchema, json);
  const { name, description, ...rest } = json as Record<string, unknown>;
  void decoded;
  // The body must be a valid response request once its placeholders are filled; checking the
  // template text itself catches every structural mistake (placeholders are plain text).
  parseResponseCreateRequest(rest);
  return { name: name as string, description: (description as string | null | undefined) ?? null, body: rest };
}

export const PromptRunSchema = Schema.Struct({
  /** Template text that replaces the stored template's input for this call. */
  template: Nullable(Schema.String),
  inputs: Nullable(Schema.Record(Schema.String, Schema.Unknown)),
  log: Nullable(Schema.Boolean),
  stream: Nullable(Schema.Boolean),
});

export type PromptRunRequest = typeof PromptRunSchema.Type;

export function parsePromptRunRequest(json: unknown): PromptRunRequest {
  return decodeBody(PromptRunSchema, json);
}
