// tier: serial (a slot freed within 1 s of a disconnect)
import t from "tap";
import { APIError } from "openai";
import { startStack, readSse } from "../../harness/stack.js";
import { TEST_MODEL } from "../../harness/processes.js";
import { freePort } from "../../harness/cluster.js";

// One slot and a queue of one, with a long output budget so a generation lasts long enough to
// be interrupted (over a second of decoding for 1200 tokens on the tiny model).
const LONG = 1200;
// The runner's health server tells how many requests wait in its queue.
const healthPort = await freePort();
const stack = await startStack(t, {
  env: { TRIBUTARY_SLOTS: "1", TRIBUTARY_QUEUE_LIMIT: "1", TRIBUTARY_MODEL_OVERRIDES: JSON.stringify({ [TEST_MODEL]: { max_output_tokens: LONG } }) },
  runnerEnv: { TRIBUTARY_LOG_LEVEL: "debug", TRIBUTARY_RUNNER_HEALTH_PORT: String(healthPort), TRIBUTARY_RUNNER_HEALTH_HOST: "127.0.0.1" },
});
const messages = [{ role: "user" as const, content: "Tell me a long story." }];
const longBody = (extra: object = {}) => JSON.stringify({ model: TEST_MODEL, messages, max_tokens: LONG, temperature: 0.8, stream: true, ...extra });

/** Starts a long stream and resolves once its first content chunk arrived. */
async function startLongStream(signal?: AbortSignal) {
  const res = await stack.fetch("/v1/chat/completions", { method: "POST", body: longBody(), signal });
  if (res.status !== 200) throw new Error(`long stream got ${res.status}: ${await res.text()}`);
  const reader = res.body!.getReader();
  let seen = "";
  while (!seen.includes('"content":"') || !seen.includes("delta\":{\"content")) {
    const { value, done } = await reader.read();
    if (done) throw new Error("stream ended early");
    seen += new TextDecoder().decode(value);
  }
  return { res, reader };
}

t.test("a client disconnect cancels the generation and frees the slot at once", async (t) => {
  const controller = new AbortController();
  const { res } = await startLongStream(controller.signal);
  const requestId = res.headers.get("x-request-id")!;
  const abortedAt = performance.now();
  controller.abort();
  // With one slot and a queue of one, a request admitted without queueing proves the slot is free.
  const finished = await stack.runners[0]!.waitForLog((r) => r.msg === "request finished" && r.requestId === requestId, 5000);
  const freedAfter = performance.now() - abortedAt;
  t.equal(finished.error, "ERROR_CODE_CANCELLED");
  t.ok((finished.completionTokens as number) < LONG, `stopped early (${finished.completionTokens as number} of ${LONG} tokens)`);
  t.ok(freedAfter < 1000, `slot freed ${freedAfter.toFixed(0)} ms after the disconnect`);
  const next = await stack.client.chat.completions.create({ model: TEST_MODEL, messages, max_tokens: 3 });
  t.equal(next.choices.length, 1, "the next request runs");
});

t.test("past the queue bound: 503 server_overloaded with retry-after, never a silent drop", async (t) => {
  const running = await startLongStream();
  const queued = stack.client.chat.completions.create({ model: TEST_MODEL, messages, max_tokens: 5 });
  // The queued request reaches the runner first.
  const queueLength = async () => ((await (await fetch(`http://127.0.0.1:${healthPort}/readyz`)).json()) as { runners: Array<{ queueLength: number }> }).runners[0]!.queueLength;
  const deadline = Date.now() + 10_000;
  while ((await queueLength()) < 1) {
    if (Date.now() > deadline) throw new Error("the runner queued nothing within 10 s");
    await new Promise((r) => setTimeout(r, 10));
  }
  const over = await stack.fetch("/v1/chat/completions", { method: "POST", body: JSON.stringify({ model: TEST_MODEL, messages, max_tokens: 5 }) });
  t.equal(over.status, 503);
  t.equal(over.headers.get("retry-after"), "1");
  const body = (await over.json()) as { error: { code: string; type: string; message: string } };
  t.equal(body.error.code, "server_overloaded");
  t.equal(body.error.type, "server_error");
  t.match(body.error.message, /queue is full/);

  const viaSdk = await stack.client.chat.completions.create({ model: TEST_MODEL, messages, max_tokens: 5 }).catch((e: unknown) => e);
  t.ok(viaSdk instanceof APIError && viaSdk.status === 503, "the SDK sees an APIError 503 (it retries those when maxRetries > 0)");

  // The queued request is not lost: it runs when the slot frees.
  const done = await queued;
  t.equal(done.choices.length, 1);
  await running.reader.cancel();
});

t.test("the queued request waits behind the running one, in order", async (t) => {
  const first = await startLongStream();
  const startedAt = performance.now();
  const second = await stack.client.chat.completions.create({ model: TEST_MODEL, messages, max_tokens: 2 });
  const waited = performance.now() - startedAt;
  t.equal(second.choices.length, 1);
  const events = await readSse(first.res).catch(() => [] as string[]);
  t.ok(waited > 50, `the queued request waited ${waited.toFixed(0)} ms for the slot`);
  t.ok(events.length === 0 || events.at(-1) === "[DONE]", "the running stream completed normally");
});
