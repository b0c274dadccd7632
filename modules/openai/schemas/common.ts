import * as Schema from "effect/Schema";
import { firstIssue } from "../../../lib/schema-errors.js";
import { ID_RULE, isWellFormedId } from "../../../lib/ids.js";
import { errors, type DomainError } from "../../errors/mod.js";
import { checkBodyShape } from "../request-limits.js";

// Building blocks shared by the OpenAI request schemas, and the mapping of a schema failure to
// the OpenAI error that names the parameter.

export const Nullable = <S extends Schema.Top>(s: S) => Schema.optionalKey(Schema.NullOr(s));
export const between = (minimum: number, maximum: number) => Schema.Number.check(Schema.isBetween({ minimum, maximum }));
export const IntAtLeast = (minimum: number) => Schema.Int.check(Schema.isGreaterThanOrEqualTo(minimum));
export const IntBetween = (minimum: number, maximum: number) => Schema.Int.check(Schema.isBetween({ minimum, maximum }));

export const FunctionName = Schema.String.check(
  Schema.isPattern(/^[a-zA-Z0-9_-]{1,64}$/, { message: "function names must be 1-64 characters of a-z, A-Z, 0-9, underscores and dashes" }),
);

/** An id the client sends (previous_response_id, conversation, item ids): one shape for every store (lib/ids.ts). */
export const Id = Schema.String.check(Schema.makeFilter((id: string) => isWellFormedId(id) || ID_RULE));

/** Values accepted for compatibility and not acted upon. */
export const Anything = Schema.optionalKey(Schema.Unknown);

/**
 * OpenAI's metadata: at most 16 keys of at most 64 characters, values of at most 512. The keys
 * are checked by a filter: a key schema in a Record would drop a longer key silently.
 */
export const Metadata = Schema.Record(Schema.String, Schema.String.check(Schema.isMaxLength(512))).check(
  Schema.makeFilter((m: Record<string, string>) => {
    const keys = Object.keys(m);
    if (keys.length > 16) return "metadata can have at most 16 keys";
    return keys.every((k) => k.length <= 64) || "metadata keys can be at most 64 characters long";
  }),
);

export const ReasoningEffort = Schema.Literals(["none", "minimal", "low", "medium", "high", "xhigh", "max"]);

export const JsonSchemaObject = Schema.Record(Schema.String, Schema.Unknown);

/**
 * Decodes `input` with `schema` once it is within the body's nesting and size bounds
 * (request-limits.ts), refusing top-level keys outside `schema`'s fields with
 * OpenAI's "Unrecognized request argument" (nested objects may carry extra keys: clients echo
 * back the objects we return, which hold more fields than requests accept).
 */
export function decodeBody<S extends Schema.Top & { readonly fields: Record<string, unknown> }>(
  schema: S,
  input: unknown,
): S["Type"] {
  if (typeof input !== "object" || input === null || Array.isArray(input))
    throw errors.invalidJson("The body must be a JSON object.");
  checkBodyShape(input);
  // Own keys only: `in` would find constructor, toString and __proto__ on Object.prototype.
  for (const key of Object.keys(input)) if (!Object.hasOwn(schema.fields, key)) throw errors.unknownParam(key);
  const result = Schema.decodeUnknownResult(schema as unknown as Schema.Codec<S["Type"], unknown>)(input, { errors: "first", onExcessProperty: "ignore" });
  if (result._tag === "Success") return result.success;
  throw schemaError(firstIssue(result.failure));
}

/**
 * Decodes one element of a tagged union (chat messages by role, tools by type) with the member
 * its tag selects, so errors speak about that member rather than the union as a whole.
 */
export function decodeTagged<T>(value: unknown, path: string, tag: string, members: Record<string, Schema.Top>): T {
  if (typeof value !== "object" || value === null || Array.isArray(value))
    throw errors.invalidParam(path, `Invalid type for '${path}': expected an object.`, "invalid_type");
  const selector = (value as Record<string, unknown>)[tag];
  if (selector === undefined) throw errors.missingParam(`${path}.${tag}`);
  const schema = typeof selector === "string" && Object.hasOwn(members, selector) ? members[selector] : undefined;
  if (!schema)
    throw errors.invalidParam(
      `${path}.${tag}`,
      `Invalid value for '${path}.${tag}': expected one of ${Object.keys(members).map((k) => `'${k}'`).join(", ")}, got ${JSON.stringify(selector)}.`,
    );
  const result = Schema.decodeUnknownResult(schema as unknown as Schema.Codec<T, unknown>)(value, { errors: "first", onExcessProperty: "ignore" });
  if (result._tag === "Success") return result.success;
  const issue = firstIssue(result.failure);
  return throwWithPrefix(path, issue);
}

function throwWithPrefix(prefix: string, issue: { path: string; message: string }): never {
  const path = issue.path ? (issue.path.startsWith("[") ? prefix + issue.path : `${prefix}.${issue.path}`) : prefix;
  throw schemaError({ path, message: issue.message });
}

export function schemaError(issue: { path: string; message: string }): DomainError {
  const param = issue.path;
  if (issue.message === "Missing key") return errors.missingParam(param);
  if (issue.message.startsWith("Expected no excess")) return errors.unknownParam(param);
  const code = issue.message.startsWith("Expected ") && !issue.message.includes("value") ? "invalid_type" : "invalid_value";
  return errors.invalidParam(param, `Invalid value for '${param}': ${issue.message.replace(/^Expected /, "expected ")}.`, code);
}
