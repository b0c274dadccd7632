import type { GbnfJsonSchema } from "node-llama-cpp";

// node-llama-cpp builds grammars from a subset of JSON Schema. This maps the schemas clients
// send (OpenAI tool parameters, response_format json_schema) onto that subset:
//   - kept: type (also as a list), properties, required, additionalProperties, items, prefixItems,
//     minItems/maxItems, enum, const, anyOf/oneOf, $ref into $defs/definitions, string
//     minLength/maxLength and date/time formats, nullable;
//   - dropped, because the grammar cannot express them: numeric bounds, pattern, other formats,
//     descriptions beyond the top level. The output still has the declared shape and types.
// An object without "additionalProperties" gets none: a grammar needs a closed key set to end.

export class UnsupportedSchemaError extends Error {
  override name = "UnsupportedSchemaError";
}

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type Schema = { [key: string]: Json };

const ANY_VALUE: GbnfJsonSchema = {
  oneOf: [
    { type: ["string", "number", "boolean", "null"] },
    { type: "object", additionalProperties: true },
    { type: "array" },
  ],
};
const STRING_FORMATS = new Set(["date-time", "time", "date"]);

/**
 * llama.cpp refuses a grammar that repeats a rule a minimum number of times beyond about 1,000
 * (and prints the whole grammar to stderr, where the runner's log would get it): larger
 * minimums (minLength, minItems, minProperties) are refused here first. Maximums of any size
 * compile.
 */
export const MAX_MINIMUM_REPETITIONS = 500;

function repetitions(node: Schema, key: string, at: string): number | undefined {
  const value = node[key];
  if (typeof value !== "number") return undefined;
  const limit = key.startsWith("min") ? MAX_MINIMUM_REPETITIONS : Number.MAX_SAFE_INTEGER;
  if (!Number.isInteger(value) || value < 0 || value > limit)
    throw new UnsupportedSchemaError(`${at}: ${key} must be an integer from 0 to ${limit}`);
  return value;
}

/** Literal strings of a grammar (property names, enum and const values) cannot hold NUL or lone surrogates. */
function literal<T extends Json>(value: T, at: string): T {
  if (typeof value === "string" && /\u0000|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/.test(value))
    throw new UnsupportedSchemaError(`${at}: strings with NUL characters or lone surrogates are not supported`);
  return value;
}

export function toGrammarSchema(input: unknown): GbnfJsonSchema {
  if (input === true || input === undefined) return ANY_VALUE;
  if (!isObject(input)) throw new UnsupportedSchemaError("a JSON Schema must be an object");
  const defsSource = (input.$defs ?? input.definitions) as Json | undefined;
  const converted = convert(input, "#");
  if (isObject(defsSource)) {
    // fromEntries defines own keys: a definition named __proto__ stays a definition.
    const defs: Record<string, GbnfJsonSchema> = Object.fromEntries(Object.entries(defsSource).map(([name, def]) => [literal(name, "#/$defs"), convert(def, `#/$defs/${name}`)]));
    return { ...(converted as object), $defs: defs } as GbnfJsonSchema;
  }
  return converted;
}

function isObject(v: unknown): v is Schema {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function convert(node: Json, at: string): GbnfJsonSchema {
  if (node === true) return ANY_VALUE;
  if (!isObject(node)) throw new UnsupportedSchemaError(`${at}: expected a schema object`);
  if (node.nullable === true) {
    const { nullable: _n, ...rest } = node;
    return { oneOf: [convert(rest, at), { type: "null" }] };
  }
  if (typeof node.$ref === "string") {
    const m = /^#\/(?:\$defs|definitions)\/([^/]+)$/.exec(node.$ref);
    if (!m) throw new UnsupportedSchemaError(`${at}: only local $ref into $defs or definitions is supported, got ${node.$ref}`);
    return { $ref: `#/$defs/${m[1]}` } as GbnfJsonSchema;
  }
  if (Object.hasOwn(node, "const")) return { const: literal(node.const!, `${at}/const`) as string | number | boolean | null };
  if (Array.isArray(node.enum)) return { enum: node.enum.map((v, i) => literal(v, `${at}/enum/${i}`)) as (string | number | boolean | null)[] };
  const union = (node.anyOf ?? node.oneOf) as Json | undefined;
  if (Array.isArray(union)) return { oneOf: union.map((s, i) => convert(s, `${at}/anyOf/${i}`)) };
  if (Array.isArray(node.allOf)) {
    if (node.allOf.length !== 1) throw new UnsupportedSchemaError(`${at}: allOf with more than one schema is not supported`);
    return convert(node.allOf[0]!, `${at}/allOf/0`);
  }

  const type = node.type ?? inferType(node);
  if (type === undefined) return ANY_VALUE;
  if (Array.isArray(type)) {
    const types = type.map(String);
    if (types.every((t) => t === "string" || t === "number" || t === "integer" || t === "boolean" || t === "null"))
      return { type: types } as GbnfJsonSchema;
    return { oneOf: types.map((t) => convert({ ...node, type: t }, at)) };
  }
  switch (type) {
    case "string": {
      if (typeof node.format === "string" && STRING_FORMATS.has(node.format))
        return { type: "string", format: node.format as "date-time" | "time" | "date" };
      const out: { type: "string"; minLength?: number; maxLength?: number } = { type: "string" };
      const minLength = repetitions(node, "minLength", at);
      const maxLength = repetitions(node, "maxLength", at);
      if (minLength !== undefined) out.minLength = minLength;
      if (maxLength !== undefined) out.maxLength = maxLength;
      return out;
    }
    case "number":
    case "integer":
    case "boolean":
    case "null":
      return { type };
    case "array": {
      const out: Record<string, unknown> = { type: "array" };
      if (node.items !== undefined && node.items !== false) out.items = convert(node.items as Json, `${at}/items`);
      if (Array.isArray(node.prefixItems)) out.prefixItems = node.prefixItems.map((s, i) => convert(s, `${at}/prefixItems/${i}`));
      const minItems = repetitions(node, "minItems", at);
      const maxItems = repetitions(node, "maxItems", at);
      if (minItems !== undefined) out.minItems = minItems;
      if (maxItems !== undefined) out.maxItems = maxItems;
      return out as GbnfJsonSchema;
    }
    case "object": {
      const out: Record<string, unknown> = { type: "object" };
      const props = isObject(node.properties) ? node.properties : {};
      // fromEntries defines own keys: a property named __proto__ stays a property.
      const converted: Record<string, GbnfJsonSchema> = Object.fromEntries(
        Object.entries(props).map(([key, value]) => [literal(key, `${at}/properties`), convert(value, `${at}/properties/${key}`)]),
      );
      out.properties = converted;
      if (Array.isArray(node.required)) out.required = node.required.filter((k) => typeof k === "string" && Object.hasOwn(converted, k));
      const extra = node.additionalProperties;
      if (extra === true || (Object.keys(converted).length === 0 && extra === undefined)) out.additionalProperties = true;
      else if (isObject(extra)) out.additionalProperties = convert(extra, `${at}/additionalProperties`);
      else out.additionalProperties = false;
      const minProperties = repetitions(node, "minProperties", at);
      const maxProperties = repetitions(node, "maxProperties", at);
      if (minProperties !== undefined) out.minProperties = minProperties;
      if (maxProperties !== undefined) out.maxProperties = maxProperties;
      return out as GbnfJsonSchema;
    }
    default:
      throw new UnsupportedSchemaError(`${at}: unknown type ${JSON.stringify(type)}`);
  }
}

function inferType(node: Schema): Json | undefined {
  if (isObject(node.properties) || node.additionalProperties !== undefined) return "object";
  if (node.items !== undefined || node.prefixItems !== undefined) return "array";
  return undefined;
}
