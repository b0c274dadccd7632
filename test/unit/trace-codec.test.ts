import t from "tap";
import { buildTrace, packTraces, readTraceMessage, RequestObservation, TRACE_MESSAGE_MAGIC, traceSchema, type Trace } from "../../modules/traces/mod.js";
import { timingText } from "../../modules/traces/trace-codec.js";
import { errors } from "../../modules/errors/mod.js";

// The trace stream's message layout: a head line per trace and its texts as raw UTF-8. What is
// written reads back as the same trace, byte for byte once serialized again (what GET /v1/traces
// returns), whatever the texts hold; a damaged message yields the records before the damage.

const principal = { organizationId: "org", projectId: "proj", keyId: "key_abc" };

function trace(over: { request?: string | Buffer; response?: string; prompt?: string; fail?: boolean; cap?: number } = {}): Trace {
  const obs = new RequestObservation("/v1/chat/completions", "req_\"odd\"\nid", 1_700_000_000_000, performance.now() - 12.345);
  obs.model = "test/modèle";
  obs.log = true;
  obs.stream = true;
  obs.requestBody = over.request ?? Buffer.from('{"model":"test/modèle","messages":[{"role":"user","content":"Hi \\"there\\"\\n"}],"log":true}');
  obs.responseBody = over.response ?? '{"id":"chatcmpl-1","choices":[{"message":{"content":"Ünïcødé 🐉 \\"q\\""}}]}';
  obs.runnerAdmitted("runner-1", 7, over.prompt ?? "### Human\nHi \"there\"\n\n### Assistant\n");
  obs.rateLimitAdmitted();
  obs.firstToken();
  obs.finishReasons.push("length", "stop");
  obs.request = { maxTokens: 8, temperature: 0.25, topP: null };
  obs.responseId = "chatcmpl-1";
  obs.chunks = 9;
  if (over.fail) obs.fail(errors.invalidParam("max_tokens", "too many \"tokens\" — é"));
  return buildTrace(obs, { principal, httpStatus: over.fail ? 400 : 200, clientLeft: false, maxBodyBytes: over.cap ?? 10_000 });
}

const readBack = (payload: Uint8Array) => readTraceMessage(payload)!.records.map((r, i) => traceSchema.decode(`t[${i}]`, r));

t.test("a trace reads back as it was written, serialized identically", async (t) => {
  const cases: Array<[string, Trace]> = [
    ["plain", trace()],
    ["an error, no runner text", trace({ fail: true })],
    ["texts holding newlines, NUL, the layout's own first line and multi-byte characters", trace({ request: `{"a":"${TRACE_MESSAGE_MAGIC}\\u0000"}`, response: "line\nline\r\n\u0000€𝄞", prompt: `${TRACE_MESSAGE_MAGIC}\n\n` })],
    ["empty texts", trace({ request: "", response: "", prompt: "" })],
    ["texts cut at the cap", trace({ request: "é".repeat(300), response: "x".repeat(500), prompt: "€".repeat(200), cap: 257 })],
  ];
  for (const [name, original] of cases) {
    const [message] = packTraces([original]);
    t.ok(Buffer.from(message!.payload).toString("latin1").startsWith(TRACE_MESSAGE_MAGIC), `${name}: the layout's first line`);
    const [back] = readBack(message!.payload);
    t.equal(JSON.stringify(back), JSON.stringify(original), `${name}: the same JSON`);
  }
  const noPrompt = { ...trace(), prompt: null };
  t.equal(JSON.stringify(readBack(packTraces([noPrompt])[0]!.payload)[0]), JSON.stringify(noPrompt), "a trace without a prompt");
  t.equal(cases[4]![1].request.truncated && cases[4]![1].response.truncated && cases[4]![1].prompt!.truncated, true, "(the cut case is cut)");
});

t.test("texts are stored raw, not escaped into JSON strings", async (t) => {
  const original = trace();
  const payload = Buffer.from(packTraces([original])[0]!.payload).toString("utf8");
  t.ok(payload.includes(original.request.text), "the request body as sent");
  t.ok(payload.includes(original.response.text), "the response as sent");
  t.ok(payload.length < JSON.stringify(original).length, `smaller than the trace as JSON (${payload.length} < ${JSON.stringify(original).length})`);
});

t.test("several traces in one message, in order", async (t) => {
  const list = Array.from({ length: 5 }, (_, i) => ({ ...trace({ response: `r${i}`.repeat(i) }), request_id: `req_${i}` }));
  const packed = packTraces(list);
  t.equal(packed.length, 1);
  t.same(readBack(packed[0]!.payload).map((x) => [x.request_id, x.response.text]), list.map((x) => [x.request_id, x.response.text]));
});

t.test("a damaged message yields the records before the damage, and says why", async (t) => {
  const list = [0, 1, 2].map((i) => ({ ...trace(), request_id: `req_${i}` }));
  const payload = packTraces(list)[0]!.payload;
  const cut = payload.subarray(0, payload.length - 10);
  const read = readTraceMessage(cut)!;
  t.same(read.records.map((r) => (r as Trace).request_id), ["req_0", "req_1"]);
  t.match(read.error, /record 2: bad/);
  const badHead = Buffer.concat([Buffer.from(TRACE_MESSAGE_MAGIC), Buffer.from("{not json\n")]);
  t.match(readTraceMessage(badHead)!.error, /record 0:/);
  const lying = Buffer.concat([Buffer.from(TRACE_MESSAGE_MAGIC), Buffer.from('{"request":{"text_bytes":99999999},"response":{"text_bytes":0},"prompt":null}\n')]);
  t.match(readTraceMessage(lying)!.error, /request\.text_bytes/, "a size past the message's end");
});

t.test("messages in the older layout (JSON) are told apart", async (t) => {
  t.equal(readTraceMessage(Buffer.from(JSON.stringify([trace()]))), undefined, "a JSON array of traces");
  t.equal(readTraceMessage(Buffer.from(JSON.stringify(trace()))), undefined, "one trace");
  t.equal(readTraceMessage(new Uint8Array(0)), undefined, "nothing");
});

t.test("timings are written as JSON.stringify writes them", async (t) => {
  const values = [0, 0.01, 0.1, 0.21, 1.05, 12.3, 99.99, 100, 1234.56, 1e9 + 0.07, 0.005, 1 / 3, -1.25, 1e13 + 0.5, 123456789.12, null];
  // And many of the values a trace holds: times in ms rounded to hundredths.
  let seed = 7;
  for (let i = 0; i < 5000; i++) {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    values.push(Math.round((seed / 2 ** 31) * 10 ** (1 + (i % 9)) * 100) / 100);
  }
  const wrong = values.filter((v) => timingText(v) !== JSON.stringify(v));
  t.same(wrong, [], `${values.length} values`);
});
