import type { Test } from "tap";
import { APIError } from "openai";

/** Awaits a call that must fail with an OpenAI error of this status (and code and param, when given). */
export async function expectApiError(
  t: Test,
  call: Promise<unknown>,
  expected: { status: number; code?: string | null; param?: string | null; message?: RegExp },
): Promise<APIError | undefined> {
  try {
    await call;
  } catch (err) {
    if (!(err instanceof APIError)) {
      t.fail(`expected an APIError, got ${String(err)}`);
      return undefined;
    }
    t.equal(err.status, expected.status, `status ${expected.status}: ${err.message}`);
    if (expected.code !== undefined) t.equal(err.code, expected.code, "code");
    if (expected.param !== undefined) t.equal(err.param, expected.param, "param");
    if (expected.message) t.match(err.message, expected.message, "message");
    return err;
  }
  t.fail(`expected a ${expected.status} error, the call succeeded`);
  return undefined;
}

/**
 * A reply that is sure to end by itself: the tiny model never stops a story, but a JSON object
 * with one short string field closes within a few dozen tokens.
 */
export const SHORT_JSON = {
  format: {
    type: "json_schema" as const,
    name: "note",
    schema: { type: "object", properties: { note: { type: "string", maxLength: 40 } }, required: ["note"], additionalProperties: false },
    strict: true,
  },
};
