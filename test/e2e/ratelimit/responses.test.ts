// tier: serial (budgets checked per time window)
import t from "tap";
import { startStack } from "../../harness/stack.js";
import { TEST_MODEL } from "../../harness/processes.js";

// /v1/responses draws from the same per-model budget as chat completions: headers on success,
// a 429 past the request limit (foreground and background alike), nothing stored for a 429.
const WINDOW_MS = 3000;
const RPM = 3;
const stack = await startStack(t, {
  env: {
    TRIBUTARY_MODEL_OVERRIDES: JSON.stringify({
      [TEST_MODEL]: { engine: "sim", sim: { tokens_per_second: 500, first_token_latency_ms: 0 }, rate_limits: { requests_per_minute: RPM, tokens_per_minute: 100_000 } },
    }),
  },
  actorsEnv: { TRIBUTARY_RATE_LIMIT_WINDOW_MS: String(WINDOW_MS) },
});
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const create = (body: Record<string, unknown> = {}) =>
  stack.fetch("/v1/responses", { method: "POST", body: JSON.stringify({ model: TEST_MODEL, input: "Hi", max_output_tokens: 16, ...body }) });

t.test("responses are rate limited like chat completions", async (t) => {
  await sleep(WINDOW_MS - (Date.now() % WINDOW_MS) + 30);
  for (let i = 1; i <= RPM - 1; i++) {
    const res = await create();
    t.equal(res.status, 200);
    t.equal(res.headers.get("x-ratelimit-limit-requests"), String(RPM));
    t.equal(res.headers.get("x-ratelimit-remaining-requests"), String(RPM - i));
  }
  const queued = await create({ background: true });
  t.equal(queued.status, 200, "a background response takes its request from the budget when queued");
  const refused = await create();
  t.equal(refused.status, 429);
  t.equal(((await refused.json()) as { error: { code: string } }).error.code, "rate_limit_exceeded");
  t.equal((await create({ background: true })).status, 429);
});
