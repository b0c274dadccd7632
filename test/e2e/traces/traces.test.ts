// tier: slow (a stack of its own)
import t, { type Test } from "tap";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { newTraceId, packTraces, type Trace } from "../../../modules/traces/mod.js";
import { startStack } from "../../harness/stack.js";
import { TEST_KEY, TEST_MODEL } from "../../harness/processes.js";

// log: true records one trace per request (chat completions streamed or not, responses, template
// runs, failures, clients that leave), readable with GET /v1/traces[/{id}] in the caller's project
// only; bodies are capped; no credential is recorded; the stream expires traces by age and bytes.

const OTHER_KEY = "sk-test-traces-other";
const CAP = 4096;
const stack = await startStack(t, {
  env: { TRIBUTARY_TRACE_FLUSH_MS: "20", TRIBUTARY_TRACE_MAX_BODY_BYTES: String(CAP), TRIBUTARY_TRACE_RETENTION_SECONDS: "86400", TRIBUTARY_TRACE_MAX_STREAM_BYTES: "104857600" },
  gatewayEnv: { TRIBUTARY_API_KEYS: `${OTHER_KEY}=proj-traces-other` },
});

type Json = Record<string, any>;
async function call(method: string, path: string, body?: unknown, key = TEST_KEY) {
  const res = await fetch(stack.gateway.url + path, {
    method,
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let json: Json = {};
  try {
    json = JSON.parse(text) as Json;
  } catch {
    json = { text };
  }
  return { status: res.status, headers: res.headers, body: json };
}

/** The trace of request `requestId`, waiting for the writer's flush. */
async function traceOf(requestId: string, key = TEST_KEY): Promise<Json> {
  for (let i = 0; i < 100; i++) {
    const list = await call("GET", "/v1/traces?limit=100", undefined, key);
    const found = (list.body.data as Json[] | undefined)?.find((tr) => tr.request_id === requestId);
    if (found) return found;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`no trace for ${requestId}`);
}

function timingsInOrder(t: Test, tr: Json, firstToken = true) {
  const tm = tr.timings as Json;
  t.ok(tm.received_at > Date.now() - 120_000 && tm.received_at <= Date.now(), "received_at is a recent unix ms");
  t.ok(tm.rate_limit_admitted_ms >= 0, "rate limit admission");
  t.ok(tm.runner_admitted_ms >= tm.rate_limit_admitted_ms, "runner admission after the rate limiter");
  if (firstToken) {
    t.ok(tm.first_token_ms >= tm.runner_admitted_ms, "first token after admission");
    t.ok(tm.end_ms >= tm.first_token_ms, "end after the first token");
    t.equal(tm.ttft_ms, tm.first_token_ms);
  }
  t.equal(tm.total_ms, tm.end_ms);
  t.ok(tm.queue_wait_ms === null || tm.queue_wait_ms >= 0, "queue wait");
}

function noCredentials(t: Test, tr: Json) {
  const text = JSON.stringify(tr);
  t.notOk(text.includes(TEST_KEY), "the key itself is nowhere in the trace");
  t.notOk(/bearer/i.test(text), "no authorization header");
}

const logged = new Map<string, Json>();

t.test("a logged non-streamed chat completion", async (t) => {
  const res = await call("POST", "/v1/chat/completions", { model: TEST_MODEL, messages: [{ role: "user", content: "Once upon a time" }], max_tokens: 8, temperature: 0.5, log: true });
  t.equal(res.status, 200);
  const requestId = res.headers.get("x-request-id")!;
  const tr = await traceOf(requestId);
  logged.set("chat", tr);
  t.match(tr, {
    object: "trace",
    id: /^trace_/,
    request_id: requestId,
    project_id: "proj-local",
    organization_id: "org-local",
    endpoint: "/v1/chat/completions",
    model: TEST_MODEL,
    status: "success",
    http_status: 200,
    error: null,
    stream: false,
    batch: false,
    runner_id: res.headers.get("x-tributary-runner"),
    finish_reasons: ["length"],
  });
  t.match(tr.api_key_id, /^key_/, "the key is named by its id");
  t.same(tr.usage, { input_tokens: res.body.usage.prompt_tokens, cached_input_tokens: res.body.usage.prompt_tokens_details.cached_tokens, output_tokens: 8 });
  timingsInOrder(t, tr);
  t.same(JSON.parse(tr.request.text), { model: TEST_MODEL, messages: [{ role: "user", content: "Once upon a time" }], max_tokens: 8, temperature: 0.5, log: true });
  t.equal(tr.request.truncated, false);
  t.same(JSON.parse(tr.response.text), res.body, "the response as sent");
  t.match(tr.prompt.text, /Once upon a time/, "the prompt as the engine saw it");
  t.match(tr.prompt.text, /### Human/, "with the chat template applied");
  t.match(tr.attributes, {
    "gen_ai.operation.name": "chat",
    "gen_ai.request.model": TEST_MODEL,
    "gen_ai.response.id": res.body.id,
    "gen_ai.usage.input_tokens": res.body.usage.prompt_tokens,
    "gen_ai.usage.output_tokens": 8,
    "gen_ai.request.max_tokens": 8,
    "gen_ai.request.temperature": 0.5,
    "gen_ai.response.finish_reasons": ["length"],
  });
  noCredentials(t, tr);
  const one = await call("GET", `/v1/traces/${tr.id}`);
  t.equal(one.status, 200);
  t.same(one.body, tr, "GET /v1/traces/{id} returns the same trace");
});

t.test("a logged streamed chat completion is reassembled", async (t) => {
  const res = await fetch(stack.gateway.url + "/v1/chat/completions", {
    method: "POST",
    headers: { authorization: `Bearer ${TEST_KEY}`, "content-type": "application/json" },
    body: JSON.stringify({ model: TEST_MODEL, messages: [{ role: "user", content: "Tell me" }], max_tokens: 12, stream: true, stream_options: { include_usage: true }, log: true }),
  });
  const text = await res.text();
  const chunks = text.split("\n\n").filter((e) => e.startsWith("data: {")).map((e) => JSON.parse(e.slice(6)) as Json);
  const content = chunks.map((c) => c.choices[0]?.delta?.content ?? "").join("");
  const tr = await traceOf(res.headers.get("x-request-id")!);
  logged.set("stream", tr);
  t.match(tr, { stream: true, status: "success", http_status: 200, finish_reasons: ["length"] });
  const whole = JSON.parse(tr.response.text) as Json;
  t.equal(whole.object, "chat.completion");
  t.equal(whole.id, chunks[0]!.id, "the stream's id");
  t.equal(whole.choices[0].message.content, content, "the text the chunks carried");
  t.ok(tr.response.chunks >= 2 && tr.response.chunks <= chunks.length + 1, `chunks counted (${tr.response.chunks} of ${chunks.length} data events)`);
  timingsInOrder(t, tr);
  noCredentials(t, tr);
});

t.test("a chat completion without log records no trace", async (t) => {
  const res = await call("POST", "/v1/chat/completions", { model: TEST_MODEL, messages: [{ role: "user", content: "Hi" }], max_tokens: 2 });
  const off = await call("POST", "/v1/chat/completions", { model: TEST_MODEL, messages: [{ role: "user", content: "Hi" }], max_tokens: 2, log: false });
  // A logged request after them: once its trace is there, theirs would be too.
  const marker = await call("POST", "/v1/chat/completions", { model: TEST_MODEL, messages: [{ role: "user", content: "Hi" }], max_tokens: 2, log: true });
  await traceOf(marker.headers.get("x-request-id")!);
  const all = (await call("GET", "/v1/traces?limit=100")).body.data as Json[];
  t.notOk(all.some((tr) => tr.request_id === res.headers.get("x-request-id")), "log absent: no trace");
  t.notOk(all.some((tr) => tr.request_id === off.headers.get("x-request-id")), "log false: no trace");
});

t.test("a logged response and a logged template run", async (t) => {
  const res = await call("POST", "/v1/responses", { model: TEST_MODEL, input: "A dragon", max_output_tokens: 16, log: true });
  t.equal(res.status, 200);
  const tr = await traceOf(res.headers.get("x-request-id")!);
  t.match(tr, { endpoint: "/v1/responses", status: "success", stream: false, usage: { output_tokens: 16 } });
  t.equal(JSON.parse(tr.response.text).id, res.body.id);
  t.equal(tr.attributes["gen_ai.response.id"], res.body.id);
  t.match(tr.prompt.text, /A dragon/);
  timingsInOrder(t, tr);

  t.equal((await call("POST", "/v1/prompts", { name: "traced", model: TEST_MODEL, input: "Say {{word}}", max_output_tokens: 16 })).status, 200);
  const run = await call("POST", "/v1/responses/traced", { inputs: { word: "cheese" }, log: true, stream: true });
  t.equal(run.status, 200);
  const tt = await traceOf(run.headers.get("x-request-id")!);
  t.match(tt, { endpoint: "/v1/responses/{name}", status: "success", stream: true });
  t.same(JSON.parse(tt.request.text), { inputs: { word: "cheese" }, log: true, stream: true }, "the raw call");
  t.match(tt.prompt.text, /Say cheese/, "the rendered template as the engine saw it");
  t.equal(JSON.parse(tt.response.text).status, "incomplete", "the terminal event's response");
  t.ok(tt.response.chunks > 3, "events counted");
  noCredentials(t, tt);
});

t.test("a logged background response is traced where it runs", async (t) => {
  const res = await call("POST", "/v1/responses", { model: TEST_MODEL, input: "A quiet river", max_output_tokens: 16, background: true, log: true });
  t.equal(res.status, 200);
  const tr = await traceOf(res.body.id as string);
  t.match(tr, { endpoint: "/v1/responses", status: "success", http_status: 0, project_id: "proj-local", batch: false, usage: { output_tokens: 16 } });
  t.equal(JSON.parse(tr.response.text).id, res.body.id);
  t.match(tr.prompt.text, /A quiet river/);
  t.equal(JSON.parse(tr.request.text).background, true);
  t.ok(tr.timings.ttft_ms > 0 && tr.timings.ttft_ms <= tr.timings.total_ms, `its first token, timed in the run (${tr.timings.ttft_ms} of ${tr.timings.total_ms} ms)`);
  // The key's id rides with the queued response: the run's trace names the key that created it.
  const fg = await call("POST", "/v1/chat/completions", { model: TEST_MODEL, messages: [{ role: "user", content: "Hi" }], max_tokens: 1, log: true });
  const fgTrace = await traceOf(fg.headers.get("x-request-id")!);
  t.match(tr.api_key_id, /^key_/);
  t.equal(tr.api_key_id, fgTrace.api_key_id, "the same key as a foreground request with it");
  t.equal(tr.organization_id, fgTrace.organization_id);
  const byKey = await call("GET", `/v1/traces?api_key_id=${tr.api_key_id}&limit=100`);
  t.ok((byKey.body.data as Json[]).some((x) => x.id === tr.id), "found by its key");
  noCredentials(t, tr);
});

t.test("a failed request is traced with its error", async (t) => {
  const res = await call("POST", "/v1/chat/completions", { model: TEST_MODEL, messages: [{ role: "user", content: "Hi" }], max_tokens: 5000, log: true });
  t.equal(res.status, 400);
  const tr = await traceOf(res.headers.get("x-request-id")!);
  logged.set("error", tr);
  t.match(tr, { status: "error", http_status: 400, error: { type: "invalid_request_error", message: /max_tokens|5000|1024/ }, runner_id: null, prompt: null });
  t.equal(tr.attributes["error.type"], tr.error.code ?? tr.error.type);
});

t.test("a client that disconnects mid-stream", async (t) => {
  const controller = new AbortController();
  const res = await fetch(stack.gateway.url + "/v1/chat/completions", {
    method: "POST",
    signal: controller.signal,
    headers: { authorization: `Bearer ${TEST_KEY}`, "content-type": "application/json" },
    body: JSON.stringify({ model: TEST_MODEL, messages: [{ role: "user", content: "A long story" }], max_tokens: 1000, stream: true, log: true }),
  });
  const requestId = res.headers.get("x-request-id")!;
  const reader = res.body!.getReader();
  await reader.read();
  await reader.read();
  controller.abort();
  const tr = await traceOf(requestId);
  t.match(tr, { status: "client_disconnected", stream: true });
  t.ok(tr.usage.output_tokens < 1000, `stopped early (${tr.usage.output_tokens} tokens)`);
});

t.test("bodies are capped at TRIBUTARY_TRACE_MAX_BODY_BYTES with truncated set", async (t) => {
  const long = "once upon a timé ".repeat(Math.ceil(CAP / 16)); // é: two bytes, so a cut can fall inside one
  const res = await call("POST", "/v1/chat/completions", { model: TEST_MODEL, messages: [{ role: "user", content: long }], max_tokens: 2, log: true });
  t.equal(res.status, 200);
  const tr = await traceOf(res.headers.get("x-request-id")!);
  t.equal(tr.request.truncated, true);
  t.ok(tr.request.bytes > CAP, "the original size");
  t.ok(Buffer.byteLength(tr.request.text) <= CAP && Buffer.byteLength(tr.request.text) >= CAP - 1, "cut at the cap, on a character boundary");
  t.notOk(tr.request.text.includes("\ufffd"), "no broken character");
  t.equal(tr.prompt.truncated, true, "the prompt too");
  const short = logged.get("chat")!;
  t.equal(short.request.truncated, false, "a body under the cap is whole");
});

t.test("another project's traces are invisible", async (t) => {
  const tr = logged.get("chat")!;
  const other = await call("GET", `/v1/traces/${tr.id}`, undefined, OTHER_KEY);
  t.equal(other.status, 404);
  t.equal(other.body.error.type, "invalid_request_error");
  const list = await call("GET", "/v1/traces", undefined, OTHER_KEY);
  t.same(list.body.data, [], "the other project has no traces");
  const mine = await call("POST", "/v1/chat/completions", { model: TEST_MODEL, messages: [{ role: "user", content: "Hi" }], max_tokens: 2, log: true }, OTHER_KEY);
  const own = await traceOf(mine.headers.get("x-request-id")!, OTHER_KEY);
  t.equal(own.project_id, "proj-traces-other");
  t.equal((await call("GET", `/v1/traces/${own.id}`)).status, 404, "and theirs are invisible to us");
  t.equal((await call("GET", "/v1/traces/trace_000000000000AAAAAAAAAAAAAAAA")).status, 404, "an unknown id");
  t.equal((await call("GET", "/v1/traces/not-a-trace")).status, 404, "a malformed id");
});

t.test("a stream message holding several traces: lookups and pages see each one", async (t) => {
  // The writer packs the traces of one subject flushed together into one message. Three copies
  // of a real trace, with ids of their own, are packed and stored as the writer would.
  const res = await call("POST", "/v1/chat/completions", { model: TEST_MODEL, messages: [{ role: "user", content: "Together" }], max_tokens: 1, log: true });
  const original = (await traceOf(res.headers.get("x-request-id")!)) as unknown as Trace;
  const now = Date.now();
  const copies = [0, 1, 2].map((i) => ({ ...original, id: newTraceId(now + i), request_id: `${original.request_id}-copy${i}` }));
  const packed = packTraces(copies);
  t.equal(packed.length, 1, "one message");
  const nc = await stack.nats.connect();
  t.teardown(() => nc.close());
  await jetstream(nc).publish(packed[0]!.subject, packed[0]!.payload);
  for (const copy of copies) t.equal((await call("GET", `/v1/traces/${copy.id}`)).body.request_id, copy.request_id, "found by id inside its message");
  // Pages of one walk through the message, newest first, without gaps or repeats.
  const seen: string[] = [];
  let cursor: string | undefined;
  for (let i = 0; i < 4; i++) {
    const page = (await call("GET", `/v1/traces?limit=1${cursor ? `&after=${cursor}` : ""}`)).body as Json;
    seen.push(...(page.data as Json[]).map((tr) => tr.id as string));
    cursor = page.last_id as string;
  }
  t.same(seen, [copies[2]!.id, copies[1]!.id, copies[0]!.id, original.id], "the copies in reverse order, then the original");
});

t.test("filters and pagination", async (t) => {
  const all = (await call("GET", "/v1/traces?limit=100")).body as Json;
  const data = all.data as Json[];
  t.ok(data.length >= 7);
  for (let i = 1; i < data.length; i++) t.ok(data[i - 1]!.timings.received_at + data[i - 1]!.timings.end_ms >= data[i]!.timings.received_at + data[i]!.timings.end_ms - 1000, "newest first");
  const errorsOnly = (await call("GET", "/v1/traces?status=error")).body.data as Json[];
  t.ok(errorsOnly.length >= 1 && errorsOnly.every((tr) => tr.status === "error"), "status");
  t.same((await call("GET", "/v1/traces?model=other/model")).body.data, [], "model");
  t.equal(((await call("GET", `/v1/traces?model=${encodeURIComponent(TEST_MODEL)}&limit=100`)).body.data as Json[]).length, data.length);
  const key = data[0]!.api_key_id as string;
  t.ok(((await call("GET", `/v1/traces?api_key_id=${key}&limit=100`)).body.data as Json[]).every((tr) => tr.api_key_id === key), "key");
  t.same((await call("GET", "/v1/traces?api_key_id=key_none")).body.data, []);
  const now = Math.floor(Date.now() / 1000);
  t.same((await call("GET", `/v1/traces?start_time=${now + 10}`)).body.data, [], "start_time after every trace");
  t.same((await call("GET", `/v1/traces?end_time=${now - 3600}`)).body.data, [], "end_time before every trace");
  t.equal(((await call("GET", `/v1/traces?start_time=${now - 3600}&end_time=${now + 10}&limit=100`)).body.data as Json[]).length, data.length);
  // Pages of two follow each other without gaps or repeats.
  const seen: string[] = [];
  let after: string | undefined;
  for (;;) {
    const page = (await call("GET", `/v1/traces?limit=2${after ? `&after=${after}` : ""}`)).body as Json;
    seen.push(...(page.data as Json[]).map((tr) => tr.id as string));
    t.equal(page.last_id, (page.data as Json[]).at(-1)?.id ?? null);
    if (!page.has_more) break;
    after = page.last_id as string;
  }
  t.same(seen, data.map((tr) => tr.id));
});

t.test("every query parameter is bounded", async (t) => {
  const bad = async (query: string, param: string) => {
    const res = await call("GET", `/v1/traces?${query}`);
    t.equal(res.status, 400, query);
    t.equal(res.body.error?.param, param, query);
  };
  t.equal((await call("GET", "/v1/traces?limit=100")).status, 200, "limit 100");
  t.equal((await call("GET", "/v1/traces?limit=1")).status, 200, "limit 1");
  await bad("limit=101", "limit");
  await bad("limit=0", "limit");
  await bad("limit=x", "limit");
  await bad("status=done", "status");
  await bad("after=trace_x", "after");
  await bad("after=trace_000000000000AAAAAAAAAAAAAAAA", "after");
  await bad("start_time=-1", "start_time");
  await bad("start_time=4294967296", "start_time");
  t.equal((await call("GET", "/v1/traces?start_time=4294967295")).status, 200, "the last time accepted");
  await bad("start_time=100&end_time=100", "end_time");
  await bad(`model=${"m".repeat(257)}`, "model");
  t.equal((await call("GET", `/v1/traces?model=${"m".repeat(256)}`)).status, 200, "a 256-character model");
  await bad(`api_key_id=${"k".repeat(65)}`, "api_key_id");
  await bad("api_key_id=a.b", "api_key_id");
  await bad("order=asc", "order");
});

t.test("retention: the stream expires whole traces by age and bytes", async (t) => {
  const nc = await stack.nats.connect();
  t.teardown(() => nc.close());
  const jsm = await jetstreamManager(nc);
  const info = await jsm.streams.info("TRIBUTARY_TRACES");
  t.equal(info.config.max_age, 86_400 * 1e9, "max_age from TRIBUTARY_TRACE_RETENTION_SECONDS");
  t.equal(info.config.max_bytes, 104_857_600, "max_bytes from TRIBUTARY_TRACE_MAX_STREAM_BYTES");
  t.equal(info.config.discard, "old", "the oldest go first");
  // With a one-second age, traces go away on their own (no per-trace deletes).
  await jsm.streams.update("TRIBUTARY_TRACES", { ...info.config, max_age: 1e9, duplicate_window: 1e9 }).catch((e: Error) => {
    throw new Error(`stream update: ${e.message}`);
  });
  let left = -1;
  for (let i = 0; i < 60 && left !== 0; i++) {
    await new Promise((r) => setTimeout(r, 100));
    left = ((await call("GET", "/v1/traces")).body.data as Json[]).length;
  }
  t.equal(left, 0, "expired traces are gone from the list");
  t.equal((await call("GET", `/v1/traces/${logged.get("chat")!.id}`)).status, 404, "and from lookups");
});
