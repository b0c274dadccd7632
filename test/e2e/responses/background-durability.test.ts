// tier: serial (asserts that the next job runs within 6 s of a cancel, with runs of 40 tokens/s)
import t from "tap";
import OpenAI from "openai";
import { startStack } from "../../harness/stack.js";
import { startActorHost, startGateway, TEST_KEY, TEST_MODEL } from "../../harness/processes.js";

// What background runs survive, and how cancel stops them. This is about the platform (the
// durable queue, the worker, cancel signals), not the model, so runs must last long enough to
// act on while they run: the sim engine produces 40 tokens a second. One run at a time per
// actor host makes a second job wait in the queue; a short ack wait lets a crashed worker's job
// move on quickly.
const TOKENS_PER_SECOND = 40;
const env = {
  TRIBUTARY_ENGINE: "sim",
  TRIBUTARY_MODEL_OVERRIDES: JSON.stringify({ [TEST_MODEL]: { sim: { tokens_per_second: TOKENS_PER_SECOND, first_token_latency_ms: 0 } } }),
};
const actorsEnv = { TRIBUTARY_BACKGROUND_CONCURRENCY: "1", TRIBUTARY_BACKGROUND_ACK_WAIT_MS: "2000" };
const stack = await startStack(t, { env, actorsEnv });
const root = t;
let client = stack.client;
type R = OpenAI.Responses.Response;

async function waitFor(id: string, pred: (r: R) => boolean, timeoutMs = 30_000): Promise<R> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const r = await client.responses.retrieve(id);
    if (pred(r)) return r;
    if (Date.now() > deadline) throw new Error(`${id}: condition not met, status ${r.status}`);
    await new Promise((res) => setTimeout(res, 50));
  }
}
const done = (r: R) => !["queued", "in_progress"].includes(r.status!);
const background = (maxTokens: number) => client.responses.create({ model: TEST_MODEL, input: "go", background: true, max_output_tokens: maxTokens });

t.test("cancel stops a running response at once and frees its worker", async (t) => {
  const long = await background(400); // 10 s of tokens
  await waitFor(long.id, (r) => r.status === "in_progress");
  await new Promise((res) => setTimeout(res, 500)); // some 20 tokens out before the cancel
  const cancelled = await client.responses.cancel(long.id);
  t.equal(cancelled.status, "cancelled");
  const started = Date.now();
  const next = await background(20);
  const finished = await waitFor(next.id, done);
  t.ok(Date.now() - started < 6_000, `the next job ran right away (${Date.now() - started} ms), not after the cancelled one's 10 s`);
  t.equal(finished.usage!.output_tokens, 20);
  const after = await client.responses.retrieve(long.id);
  t.equal(after.status, "cancelled", "the worker did not overwrite the cancel");
  // Output received before the cancel is kept (none when the runner sends a choice whole).
  const words = after.output_text.split(" ").filter(Boolean).length;
  t.ok(words < 400, `generation stopped early (${words} tokens kept)`);
  t.equal((await client.responses.cancel(long.id)).status, "cancelled", "cancelling again is idempotent");
});

t.test("a queued response cancelled before a worker took it never runs", async (t) => {
  const first = await background(200); // holds the only run slot for 5 s
  await waitFor(first.id, (r) => r.status === "in_progress");
  const second = await background(20);
  t.equal((await client.responses.retrieve(second.id)).status, "queued");
  t.equal((await client.responses.cancel(second.id)).status, "cancelled");
  await client.responses.cancel(first.id);
  // One run at a time, in queue order: once a later job has run, the worker is past the cancelled one.
  const third = await background(20);
  t.equal((await waitFor(third.id, done)).status, "incomplete", "the job queued after it ran");
  const after = await client.responses.retrieve(second.id);
  t.equal(after.status, "cancelled");
  t.same(after.output, [], "nothing ran");
});

t.test("a background response survives a gateway restart", async (t) => {
  const r = await background(80); // 2 s
  await stack.gateway.kill();
  const gateway = await startGateway(stack.nats.url, env);
  root.teardown(() => gateway.kill());
  client = new OpenAI({ apiKey: TEST_KEY, baseURL: gateway.baseURL, maxRetries: 0 });
  const final = await waitFor(r.id, done);
  t.equal(final.status, "incomplete");
  t.equal(final.usage!.output_tokens, 80);
});

t.test("a run whose actor host dies is taken over by another one", async (t) => {
  const r = await background(120); // 3 s
  await waitFor(r.id, (x) => x.status === "in_progress");
  await stack.actors.kill();
  const host = await startActorHost(stack.nats.url, { ...env, ...actorsEnv });
  root.teardown(() => host.kill());
  const final = await waitFor(r.id, done, 60_000);
  t.equal(final.status, "incomplete", "run again from the start by the new host");
  t.equal(final.usage!.output_tokens, 120);
});

t.test("a cancelled background stream ends with an error event", async (t) => {
  const res = await fetch(`${(client as unknown as { baseURL: string }).baseURL}/responses`, {
    method: "POST",
    headers: { authorization: `Bearer ${TEST_KEY}`, "content-type": "application/json" },
    body: JSON.stringify({ model: TEST_MODEL, input: "go", background: true, stream: true, max_output_tokens: 400 }),
  });
  t.equal(res.status, 200);
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let text = "";
  let cancelled = false;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    text += decoder.decode(value, { stream: true });
    if (!cancelled && text.includes("response.output_text.delta")) {
      const id = /"id":"(resp_[^"]+)"/.exec(text)![1]!;
      cancelled = true;
      t.equal((await client.responses.cancel(id)).status, "cancelled");
    }
  }
  const events = text.split("\n\n").filter((b) => b.startsWith("event:")).map((b) => JSON.parse(b.split("\n")[1]!.slice(6)) as { type: string; code?: string; sequence_number: number });
  t.match(events.at(-1), { type: "error", code: "response_cancelled" });
  t.same(events.map((e) => e.sequence_number), events.map((_, i) => i));
  t.ok(events.filter((e) => e.type === "response.output_text.delta").length < 400 / 2, "generation stopped early");
});
