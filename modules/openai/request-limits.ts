import { readConfig, requestLimitsConfig, type RequestLimits } from "../../lib/config.js";
import { errors } from "../errors/mod.js";

// The bounds of a request's content (lib/config.ts, requestLimitsConfig), checked before any
// work is done for it. The walks here are iterative and stop at the first bound crossed: a body
// 100,000 levels deep costs a walk of 65 levels, not a stack overflow in whatever recursive code
// (JSON.stringify, schema-to-grammar) would meet it later.

export type { RequestLimits };

let configured: RequestLimits | undefined;

/** The limits of this process (read from the environment once; the gateway and the actor host read the same). */
export function requestLimits(): RequestLimits {
  return (configured ??= readConfig(requestLimitsConfig));
}

export interface JsonShape {
  /** Deepest nesting of arrays and objects ({} is 1, a scalar 0). */
  depth: number;
  /** Values counted, containers and scalars alike. */
  elements: number;
  /** The top-level key (or [index]) under which the walk stopped, when it stopped at a bound. */
  at?: string;
}

/**
 * Measures `value`'s nesting and element count, stopping as soon as either goes past its bound
 * (then the result is just past it, with the top-level key it was under): the cost is bounded
 * by the bounds, not by the value.
 */
export function measureJson(value: unknown, bounds: { maxDepth: number; maxElements: number }): JsonShape {
  let depth = 0;
  let elements = 0;
  // Values under each top-level key: a body with too many values names the key holding the most.
  const perKey = new Map<string, number>();
  const stack: Array<{ value: unknown; depth: number; top: string | undefined }> = [{ value, depth: 0, top: undefined }];
  while (stack.length > 0) {
    const { value: v, depth: at, top } = stack.pop()!;
    elements++;
    if (top !== undefined) perKey.set(top, (perKey.get(top) ?? 0) + 1);
    if (elements > bounds.maxElements) return { depth, elements, ...largest(perKey) };
    if (typeof v !== "object" || v === null) continue;
    const d = at + 1;
    if (d > depth) depth = d;
    if (depth > bounds.maxDepth) return { depth, elements, ...(top === undefined ? {} : { at: top }) };
    // Pushed last to first, so that values are visited in document order.
    if (Array.isArray(v)) for (let i = v.length - 1; i >= 0; i--) stack.push({ value: v[i], depth: d, top: top ?? `[${i}]` });
    else {
      const keys = Object.keys(v);
      for (let i = keys.length - 1; i >= 0; i--) stack.push({ value: (v as Record<string, unknown>)[keys[i]!], depth: d, top: top ?? keys[i]! });
    }
  }
  return { depth, elements };
}

function largest(perKey: ReadonlyMap<string, number>): { at?: string } {
  let at: string | undefined;
  let most = 0;
  for (const [key, n] of perKey) if (n > most) [at, most] = [key, n];
  return at === undefined ? {} : { at };
}

/** A request body within the nesting and element bounds, or the 400 that names the parameter that crossed one. */
export function checkBodyShape(body: unknown, limits: RequestLimits = requestLimits()): void {
  const shape = measureJson(body, { maxDepth: limits.maxJsonDepth, maxElements: limits.maxJsonElements });
  const param = shape.at ?? null;
  const where = param === null ? "The request body" : `'${param}'`;
  if (shape.depth > limits.maxJsonDepth)
    throw errors.invalidParam(param, `${where} is nested too deeply: at most ${limits.maxJsonDepth} levels of arrays and objects are allowed in a request body.`, "json_too_deep");
  if (shape.elements > limits.maxJsonElements)
    throw errors.invalidParam(param, `The request body has too many values (arrays, objects and scalars): at most ${limits.maxJsonElements} are allowed.`, "json_too_large");
}

/** One JSON schema (tool parameters, a response format's schema) within its depth and size bounds. */
export function checkSchemaSize(schema: unknown, param: string, limits: RequestLimits = requestLimits()): void {
  if (schema == null) return;
  const shape = measureJson(schema, { maxDepth: limits.maxSchemaDepth, maxElements: limits.maxJsonElements });
  if (shape.depth > limits.maxSchemaDepth)
    throw errors.invalidParam(param, `Invalid schema for '${param}': it is nested more than ${limits.maxSchemaDepth} levels deep.`, "schema_too_deep");
  const chars = JSON.stringify(schema).length; // safe: the depth is bounded now
  if (chars > limits.maxSchemaChars)
    throw errors.invalidParam(param, `Invalid schema for '${param}': it is ${chars} characters long; the limit is ${limits.maxSchemaChars}.`, "schema_too_large");
}

/** The tools of a request: their number and their definitions' size together. */
export function checkTools(tools: readonly unknown[] | null | undefined, limits: RequestLimits = requestLimits()): void {
  if (!tools || tools.length === 0) return;
  if (tools.length > limits.maxTools)
    throw errors.invalidParam("tools", `Invalid 'tools': at most ${limits.maxTools} tools are allowed, got ${tools.length}.`, "array_above_max_length");
  const chars = JSON.stringify(tools).length;
  if (chars > limits.maxToolsChars)
    throw errors.invalidParam("tools", `Invalid 'tools': the tool definitions are ${chars} characters long together; the limit is ${limits.maxToolsChars}.`, "tools_too_large");
}

/** Token ids are int32 in the contract with the runners. */
const MAX_TOKEN_ID = 2 ** 31 - 1;

export function checkLogitBias(bias: Readonly<Record<string, number>> | null | undefined, limits: RequestLimits = requestLimits()): void {
  if (!bias) return;
  const keys = Object.keys(bias);
  if (keys.length > limits.maxLogitBias)
    throw errors.invalidParam("logit_bias", `Invalid 'logit_bias': at most ${limits.maxLogitBias} tokens can be biased, got ${keys.length}.`);
  for (const key of keys)
    if (!/^\d{1,10}$/.test(key) || Number(key) > MAX_TOKEN_ID)
      throw errors.invalidParam("logit_bias", `Invalid key in 'logit_bias': '${key.length > 32 ? key.slice(0, 32) + "..." : key}' is not a token id.`);
}

export function checkStop(stop: string | readonly string[] | null | undefined, limits: RequestLimits = requestLimits()): void {
  if (stop == null) return;
  const sequences = typeof stop === "string" ? [stop] : stop;
  if (sequences.length > limits.maxStopSequences)
    throw errors.invalidParam("stop", `Invalid 'stop': at most ${limits.maxStopSequences} stop sequences are allowed, got ${sequences.length}.`, "array_above_max_length");
  sequences.forEach((s, i) => {
    if (s.length > limits.maxStopChars)
      throw errors.invalidParam(typeof stop === "string" ? "stop" : `stop[${i}]`, `Invalid 'stop': a stop sequence may be at most ${limits.maxStopChars} characters long.`, "string_above_max_length");
  });
}

/** An integer parameter's upper bound (`n`, `max_tool_calls`). */
export function checkAtMost(value: number | null | undefined, param: string, maximum: number): void {
  if (value != null && value > maximum)
    throw errors.invalidParam(param, `Invalid '${param}': integer above maximum value. Expected a value less than or equal to ${maximum}, but got ${value} instead.`, "integer_above_max_value");
}
