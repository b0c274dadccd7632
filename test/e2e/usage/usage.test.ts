import t, { type Test } from "tap";
import OpenAI from "openai";
import { sharedStack } from "../../harness/shared-stack.js";
import { TEST_MODEL } from "../../harness/processes.js";
import { chatLine, createBatch, waitForBatch } from "../../harness/batches.js";

// Every request counts in per-minute rollups, folded by the actor host into minute, hour and day
// buckets; GET /v1/organization/usage/completions (organization keys) answers in OpenAI's shape,
// and its buckets equal what was sent, grouped each way.
// Usage is per organization: this file's own (two projects, a key each, and an organization key)
// on the shared stack, which flushes usage and traces within tens of milliseconds.

const stack = await sharedStack(t);
const KEY_A = stack.key;
const PROJECT_A = stack.projectId;
const { key: KEY_B, projectId: PROJECT_B } = await stack.project("usage b");
const { secret: ORG_KEY } = await stack.admin.createApiKey({ projectId: "", organizationId: stack.organizationId, name: "usage" });

type Json = Record<string, any>;
async function usage(query: string, key: string = ORG_KEY) {
  const res = await fetch(`${stack.gateway.url}/v1/organization/usage/completions?${query}`, { headers: { authorization: `Bearer ${key}` } });
  return { status: res.status, body: (await res.json()) as Json };
}

async function chat(key: string, maxTokens: number, extra: Json = {}) {
  const res = await fetch(stack.gateway.url + "/v1/chat/completions", {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: TEST_MODEL, messages: [{ role: "user", content: "Once" }], max_tokens: maxTokens, ...extra }),
  });
  return { status: res.status, body: (await res.json()) as Json };
}

// Requests inside one minute, so that the minute buckets are easy to add up.
const left = 60_000 - (Date.now() % 60_000);
if (left < 15_000) await new Promise((r) => setTimeout(r, left + 50));
const start = Math.floor(Date.now() / 1000) - 120;
const sent = { a: { requests: 0, input: 0, cached: 0, output: 0 }, b: { requests: 0, input: 0, cached: 0, output: 0 } };
for (const [key, who, n] of [[KEY_A, "a", 3], [KEY_B, "b", 2]] as const)
  for (let i = 0; i < n; i++) {
    const r = await chat(key, 4 + i);
    sent[who].requests++;
    sent[who].input += r.body.usage.prompt_tokens;
    // The runner reuses the prompt's prefix cached in a slot (the chat template's first tokens at least).
    sent[who].cached += r.body.usage.prompt_tokens_details.cached_tokens;
    sent[who].output += r.body.usage.completion_tokens;
  }
const failed = await chat(KEY_A, 5000);
if (failed.status !== 400) throw new Error("expected a 400");

const sum = (buckets: Json[], f: (r: Json) => boolean = () => true) => {
  const out = { requests: 0, input: 0, cached: 0, output: 0, errors: 0 };
  for (const b of buckets) for (const r of b.results as Json[]) if (f(r)) {
    out.requests += r.num_model_requests;
    out.input += r.input_tokens;
    out.cached += r.input_cached_tokens;
    out.output += r.output_tokens;
    out.errors += r.num_model_request_errors;
  }
  return out;
};

/** Polls until the folded totals reach what was sent (the flush and the fold take a moment). */
async function settled(query: string, requests: number): Promise<Json> {
  for (let i = 0; i < 200; i++) {
    const r = await usage(query);
    if (r.status === 200 && sum(r.body.data).requests >= requests) return r.body;
    await new Promise((res) => setTimeout(res, 50));
  }
  throw new Error(`usage never reached ${requests} requests`);
}

const total = sent.a.requests + sent.b.requests + 1;

t.test("the buckets equal what was sent, at every width", async (t) => {
  for (const width of ["1m", "1h", "1d"]) {
    // Up to now (no end_time): limit 5 holds every bucket even if a minute turns while this polls.
    const page = await settled(`start_time=${start}&bucket_width=${width}&limit=5`, total);
    t.equal(page.object, "page");
    t.equal(page.has_more, false);
    t.equal(page.next_page, null);
    const s = sum(page.data);
    t.same(s, { requests: total, input: sent.a.input + sent.b.input + 0, cached: sent.a.cached + sent.b.cached, output: sent.a.output + sent.b.output, errors: 1 }, `${width}: totals (the refused request counts as a request and an error)`);
    const b0 = page.data[0] as Json;
    t.equal(b0.object, "bucket");
    t.equal(b0.end_time - b0.start_time, { "1m": 60, "1h": 3600, "1d": 86400 }[width]);
    t.equal(b0.start_time % (b0.end_time - b0.start_time), 0, "aligned");
    for (const r of page.data.flatMap((b: Json) => b.results))
      t.match(r, { object: "organization.usage.completions.result", input_cached_tokens: Number, project_id: null, api_key_id: null, model: null, batch: null, user_id: null, service_tier: null });
  }
});

t.test("latency percentiles (Tributary's latency_ms) fold exactly across widths", async (t) => {
  const seen: Json[] = [];
  for (const width of ["1m", "1h", "1d"]) {
    const page = await settled(`start_time=${start}&bucket_width=${width}&limit=3`, total);
    const results = page.data.flatMap((b: Json) => b.results) as Json[];
    t.equal(results.length, 1, `${width}: every request fell in one bucket`);
    const l = results[0]!.latency_ms as Json;
    t.equal(l.request.count, total - 1, `${width}: every request a runner took (not the refused one)`);
    t.equal(l.ttft.count, total - 1, `${width}: each had a first token`);
    for (const s of [l.ttft, l.request]) {
      t.ok(s.p50 > 0 && s.p50 <= s.p95 && s.p95 <= s.p99, `${width}: ordered percentiles ${JSON.stringify(s)}`);
    }
    t.ok(l.ttft.p50 <= l.request.p50, "the first token comes before the end");
    seen.push(l);
  }
  t.same(seen[1], seen[0], "hour = minute");
  t.same(seen[2], seen[0], "day = minute");
  const split = await usage(`start_time=${start}&bucket_width=1d&group_by=project_id`);
  const counts = split.body.data.flatMap((b: Json) => b.results).map((r: Json) => r.latency_ms.request.count).sort();
  t.same(counts, [sent.a.requests, sent.b.requests].sort(), "grouped: each group's own requests");
});

t.test("grouped by project, key, model and batch", async (t) => {
  const byProject = await usage(`start_time=${start}&bucket_width=1h&group_by=project_id`);
  t.same(sum(byProject.body.data, (r) => r.project_id === PROJECT_A), { ...sent.a, requests: sent.a.requests + 1, errors: 1 });
  t.same(sum(byProject.body.data, (r) => r.project_id === PROJECT_B), { ...sent.b, errors: 0 });
  const byKey = await usage(`start_time=${start}&bucket_width=1h&group_by=api_key_id&group_by=project_id`);
  const keys = new Set(byKey.body.data.flatMap((b: Json) => b.results.map((r: Json) => r.api_key_id)));
  t.equal(keys.size, 2, "one key per project");
  t.ok([...keys].every((k) => /^key_/.test(k as string)));
  const byModel = await usage(`start_time=${start}&bucket_width=1d&group_by[]=model&group_by[]=batch`);
  const results = byModel.body.data.flatMap((b: Json) => b.results) as Json[];
  t.same(results.map((r) => [r.model, r.batch]), [[TEST_MODEL, false]]);
});

t.test("filters", async (t) => {
  const q = `start_time=${start}&bucket_width=1h`;
  t.same(sum((await usage(`${q}&project_ids=${PROJECT_B}`)).body.data), { ...sent.b, errors: 0 });
  t.same(sum((await usage(`${q}&project_ids=proj_unknown`)).body.data).requests, 0, "a project of no one");
  t.same(sum((await usage(`${q}&models=other/model`)).body.data).requests, 0);
  t.same(sum((await usage(`${q}&models=${encodeURIComponent(TEST_MODEL)}`)).body.data).requests, total);
  t.same(sum((await usage(`${q}&batch=true`)).body.data).requests, 0, "no batch usage yet");
  t.same(sum((await usage(`${q}&batch=false`)).body.data).requests, total);
  const byKey = await usage(`${q}&group_by=api_key_id&project_ids=${PROJECT_B}`);
  const keyB = byKey.body.data.flatMap((b: Json) => b.results)[0].api_key_id as string;
  t.same(sum((await usage(`${q}&api_key_ids=${keyB}`)).body.data), { ...sent.b, errors: 0 });
  t.same(sum((await usage(`${q}&user_ids=user_x`)).body.data).requests, 0, "requests are made with keys, not users");
});

t.test("pages of buckets", async (t) => {
  const from = Math.floor(Date.now() / 60_000) * 60 - 240;
  const first = await usage(`start_time=${from}&end_time=${from + 300}&bucket_width=1m&limit=2`);
  t.equal(first.body.data.length, 2);
  t.equal(first.body.has_more, true);
  t.equal(first.body.next_page, `page_${from + 120}`);
  const all: number[] = first.body.data.map((b: Json) => b.start_time);
  let page = first.body.next_page as string | null;
  while (page) {
    const next = await usage(`start_time=${from}&end_time=${from + 300}&bucket_width=1m&limit=2&page=${page}`);
    all.push(...next.body.data.map((b: Json) => b.start_time));
    page = next.body.next_page;
  }
  t.same(all, [0, 1, 2, 3, 4].map((i) => from + i * 60), "every minute once");
});

t.test("pages without end_time run up to now, as a client paging on next_page expects", async (t) => {
  // OpenAI's examples page with start_time alone: the range ends now, so the first page says more follow.
  const from = Math.floor(Date.now() / 60_000) * 60 - 240;
  const first = await usage(`start_time=${from}&bucket_width=1m&limit=2`);
  t.equal(first.body.data.length, 2);
  t.equal(first.body.has_more, true, "more buckets before now");
  t.equal(first.body.next_page, `page_${from + 120}`);
  const all: number[] = first.body.data.map((b: Json) => b.start_time);
  let page = first.body.next_page as string | null;
  for (let pages = 1; page && pages < 10; pages++) {
    const next = await usage(`start_time=${from}&bucket_width=1m&limit=2&page=${page}`);
    all.push(...next.body.data.map((b: Json) => b.start_time));
    page = next.body.next_page;
  }
  t.equal(page, null, "the last page says nothing more");
  const now = Math.floor(Date.now() / 1000);
  t.ok(all.length >= 5, `every minute from start_time up to the current one (${all.length})`);
  t.same(all, all.map((_, i) => from + i * 60), "consecutive minutes, each once");
  t.ok(all.at(-1)! <= now && now < all.at(-1)! + 60 + 60, "the last bucket is the current minute (or the one before, if a minute turned)");
  const future = await usage(`start_time=${now + 3600}&bucket_width=1m`);
  t.same([future.status, future.body.data, future.body.has_more, future.body.next_page], [200, [], false, null], "a range starting after now is empty");
});

t.test("batch lines count as batch usage, and a logged line is traced", async (t) => {
  const client = new OpenAI({ apiKey: KEY_A, baseURL: stack.gateway.baseURL, maxRetries: 0 });
  const batch = await createBatch(client, [chatLine("one"), chatLine("two", { log: true })]);
  const done = await waitForBatch(client, batch.id, 60_000);
  t.equal(done.status, "completed");
  const page = await settled(`start_time=${start}&bucket_width=1d&batch=true`, 2);
  t.equal(sum(page.data).requests, 2);
  t.equal(sum(page.data).output, 16, "8 tokens a line");
  let traces: Json[] = [];
  for (let i = 0; i < 100 && traces.length === 0; i++) {
    const res = await fetch(`${stack.gateway.url}/v1/traces`, { headers: { authorization: `Bearer ${KEY_A}` } });
    traces = ((await res.json()) as Json).data.filter((tr: Json) => tr.batch);
    if (traces.length === 0) await new Promise((r) => setTimeout(r, 50));
  }
  t.equal(traces.length, 1, "only the line with log: true");
  t.match(traces[0], { batch: true, status: "success", http_status: 200, project_id: PROJECT_A, api_key_id: /^key_/, usage: { output_tokens: 8 } });
  t.match(JSON.parse(traces[0]!.request.text), { log: true, max_tokens: 8 });
});

t.test("a background response counts where it runs (the actor host)", async (t) => {
  const res = await fetch(stack.gateway.url + "/v1/responses", {
    method: "POST",
    headers: { authorization: `Bearer ${KEY_B}`, "content-type": "application/json" },
    body: JSON.stringify({ model: TEST_MODEL, input: "Once", max_output_tokens: 16, background: true }),
  });
  t.equal(res.status, 200);
  const page = await settled(`start_time=${start}&bucket_width=1d&batch=false&project_ids=${PROJECT_B}`, sent.b.requests + 1);
  const s = sum(page.data);
  t.equal(s.requests, sent.b.requests + 1, "one more request in its project");
  t.equal(s.output, sent.b.output + 16, "with its output tokens");
  // Counted with the key that created it (carried with the queued response), not with an empty one.
  const byKey = await usage(`start_time=${start}&bucket_width=1d&batch=false&project_ids=${PROJECT_B}&group_by=api_key_id`);
  const results = byKey.body.data.flatMap((b: Json) => b.results) as Json[];
  t.equal(results.length, 1, "one key in the project");
  t.match(results[0], { api_key_id: /^key_/, num_model_requests: sent.b.requests + 1 });
  t.equal(results[0]!.latency_ms.request.count, sent.b.requests + 1, "its latency counted too");
  t.equal(results[0]!.latency_ms.ttft.count, sent.b.requests + 1, "and its time to first token");
});

t.test("organization keys only", async (t) => {
  const res = await usage(`start_time=${start}`, KEY_A);
  t.equal(res.status, 403);
  t.equal(res.body.error.code, "organization_key_required");
});

t.test("every parameter is bounded", async (t: Test) => {
  const bad = async (query: string, param: string | null) => {
    const res = await usage(query);
    t.equal(res.status, 400, query);
    t.equal(res.body.error?.param, param, query);
  };
  const ok = async (query: string) => t.equal((await usage(query)).status, 200, query);
  await bad("bucket_width=1d", "start_time");
  await bad("start_time=x", "start_time");
  await bad("start_time=4294967296", "start_time");
  await ok("start_time=4294967295&bucket_width=1m&limit=1");
  await bad(`start_time=${start}&end_time=${start}`, "end_time");
  await bad(`start_time=${start}&bucket_width=2h`, "bucket_width");
  for (const [width, max] of [["1d", 31], ["1h", 168], ["1m", 1440]] as const) {
    await ok(`start_time=${start}&bucket_width=${width}&limit=${max}`);
    await bad(`start_time=${start}&bucket_width=${width}&limit=${max + 1}`, "limit");
  }
  await bad(`start_time=${start}&limit=0`, "limit");
  await bad(`start_time=${start}&batch=yes`, "batch");
  await bad(`start_time=${start}&group_by=organization`, "group_by");
  await ok(`start_time=${start}&${Array.from({ length: 100 }, (_, i) => `project_ids=p${i}`).join("&")}`);
  await bad(`start_time=${start}&${Array.from({ length: 101 }, (_, i) => `project_ids=p${i}`).join("&")}`, "project_ids");
  await bad(`start_time=${start}&project_ids=a.b`, "project_ids");
  await bad(`start_time=${start}&api_key_ids=${"k".repeat(65)}`, "api_key_ids");
  await bad(`start_time=${start}&models=${"m".repeat(257)}`, "models");
  await bad(`start_time=${start}&user_ids=a*`, "user_ids");
  await bad(`start_time=${start}&page=next`, "page");
  await bad(`start_time=${start}&page=page_${start - 60}`, "page");
  await bad(`start_time=${start}&colour=red`, "colour");
});
