// tier: serial (budgets checked per time window)
import t from "tap";
import OpenAI, { RateLimitError } from "openai";
import { startStack } from "../../harness/stack.js";
import { TEST_KEY, TEST_MODEL } from "../../harness/processes.js";
import { parseGoDuration } from "../../../modules/ratelimit/mod.js";

// One gateway, small limits and a short window: the headers on success, the 429 for each limit,
// settlement from usage, refunds of requests that generate nothing, and the openai client's retry.
// The sim engine stands in for the model: rate limiting happens around the engine, and the sim
// makes output lengths exact (it writes "the river runs ..." and stops at a stop sequence).

const WINDOW_MS = 3000;
const RPM = 4;
const TPM = 3000;
const stack = await startStack(t, {
  env: {
    TRIBUTARY_MODEL_OVERRIDES: JSON.stringify({
      [TEST_MODEL]: { engine: "sim", sim: { tokens_per_second: 200, first_token_latency_ms: 0 }, rate_limits: { requests_per_minute: RPM, tokens_per_minute: TPM } },
    }),
  },
  actorsEnv: { TRIBUTARY_RATE_LIMIT_WINDOW_MS: String(WINDOW_MS) },
});

const GO_DURATION = /^(\d+h)?(\d+m)?(\d+(\.\d+)?s|\d+ms)$/;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** Waits for the next window (windows are aligned to multiples of their length since the epoch). */
async function freshWindow(): Promise<void> {
  await sleep(WINDOW_MS - (Date.now() % WINDOW_MS) + 30);
}
const windowLeft = (at: number) => WINDOW_MS - (at % WINDOW_MS);

const chat = (body: Record<string, unknown>, init: RequestInit = {}) =>
  stack.fetch("/v1/chat/completions", { method: "POST", body: JSON.stringify({ model: TEST_MODEL, messages: [{ role: "user", content: "Hi" }], max_tokens: 1, ...body }), ...init });

function headerNumbers(res: Response) {
  const h = (n: string) => res.headers.get(n);
  return {
    limitRequests: Number(h("x-ratelimit-limit-requests")),
    remainingRequests: Number(h("x-ratelimit-remaining-requests")),
    resetRequests: h("x-ratelimit-reset-requests")!,
    limitTokens: Number(h("x-ratelimit-limit-tokens")),
    remainingTokens: Number(h("x-ratelimit-remaining-tokens")),
    resetTokens: h("x-ratelimit-reset-tokens")!,
  };
}

t.test("successful replies carry the rate-limit headers, with honest reset times", async (t) => {
  await freshWindow();
  for (let i = 1; i <= RPM; i++) {
    // The gateway reads its clock between these two: the reset it sends lies between what is left
    // of the window at each (a time taken only after the reply would count the request's own time).
    const sentAt = Date.now();
    const res = await chat({});
    const at = Date.now();
    t.equal(res.status, 200);
    await res.json();
    const h = headerNumbers(res);
    t.equal(h.limitRequests, RPM);
    t.equal(h.limitTokens, TPM);
    t.equal(h.remainingRequests, RPM - i, `remaining requests after ${i}`);
    t.ok(h.remainingTokens < TPM && h.remainingTokens > TPM - 100 * i, `remaining tokens ${h.remainingTokens}`);
    t.match(h.resetRequests, GO_DURATION);
    t.match(h.resetTokens, GO_DURATION);
    // The reset is when this window ends (the budget is whole again): at most a little early.
    const reset = parseGoDuration(h.resetRequests);
    t.ok(reset <= windowLeft(sentAt) + 50 && reset >= windowLeft(at) - 300, `reset ${h.resetRequests} vs ${windowLeft(sentAt)}-${windowLeft(at)} ms left in the window`);
  }
});

t.test("over the request limit: 429 rate_limit_exceeded naming the limit, with retry-after", async (t) => {
  await freshWindow();
  for (let i = 0; i < RPM; i++) t.equal((await chat({})).status, 200);
  const res = await chat({});
  const at = Date.now();
  t.equal(res.status, 429);
  const body = (await res.json()) as { error: { message: string; type: string; code: string; param: null } };
  t.equal(body.error.type, "requests");
  t.equal(body.error.code, "rate_limit_exceeded");
  t.equal(body.error.param, null);
  t.match(body.error.message, new RegExp(`Rate limit reached for ${TEST_MODEL} in organization org-local on requests per 3s window: Limit ${RPM}, Used ${RPM}, Requested 1\\. Please try again in `));
  const h = headerNumbers(res);
  t.equal(h.remainingRequests, 0);
  t.equal(h.limitRequests, RPM);
  t.match(h.resetRequests, GO_DURATION);
  const retryAfter = res.headers.get("retry-after")!;
  t.match(retryAfter, /^[1-9]\d*$/, "retry-after: integer seconds >= 1");
  const retryAfterMs = Number(res.headers.get("retry-after-ms"));
  t.ok(retryAfterMs > 0 && retryAfterMs <= windowLeft(at) + 50, `retry-after-ms ${retryAfterMs} is when the window ends`);
  t.equal(Number(retryAfter), Math.max(1, Math.ceil(retryAfterMs / 1000)));

  const stream = await chat({ stream: true });
  t.equal(stream.status, 429, "a stream is refused before it starts");
  t.match(stream.headers.get("content-type"), /application\/json/);
  t.equal(((await stream.json()) as { error: { code: string } }).error.code, "rate_limit_exceeded");
});

t.test("the openai client waits for retry-after and succeeds in the next window", async (t) => {
  await freshWindow();
  for (let i = 0; i < RPM; i++) t.equal((await chat({})).status, 200);
  const statuses: number[] = [];
  let retryAfterMs = 0;
  const client = new OpenAI({
    apiKey: TEST_KEY,
    baseURL: stack.gateway.baseURL,
    maxRetries: 2,
    fetch: async (input, init) => {
      const res = await fetch(input, init);
      statuses.push(res.status);
      if (res.status === 429) retryAfterMs = Number(res.headers.get("retry-after-ms"));
      return res;
    },
  });
  const started = Date.now();
  const completion = await client.chat.completions.create({ model: TEST_MODEL, messages: [{ role: "user", content: "Hi" }], max_tokens: 1 });
  const waited = Date.now() - started;
  t.equal(completion.object, "chat.completion");
  t.same(statuses, [429, 200], "refused once, then admitted");
  t.ok(waited >= retryAfterMs - 20, `waited ${waited} ms for retry-after-ms ${retryAfterMs}`);

  const strict = new OpenAI({ apiKey: TEST_KEY, baseURL: stack.gateway.baseURL, maxRetries: 0 });
  for (let i = 1; i < RPM; i++) await strict.chat.completions.create({ model: TEST_MODEL, messages: [{ role: "user", content: "Hi" }], max_tokens: 1 });
  const err = await strict.chat.completions.create({ model: TEST_MODEL, messages: [{ role: "user", content: "Hi" }], max_tokens: 1 }).catch((e: unknown) => e);
  t.ok(err instanceof RateLimitError, "without retries the client raises RateLimitError");
  t.equal((err as RateLimitError).code, "rate_limit_exceeded");
});

t.test("over the token limit: 429 of type tokens, while the request limit is not reached", async (t) => {
  await freshWindow();
  // Three streams that may each write 1000 tokens: the charge is taken at admission, so the third
  // does not fit in 3000 tokens while the other two run.
  const controller = new AbortController();
  const results = await Promise.all(Array.from({ length: 3 }, () => chat({ max_tokens: 1000, stream: true }, { signal: controller.signal })));
  const statuses = results.map((r) => r.status).sort();
  t.same(statuses, [200, 200, 429]);
  const refused = results.find((r) => r.status === 429)!;
  const body = (await refused.json()) as { error: { type: string; code: string; message: string } };
  t.equal(body.error.type, "tokens");
  t.equal(body.error.code, "rate_limit_exceeded");
  t.match(body.error.message, new RegExp(`on tokens per 3s window: Limit ${TPM}, Used \\d+, Requested 10\\d\\d\\.`));
  t.ok(Number(refused.headers.get("retry-after")) >= 1);
  t.ok(Number(refused.headers.get("x-ratelimit-remaining-tokens")) < 1010);
  controller.abort();
});

t.test("a request larger than the token limit is refused for good (x-should-retry: false)", async (t) => {
  let attempts = 0;
  const client = new OpenAI({
    apiKey: TEST_KEY,
    baseURL: stack.gateway.baseURL,
    maxRetries: 2,
    fetch: (input, init) => {
      attempts++;
      return fetch(input, init);
    },
  });
  const err = await client.chat.completions
    .create({ model: TEST_MODEL, messages: [{ role: "user", content: "word ".repeat(2400) }], max_tokens: 10 })
    .catch((e: unknown) => e);
  t.ok(err instanceof RateLimitError);
  t.match((err as RateLimitError).message, /Request too large for test\/stories-260k .* Limit 3000, Requested 30\d\d/);
  t.equal((err as RateLimitError).headers?.get("x-should-retry"), "false");
  t.equal(attempts, 1, "not retried");
});

t.test("tokens are settled from usage: what a request did not use goes back to the budget", async (t) => {
  await freshWindow();
  // The sim writes "the river ...": a stop at "river" ends it after one token, far below max_tokens.
  const first = await chat({ max_tokens: 500, stop: ["river"] });
  const usage = ((await first.json()) as { usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number } }).usage;
  t.ok(usage.completion_tokens <= 2, `completion tokens ${usage.completion_tokens}`);
  const afterFirst = headerNumbers(first).remainingTokens;
  t.ok(afterFirst <= TPM - 500, `the first request was charged its estimate (${TPM - afterFirst} tokens)`);
  const second = await chat({ max_tokens: 500, stop: ["river"] });
  await second.json();
  const afterSecond = headerNumbers(second).remainingTokens;
  const estimate = TPM - afterFirst;
  // Without settlement: TPM - 2 x estimate. With it: TPM - real usage of the first - estimate.
  t.equal(afterSecond, TPM - usage.total_tokens - estimate, "the first request's unused estimate came back");
});

t.test("a request that generates nothing gives its estimate back; the context limit is named", async (t) => {
  await freshWindow();
  // 8400 characters are 2100 tokens to the sim: over the model's 2048-token context.
  const tooLong = await chat({ messages: [{ role: "user", content: "x".repeat(8400) }], max_tokens: 100 });
  t.equal(tooLong.status, 400);
  const err = ((await tooLong.json()) as { error: { code: string; message: string; param: string } }).error;
  t.equal(err.code, "context_length_exceeded");
  t.match(err.message, /maximum context length is 2048 tokens/);
  const after = await chat({});
  await after.json();
  const h = headerNumbers(after);
  t.equal(h.remainingRequests, RPM - 2, "both requests counted");
  t.ok(h.remainingTokens > TPM - 50, `the refused request's ~2200-token charge was refunded (remaining ${h.remainingTokens})`);
});
