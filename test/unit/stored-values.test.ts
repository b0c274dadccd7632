import t from "tap";
import * as Schema from "effect/Schema";
import { FinishReason } from "../../proto/gen/tributary/v1/inference.js";
import { compareAndSet, InvalidValue, RecordContended, valueSchema, type CasTarget, type Versioned } from "../../lib/nats/kv-records.js";
import { newResponseObject, normalizeInputItems, parseResponseCreateRequest, ResponseOutputBuilder, responseUsage, storedValues, successLine, notRunLine } from "../../modules/openai/mod.js";
import { accountRecords } from "../../modules/accounts/mod.js";
import { budgetRecordSchema, freshRecord } from "../../modules/ratelimit/mod.js";

// Values read back from JetStream go through a schema: what the current code writes reads back
// unchanged (stored formats stay compatible), and anything else is an InvalidValue naming the key.

/** JSON text, as a value is stored in KV. */
const stored = (value: unknown) => JSON.stringify(value);
/** What JSON keeps of a value (undefined fields go). */
const asJson = (value: unknown) => JSON.parse(JSON.stringify(value)) as unknown;

t.test("responses and items written by the code read back unchanged", async (t) => {
  const body = parseResponseCreateRequest({
    model: "test/m",
    instructions: "Be brief.",
    input: [
      { role: "user", content: "hi" },
      { role: "assistant", content: [{ type: "output_text", text: "hello" }] },
      { type: "function_call", call_id: "call_1", name: "f", arguments: "{}" },
      { type: "function_call_output", call_id: "call_1", output: "42" },
      { type: "reasoning", summary: [], encrypted_content: "xyz" },
    ],
    tools: [{ type: "function", name: "f", parameters: { type: "object" } }],
    text: { format: { type: "json_object" } },
    metadata: { a: "b" },
    background: true,
  });
  const input = normalizeInputItems(body.input, () => undefined);
  t.same(storedValues.items.parse("k.in", stored(input)), asJson(input), "input items");

  const response = newResponseObject(body, { id: "resp_1", createdAt: 1_700_000_000, conversationId: "conv_1" }, "in_progress");
  const builder = new ResponseOutputBuilder(() => {});
  response.output = builder.output;
  builder.delta({ choiceIndex: 0, text: "Hello", tokens: 1, toolCalls: [] });
  builder.delta({ choiceIndex: 0, text: "", tokens: 1, toolCalls: [{ index: 0, id: "call_2", name: "f", arguments: "{\"x\":1}" }] });
  builder.end(FinishReason.FINISH_REASON_LENGTH);
  response.status = "incomplete";
  response.incomplete_details = { reason: "max_output_tokens" };
  response.usage = responseUsage({ promptTokens: 12, completionTokens: 2, cachedPromptTokens: 0 });
  response.error = null;
  t.same(storedValues.response.parse("k", stored(response)), response, "a finished response");
  t.equal(response.usage.input_tokens_details.cache_write_tokens, 0, "a response's usage has cache_write_tokens (spec 2.3.0 requires it)");
  const { cache_write_tokens: _, ...detailsBefore } = response.usage.input_tokens_details;
  const storedBefore = { ...response, usage: { ...response.usage, input_tokens_details: detailsBefore } };
  t.same(storedValues.response.parse("k", stored(storedBefore)), response, "one stored before cache_write_tokens existed reads with 0");
  const failed = { ...response, status: "failed" as const, error: { code: "server_error", message: "x" }, usage: null };
  t.same(storedValues.response.parse("k", stored(failed)), failed, "a failed one");
  t.same(parseResponseCreateRequest(JSON.parse(stored({ ...body, input: [] }))), { ...body, input: [] }, "the background request, as stored");
});

t.test("other records written by the code read back unchanged", async (t) => {
  const line = successLine("c1", "req_1", { id: "chatcmpl-1", usage: { prompt_tokens: 1 } });
  t.same(storedValues.resultLine.parse("b.0", stored(line)), line);
  const notRun = notRunLine("c2", "batch_expired", "late");
  t.same(storedValues.resultLine.parse("b.1", stored(notRun)), notRun);
  const budget = freshRecord("bh1", 60_000, Date.now(), { requests: 10, tokens: 100 });
  t.same(budgetRecordSchema.parse("m.organization.o", stored(budget)), budget);
  const key = { id: "key_1", name: "k", organization_id: "org-1", project_id: null, prefix: "sk-proj-ab", created_at: 1, revoked_at: null };
  t.same(accountRecords.apiKey.parse("apikey.x", stored(key)), key);
});

t.test("a value that does not decode is an InvalidValue naming where it is and what is wrong", async (t) => {
  const check = (json: string, path: string) => {
    try {
      storedValues.response.parse("proj.resp_9", json);
      t.fail("decoded");
    } catch (err) {
      t.ok(err instanceof InvalidValue, "InvalidValue");
      const e = err as InvalidValue;
      t.equal(e.where, "proj.resp_9");
      t.equal(e.path, path);
      t.match(e.message, /proj\.resp_9/);
    }
  };
  check("{not json", "");
  check("[]", "");
  const response = newResponseObject(parseResponseCreateRequest({ model: "m", input: "x" }), { id: "resp_9", createdAt: 1, conversationId: null }, "queued");
  check(stored({ ...response, status: "done" }), "status");
  check(stored({ ...response, output: [{ type: "message", id: "m", role: "assistant", status: "completed", content: [{ type: "output_text" }] }] }), "output[0].content[0].text");
  const { model: _dropped, ...withoutModel } = response;
  check(stored(withoutModel), "model");
  t.throws(() => accountRecords.apiKey.parseBytes("apikey.y", new TextEncoder().encode("{\"id\": 1}")), InvalidValue);
});

t.test("keys a schema does not list are dropped on read", async (t) => {
  const s = valueSchema<{ a: number }>()(Schema.Struct({ a: Schema.Number }));
  t.same(s.parse("k", "{\"a\":1,\"b\":2}"), { a: 1 });
});

/** A record whose writes conflict while `conflicts` lasts: a scripted sequence, not a store. */
function scripted(initial: number | undefined, conflicts: number): CasTarget<number> & { writes: number[] } {
  let current: Versioned<number> | undefined = initial === undefined ? undefined : { value: initial, revision: 1 };
  let left = conflicts;
  const writes: number[] = [];
  return {
    writes,
    read: async () => current && { ...current },
    write: async (value, revision) => {
      writes.push(value);
      if (left-- > 0 || revision !== current?.revision) return undefined;
      current = { value, revision: (revision ?? 0) + 1 };
      return current.revision;
    },
  };
}

t.test("compareAndSet: retries a lost write with the fresh value, and stops at its attempts", async (t) => {
  const target = scripted(1, 2);
  const result = await compareAndSet(target, (n) => n! + 1, { where: "k" });
  t.same(result, { value: 2, revision: 2, changed: true });
  t.same(target.writes, [2, 2, 2], "three attempts, the third one wins");

  const unchanged = await compareAndSet(scripted(5, 0), () => undefined, { where: "k" });
  t.same(unchanged, { value: 5, revision: 1, changed: false }, "undefined from change leaves the record");

  t.equal(await compareAndSet(scripted(undefined, 0), () => 1, { where: "k" }), undefined, "absent stays absent");
  t.same(await compareAndSet(scripted(undefined, 0), (n) => (n ?? 0) + 7, { where: "k", create: true }), { value: 7, revision: 1, changed: true }, "or is created");

  await t.rejects(compareAndSet(scripted(1, 5), (n) => n! + 1, { where: "k", attempts: 5 }), RecordContended);
  const edge = scripted(1, 4);
  t.same(await compareAndSet(edge, (n) => n! + 1, { where: "k", attempts: 5 }), { value: 2, revision: 2, changed: true }, "the last attempt still counts");
});
