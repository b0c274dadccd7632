import t from "tap";
import { sharedStack } from "../../harness/shared-stack.js";
import { BYSTANDER_MODEL, BYSTANDER_TOKENS_PER_SECOND } from "../../harness/bystander.js";

// A request that does not stream has a time to first token of its own, not its whole generation
// time: the runner sends a coalesced reply's first token alone as soon as it is made, and the
// gateway times it as it times a stream's. Its trace and its usage say so. The sim model makes
// 100 tokens a second, so 200 tokens take two seconds after the first.

const stack = await sharedStack(t);
const TOKENS = 200;
const GENERATION_MS = ((TOKENS - 1) * 1000) / BYSTANDER_TOKENS_PER_SECOND;
const { secret: orgKey } = await stack.admin.createApiKey({ projectId: "", organizationId: stack.organizationId, name: "usage" });

async function post(path: string, body: unknown) {
  const res = await fetch(stack.gateway.url + path, { method: "POST", headers: { authorization: `Bearer ${stack.key}`, "content-type": "application/json" }, body: JSON.stringify(body) });
  await res.text();
  return { status: res.status, requestId: res.headers.get("x-request-id")! };
}

async function traceOf(requestId: string): Promise<any> {
  for (let i = 0; i < 200; i++) {
    const res = await fetch(`${stack.gateway.url}/v1/traces?limit=20`, { headers: { authorization: `Bearer ${stack.key}` } });
    const found = ((await res.json()) as { data: any[] }).data.find((tr) => tr.request_id === requestId);
    if (found) return found;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`no trace of ${requestId}`);
}

const [chat, response] = await Promise.all([
  post("/v1/chat/completions", { model: BYSTANDER_MODEL, messages: [{ role: "user", content: "Go on" }], max_tokens: TOKENS, log: true }),
  post("/v1/responses", { model: BYSTANDER_MODEL, input: "Go on", max_output_tokens: TOKENS, log: true }),
]);

t.test("the trace of a non-streamed request times its first token, not its end", async (t) => {
  t.same([chat.status, response.status], [200, 200]);
  for (const { requestId } of [chat, response]) {
    const tm = (await traceOf(requestId)).timings;
    t.ok(tm.end_ms >= GENERATION_MS, `the generation took its time (${tm.end_ms} ms)`);
    t.ok(tm.ttft_ms !== null && tm.ttft_ms >= tm.runner_admitted_ms, "the first token came after admission");
    // Before, the first token was the whole reply, arriving with the end.
    t.ok(tm.end_ms - tm.ttft_ms >= GENERATION_MS / 2, `the first token came long before the end (${tm.ttft_ms} of ${tm.end_ms} ms)`);
  }
});

t.test("usage percentiles: the time to first token is far below the request's latency", async (t) => {
  let latency: any;
  for (let i = 0; i < 200 && !(latency?.request.count >= 2); i++) {
    const res = await fetch(`${stack.gateway.url}/v1/organization/usage/completions?start_time=${Math.floor(Date.now() / 1000) - 3600}&bucket_width=1d`, { headers: { authorization: `Bearer ${orgKey}` } });
    latency = ((await res.json()) as { data: any[] }).data.flatMap((b) => b.results)[0]?.latency_ms;
    if (!(latency?.request.count >= 2)) await new Promise((r) => setTimeout(r, 50));
  }
  t.equal(latency.request.count, 2);
  t.equal(latency.ttft.count, 2);
  t.ok(latency.request.p50 >= GENERATION_MS, `request latency p50 ${latency.request.p50} ms`);
  t.ok(latency.ttft.p95 <= latency.request.p50 / 2, `TTFT p95 ${latency.ttft.p95} ms`);
});
