import * as Schema from "effect/Schema";
import { errors } from "../../errors/mod.js";
import { decodeBody } from "./common.js";

// Expiry policies (files' `expires_after`, batches' `output_expires_after`) and the body of
// POST /v1/files/{id}, which Tributary defines as "change the file's expiry".

export const MIN_EXPIRY_S = 3600;
export const MAX_EXPIRY_S = 2_592_000;

export interface ExpiresAfter {
  anchor: string;
  seconds: number;
}

/** created_at + seconds, after checking the policy; `param` names it in errors. */
export function expiresAtFrom(policy: ExpiresAfter, createdAt: number, param = "expires_after"): number {
  if (policy.anchor !== "created_at")
    throw errors.invalidParam(`${param}.anchor`, `Invalid value for '${param}.anchor': expected 'created_at', got '${policy.anchor}'.`);
  if (!Number.isInteger(policy.seconds) || policy.seconds < MIN_EXPIRY_S || policy.seconds > MAX_EXPIRY_S)
    throw errors.invalidParam(
      `${param}.seconds`,
      `Invalid value for '${param}.seconds': expected an integer between ${MIN_EXPIRY_S} (1 hour) and ${MAX_EXPIRY_S} (30 days), got ${Number.isNaN(policy.seconds) ? "a non-integer" : policy.seconds}.`,
    );
  return createdAt + policy.seconds;
}

export const ExpiresAfterSchema = Schema.Struct({ anchor: Schema.String, seconds: Schema.Number });

const FileUpdateSchema = Schema.Struct({ expires_after: Schema.NullOr(ExpiresAfterSchema) });

/** POST /v1/files/{id}: `{"expires_after": {"anchor": "created_at", "seconds": N}}` or `{"expires_after": null}`. */
export function parseFileUpdate(json: unknown): { expires_after: ExpiresAfter | null } {
  return decodeBody(FileUpdateSchema, json);
}
