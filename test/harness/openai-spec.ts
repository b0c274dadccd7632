import { readFileSync } from "node:fs";
import { join } from "node:path";
import Ajv2020 from "ajv/dist/2020.js";
import { repoRoot } from "./processes.js";

// OpenAI's own schema (../shared/spec/openai-openapi.json, 2.3.0), for checking the objects we
// send against it: required keys, types, and null only where the spec allows it.

const SPEC_PATH = join(repoRoot, "..", "shared", "spec", "openai-openapi.json");

type Json = Record<string, unknown>;
let loaded: { ajv: InstanceType<typeof Ajv2020.default>; eventSchemas: Map<string, string> } | undefined;

/** OpenAPI 3.0's `nullable: true` (which the spec still uses beside 3.1's type unions) as JSON Schema. */
function withNulls(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(withNulls);
  if (typeof node !== "object" || node === null) return node;
  const out: Json = {};
  for (const [k, v] of Object.entries(node)) if (k !== "nullable") out[k] = withNulls(v);
  return (node as Json).nullable === true ? { anyOf: [out, { type: "null" }] } : out;
}

function spec() {
  if (loaded) return loaded;
  const components = withNulls((JSON.parse(readFileSync(SPEC_PATH, "utf8")) as { components: Json }).components) as { schemas: Record<string, Json> };
  // Not strict: the spec carries x- keys and OpenAPI's own keywords; formats such as unixtime are not checked.
  const ajv = new Ajv2020.default({ strict: false, allErrors: true, validateFormats: false });
  ajv.addSchema({ $id: "openai", components });
  // Each Responses stream event type has a schema of its own (ResponseTextDeltaEvent, ...).
  const eventSchemas = new Map<string, string>();
  for (const [name, schema] of Object.entries(components.schemas)) {
    const type = (schema.properties as Record<string, { enum?: unknown[] }> | undefined)?.type;
    if (name.endsWith("Event") && type?.enum?.length === 1) eventSchemas.set(String(type.enum[0]), name);
  }
  return (loaded = { ajv, eventSchemas });
}

/**
 * What in `value` breaks the spec's schema `name` (`CreateChatCompletionResponse`, `Response`,
 * ...), as "path: message" lines; empty when it conforms. `except` lists instance paths
 * (`/user`) where Tributary departs from the spec on purpose, each with its reason at the caller.
 */
export function specViolations(name: string, value: unknown, except: readonly string[] = []): string[] {
  const validate = spec().ajv.getSchema(`openai#/components/schemas/${name}`);
  if (!validate) throw new Error(`the spec has no schema ${name}`);
  if (validate(value)) return [];
  return (validate.errors ?? [])
    .filter((e) => !except.includes(e.instancePath))
    .map((e) => `${e.instancePath || "/"}: ${e.message} (${e.schemaPath})`);
}

/** specViolations of a Responses stream event, against the schema of its type. */
export function eventViolations(event: { type: string }, except: readonly string[] = []): string[] {
  const name = spec().eventSchemas.get(event.type);
  if (!name) return [`/type: the spec has no event ${event.type}`];
  return specViolations(name, event, except);
}
