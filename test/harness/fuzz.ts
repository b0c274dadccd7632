import type { Test } from "tap";

// The machinery of the seeded fuzz tests (test/e2e/hostile/fuzz*.test.ts): a seedable generator,
// hostile values as JSON text, bodies mutated from a valid base, hostile ids for paths, and a
// prober that sends requests and records every answer that breaks the product rule (no answer,
// a 5xx, an error not in OpenAI's shape, internals in the message, another outcome than the one
// expected). FUZZ_SEED=<seed> replays a run exactly.

/** mulberry32: a small, fast, seedable generator; the same seed gives the same bodies. */
export function generator(s: number) {
  let state = s >>> 0;
  const next = () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let x = state;
    x = Math.imul(x ^ (x >>> 15), x | 1);
    x ^= x + Math.imul(x ^ (x >>> 7), x | 61);
    return ((x ^ (x >>> 14)) >>> 0) / 2 ** 32;
  };
  return {
    next,
    int: (n: number) => Math.floor(next() * n),
    pick: <T>(items: readonly T[]): T => items[Math.floor(next() * items.length)]!,
  };
}
export type Rng = ReturnType<typeof generator>;

/** The run's seed (FUZZ_SEED, else random) and its generator; the seed is printed for replay. */
export function seeded(t: Test): { seed: number; rng: Rng } {
  const seed = Number(process.env.FUZZ_SEED ?? Math.floor(Math.random() * 2 ** 32));
  t.comment(`fuzz seed ${seed} (replay with FUZZ_SEED=${seed})`);
  return { seed, rng: generator(seed) };
}

export const nestedText = (depth: number) => '{"a":'.repeat(depth) + "1" + "}".repeat(depth);
export const nestedArrayText = (depth: number) => "[".repeat(depth) + "]".repeat(depth);

/** Hostile values, as JSON text (some cannot be written as JS values: __proto__ keys, deep nesting). */
export const HOSTILE_VALUES: readonly string[] = [
  "null", "true", "0", "-1", "1.5", "1e12", "2147483648", "4294967296", "9007199254740993", "1e308", "-1e308", "-0",
  '""', '"x"', JSON.stringify("x".repeat(10_000)), JSON.stringify("resp_" + "x".repeat(5 * 1024)), '"a.b*>%"', '"\\u0000"', '"\\ud800"', '"😀"',
  "[]", "{}", "[[[[[[[[]]]]]]]]", '{"__proto__":{"polluted":1}}', '{"constructor":{"prototype":1}}', '["__proto__"]',
  nestedText(70), nestedText(5_000), JSON.stringify(Array.from({ length: 300 }, (_, i) => i)), '{"type":"function","name":"f"}',
];

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type Path = Array<string | number>;

/** Paths to every value of `value` (arrays and objects included). Only valid base bodies are walked. */
function paths(value: Json, prefix: Path = []): Path[] {
  const out: Path[] = [prefix];
  if (Array.isArray(value)) value.forEach((v, i) => out.push(...paths(v, [...prefix, i])));
  else if (value && typeof value === "object") for (const [k, v] of Object.entries(value)) out.push(...paths(v, [...prefix, k]));
  return out;
}

const at = (value: Json, path: Path): Json => path.reduce<Json>((v, k) => (v as Record<string | number, Json>)[k]!, value);
const pathKey = (path: Path) => JSON.stringify(path);

/**
 * Writes `value` as JSON text with changes: at a changed path, the change's JSON text (or
 * nothing: the key or element is removed). Hostile values are text, so they can hold what a JS
 * value cannot carry through JSON.stringify (__proto__ keys, nesting thousands deep).
 */
function write(value: Json, changes: ReadonlyMap<string, string | undefined>, path: Path = []): string | undefined {
  const key = pathKey(path);
  if (changes.has(key)) return changes.get(key);
  if (Array.isArray(value)) return "[" + value.map((v, i) => write(v, changes, [...path, i])).filter((s) => s !== undefined).join(",") + "]";
  if (value && typeof value === "object")
    return "{" + Object.entries(value).map(([k, v]) => [k, write(v, changes, [...path, k])] as const).filter(([, v]) => v !== undefined).map(([k, v]) => `${JSON.stringify(k)}:${v}`).join(",") + "}";
  return JSON.stringify(value);
}

const ADDED_KEYS = ["__proto__", "constructor", "toString", "valueOf", "extra", "stream", "background", "n", "tools", "id"];

/** One hostile variant of `base`: one to three changes at random places, sometimes broken JSON. */
export function mutate(rng: Rng, base: Json): string {
  const all = paths(base);
  const objects = all.filter((p) => { const v = at(base, p); return v !== null && typeof v === "object" && !Array.isArray(v); });
  const changes = new Map<string, string | undefined>();
  const count = 1 + rng.int(3);
  for (let c = 0; c < count; c++) {
    switch (rng.int(5)) {
      case 0: { // remove a key or element (not the body itself)
        const path = rng.pick(all);
        if (path.length > 0) changes.set(pathKey(path), undefined);
        break;
      }
      case 1: { // add a key, prototype-named ones included
        const path = rng.pick(objects);
        const inner = JSON.stringify(at(base, path)).slice(1, -1);
        changes.set(pathKey(path), `{${inner}${inner ? "," : ""}${JSON.stringify(rng.pick(ADDED_KEYS))}:${rng.pick(HOSTILE_VALUES)}}`);
        break;
      }
      default: // replace a value with a hostile one
        changes.set(pathKey(rng.pick(all)), rng.pick(HOSTILE_VALUES));
    }
  }
  let text = write(base, changes) ?? "{}";
  if (rng.int(15) === 0) text = text.slice(0, rng.int(text.length)); // truncated JSON
  return text;
}

/**
 * Hostile path segments (already percent-encoded as a client would send them): overlong ids
 * (3 KB), NATS wildcards and separators (`*`, `>`, `.`), spaces, NUL, invalid and overlong
 * UTF-8, percent-encoded junk. (Dot segments, `..` and `%2E%2E`, are resolved by fetch's URL
 * parser before they are sent: they are not ids.)
 */
export const HOSTILE_IDS: readonly string[] = [
  "x".repeat(129), "artifact-" + "x".repeat(3 * 1024), "dep_" + "x".repeat(3 * 1024), "a.b", "a.*", "*", ">", "a.>", "%2A", "%3E", "a%2Eb",
  "%00", "a%00b", "%20", "a%20b", "%F0%9F%98%80", "%ED%A0%80", "%C0%AE", "%FF", "%", "%zz", "%25".repeat(200),
  "artifact-abc%2F..%2F..", "job_%2A", "sbx_%3E", "trace_" + "0".repeat(28), "sec%0D%0Aset-cookie:x",
];

/** Hostile query values for limit/after/order style parameters. */
export const HOSTILE_QUERY_VALUES: readonly string[] = [
  "", "0", "-1", "1.5", "1e3", "0x10", "+5", " 5", "NaN", "Infinity", "-Infinity", "null", "undefined", "true", "[]", "{}",
  "99999999999999999999999", "9".repeat(400), "x".repeat(3 * 1024), "%00", "%2A", "%3E", "a.b", "%FF", "%", "%zz", "desc%00", "ASC",
];

export interface Expectation {
  /** An exact status, or "4xx" (any client error), or "ok-or-4xx" (any answer below 500). */
  status?: number | "4xx" | "ok-or-4xx";
  /** The error's `param` (null included), checked when given. */
  param?: string | null;
  /** The error's `code`, checked when given. */
  code?: string | null;
}

/** Messages must never carry internals: stack frames, file paths, library error names, subjects and buckets. */
const INTERNALS = /\n\s+at |\bat [\w$.<>]+ \(|node:internal|\/dist\/|node_modules|TypeError|ReferenceError|RangeError|NatsError|JetStream|\$KV|\$O\.|_INBOX|tributary\.v1\.|tributary_[a-z]|invalid key|ECONN|EPIPE/;

export interface ProbeRequest {
  method: string;
  path: string;
  body?: string | Uint8Array | FormData;
  headers?: Record<string, string | undefined>;
  /** What must come back (default: any 4xx in OpenAI's error shape). */
  expect?: Expectation;
  /** A short name for the report (default: method and path). */
  what?: string;
}

/**
 * Sends hostile requests with a tenant's key and collects every breach of the rule: an answer
 * within `timeoutMs`, never a 5xx, a 4xx in OpenAI's error shape without internals, and the
 * expected status, param and code where the case names them.
 */
export class Prober {
  readonly failures: string[] = [];
  sent = 0;

  constructor(private readonly baseUrl: string, private readonly key: string, private readonly timeoutMs = 15_000) {}

  async probe(request: ProbeRequest): Promise<{ status: number; body: string } | undefined> {
    const what = request.what ?? `${request.method} ${request.path.slice(0, 100)}${request.path.length > 100 ? "…" : ""}`;
    const shown = typeof request.body === "string" ? ` body ${request.body.slice(0, 200)}${request.body.length > 200 ? "…" : ""}` : "";
    const expect = request.expect ?? { status: "4xx" };
    this.sent++;
    let status: number;
    let text: string;
    try {
      const res = await fetch(this.baseUrl + request.path, {
        method: request.method,
        // A header given as undefined is left out (a FormData body brings its own content type).
        headers: Object.fromEntries(Object.entries({ authorization: `Bearer ${this.key}`, "content-type": "application/json", ...request.headers }).filter(([, v]) => v !== undefined)),
        ...(request.body === undefined ? {} : { body: request.body }),
        signal: AbortSignal.timeout(this.timeoutMs),
      });
      status = res.status;
      text = await res.text();
    } catch (err) {
      this.failures.push(`${what}: no answer (${(err as Error).message})${shown}`);
      return undefined;
    }
    const fail = (why: string) => this.failures.push(`${what}: ${why}: ${status} ${text.slice(0, 300)}${shown}`);
    if (status >= 500) fail("a server error");
    else if (expect.status === "4xx" && (status < 400 || status >= 500)) fail("not a 4xx");
    else if (typeof expect.status === "number" && status !== expect.status) fail(`not ${expect.status}`);
    if (status >= 400) {
      let error: { message?: unknown; type?: unknown; param?: unknown; code?: unknown } | undefined;
      try {
        error = (JSON.parse(text) as { error?: typeof error }).error;
      } catch {
        // not JSON: reported below
      }
      if (!error || typeof error.message !== "string" || typeof error.type !== "string" || !("param" in error) || !("code" in error)) fail("not OpenAI's error shape");
      else {
        if (INTERNALS.test(error.message)) fail("internals in the message");
        if (error.message.length > 2048) fail(`an overlong message (${error.message.length} characters)`);
        if (expect.param !== undefined && error.param !== expect.param) fail(`param is not ${JSON.stringify(expect.param)}`);
        if (expect.code !== undefined && error.code !== expect.code) fail(`code is not ${JSON.stringify(expect.code)}`);
      }
    }
    return { status, body: text };
  }
}

/** Values of every JSON type but `value`'s own (null included: it is wrong for a required field). */
function otherTypes(value: Json): Json[] {
  const all: Json[] = [null, true, 1, "x", [], {}];
  const type = (v: Json) => (v === null ? "null" : Array.isArray(v) ? "array" : typeof v);
  return all.filter((v) => type(v) !== type(value));
}

/**
 * For every field of `base` (nested ones too, named as a param would name them: `parts[0].sha256`),
 * the body with that field given each other JSON type: the wrong type for every field.
 */
export function wrongTypes(base: { [key: string]: Json }): Array<{ param: string; value: Json; body: string }> {
  const out: Array<{ param: string; value: Json; body: string }> = [];
  const walk = (value: Json, param: string, replace: (v: Json) => Json) => {
    for (const wrong of otherTypes(value)) out.push({ param, value: wrong, body: JSON.stringify(replace(wrong)) });
    if (Array.isArray(value)) value.forEach((v, i) => walk(v, `${param}[${i}]`, (w) => replace(value.map((x, j) => (j === i ? w : x)))));
    else if (value && typeof value === "object")
      for (const [k, v] of Object.entries(value)) walk(v, `${param}.${k}`, (w) => replace({ ...value, [k]: w }));
  };
  for (const [k, v] of Object.entries(base)) walk(v, k, (w) => ({ ...base, [k]: w }));
  return out;
}
