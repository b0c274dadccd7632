import t from "tap";
import { buildTrace, capText, packTraces, parseTraceQuery, readTraceMessage, RequestObservation, traceIdTime, traceSchema, type Trace } from "../../modules/traces/mod.js";
import { errors } from "../../modules/errors/mod.js";

// Trace records: bodies cut on character boundaries at the cap, ids that carry their time, the
// list query's bounds at their edges, and a built trace that decodes with the stored schema.

t.test("capText cuts at the cap on a character boundary", async (t) => {
  t.same(capText("abc", 3), { text: "abc", bytes: 3, truncated: false }, "at the cap: whole");
  t.same(capText("abcd", 3), { text: "abc", bytes: 4, truncated: true }, "one past: cut");
  t.same(capText("aé", 2), { text: "a", bytes: 3, truncated: true }, "never half of é");
  t.same(capText("€€", 4), { text: "€", bytes: 6, truncated: true });
  t.same(capText(undefined, 10), { text: "", bytes: 0, truncated: false });
  t.same(capText(Buffer.from("hello"), 5), { text: "hello", bytes: 5, truncated: false });
});

t.test("trace ids carry their time", async (t) => {
  const obs = new RequestObservation("/v1/chat/completions", "req_1", 1_700_000_000_000, 0);
  obs.model = "m";
  const trace = buildTrace(obs, { principal: { organizationId: "o", projectId: "p", keyId: "key_1" }, httpStatus: 200, clientLeft: false, maxBodyBytes: 100 });
  const at = traceIdTime(trace.id)!;
  t.ok(Math.abs(at - 1_700_000_000_000) < 60_000, "the id's time is the request's end");
  t.equal(traceIdTime("trace_x"), undefined);
  t.equal(traceIdTime("trace_01a2158799a6NlM2x2FWtvjeRDKuX"), undefined, "one character too many");
});

t.test("a built trace decodes with the stored schema; its status follows the outcome", async (t) => {
  const principal = { organizationId: "org", projectId: "proj", keyId: "key_abc" };
  const ok = new RequestObservation("/v1/responses", "req_2", Date.now(), performance.now());
  ok.model = "test/m";
  ok.log = true;
  ok.requestBody = Buffer.from('{"model":"test/m","log":true}');
  ok.responseBody = { id: "resp_1" };
  ok.renderedPrompt = "prompt";
  const trace = buildTrace(ok, { principal, httpStatus: 200, clientLeft: false, maxBodyBytes: 1000 });
  t.same(traceSchema.parse("t", JSON.stringify(trace)), trace);
  t.equal(trace.status, "success");
  t.equal(trace.api_key_id, "key_abc");

  const failed = new RequestObservation("/v1/chat/completions", "req_3");
  failed.model = "test/m";
  failed.fail(errors.invalidParam("max_tokens", "too many"));
  const ft = buildTrace(failed, { principal, httpStatus: 400, clientLeft: false, maxBodyBytes: 1000 });
  t.match(ft, { status: "error", error: { type: "invalid_request_error", message: "too many" }, attributes: { "error.type": "invalid_value" }, prompt: null });
  const cancelled = new RequestObservation("/v1/chat/completions", "req_4");
  cancelled.fail(errors.cancelled());
  t.equal(buildTrace(cancelled, { principal, httpStatus: 200, clientLeft: false, maxBodyBytes: 10 }).status, "cancelled");
  t.equal(buildTrace(cancelled, { principal, httpStatus: 200, clientLeft: true, maxBodyBytes: 10 }).status, "client_disconnected");
});

t.test("the list query's bounds", async (t) => {
  const q = (s: string) => parseTraceQuery(new URLSearchParams(s));
  const param = (s: string) => {
    try {
      q(s);
      return "accepted";
    } catch (err) {
      return (err as { param: string }).param;
    }
  };
  t.equal(q("").limit, 20, "default limit");
  t.equal(q("limit=100").limit, 100);
  t.equal(param("limit=101"), "limit");
  t.equal(param("limit=0"), "limit");
  t.equal(param("limit=1.5"), "limit");
  t.equal(q("start_time=4294967295").startTime, 4294967295);
  t.equal(param("start_time=4294967296"), "start_time");
  t.equal(param("end_time=1&start_time=1"), "end_time");
  t.equal(q("start_time=1&end_time=2").endTime, 2);
  t.equal(param(`model=${"m".repeat(257)}`), "model");
  t.equal(q(`model=${"m".repeat(256)}`).model, "m".repeat(256));
  t.equal(param(`api_key_id=${"k".repeat(65)}`), "api_key_id");
  t.equal(q(`api_key_id=${"k".repeat(64)}`).keyId, "k".repeat(64));
  t.equal(param("status=fine"), "status");
  t.equal(param("after=resp_1"), "after");
  t.equal(param("colour=red"), "colour");
});

t.test("traces are packed per subject into messages of at most 64 traces and 512 KiB, in order", async (t) => {
  const obs = new RequestObservation("/v1/chat/completions", "req_p", Date.now(), 0);
  obs.model = "m";
  const base = buildTrace(obs, { principal: { organizationId: "o", projectId: "p", keyId: "key_1" }, httpStatus: 200, clientLeft: false, maxBodyBytes: 100 });
  const make = (n: number, over: Partial<Trace> = {}): Trace => ({ ...base, request_id: `req_${n}`, ...over });
  const decode = (payload: Uint8Array) => readTraceMessage(payload)!.records.map((x) => traceSchema.decode("t", x).request_id);

  const many = Array.from({ length: 129 }, (_, i) => make(i));
  const counted = packTraces(many);
  t.same(counted.map((m) => m.count), [64, 64, 1], "64 at the count bound, the 65th starts a message");
  t.same(counted.flatMap((m) => decode(m.payload)), many.map((x) => x.request_id), "every trace once, in order");

  const mixed = packTraces([make(1), make(2, { api_key_id: "key_2" }), make(3), make(4, { status: "error" })]);
  t.equal(mixed.length, 3, "one message per subject");
  t.same(decode(mixed[0]!.payload), ["req_1", "req_3"]);
  t.not(mixed[0]!.subject, mixed[1]!.subject);

  const body = (chars: number) => ({ ...base.response, text: "x".repeat(chars) });
  const sized = packTraces([make(1, { response: body(200_000) }), make(2, { response: body(200_000) }), make(3, { response: body(200_000) })]);
  t.same(sized.map((m) => m.count), [2, 1], "two of ~200 KB fit 512 KiB, the third does not");
  t.ok(sized.every((m) => m.payload.length <= 512 * 1024));
  const huge = packTraces([make(1), make(2, { response: body(600_000) }), make(3)]);
  t.same(huge.map((m) => m.count), [1, 1, 1], "a trace over the size bound goes alone, between its neighbours' messages");
});
