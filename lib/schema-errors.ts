import * as SchemaIssue from "effect/SchemaIssue";
import type { Schema } from "effect";

// Turns an Effect Schema failure into the first problem as a (path, message) pair:
// OpenAI-style errors name one parameter, e.g. "messages[0].role".
const formatter = SchemaIssue.makeFormatterStandardSchemaV1();

export interface FirstIssue {
  /** Dotted path with [i] for array indexes; "" for the root. */
  path: string;
  message: string;
}

export function formatPath(path: ReadonlyArray<PropertyKey>): string {
  let out = "";
  for (const key of path) {
    if (typeof key === "number") out += `[${key}]`;
    else out += (out ? "." : "") + String(key);
  }
  return out;
}

export function firstIssue(error: Schema.SchemaError): FirstIssue {
  const result = formatter(error.issue);
  const issue = result.issues[0];
  if (!issue) return { path: "", message: error.message };
  const path = formatPath((issue.path ?? []).map((p) => (typeof p === "object" ? p.key : p)) as PropertyKey[]);
  return { path, message: issue.message };
}
