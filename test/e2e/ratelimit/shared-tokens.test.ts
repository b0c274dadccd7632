// tier: serial (budgets checked per time window)
import t from "tap";
import { startActorHost, startGateway, startNats, startRunner, TEST_KEY, TEST_MODEL } from "../../harness/processes.js";
import { runLoad, tallyWindows } from "../../harness/load.js";

// Tokens of one budget shared by three gateways. Each request is charged its estimate at
// admission (prompt estimate + max_tokens) and settled from its real usage when it ends, so far
// more requests fit in a window than their estimates alone would allow, while the real usage of
// what a window admitted stays within the limit.

const WINDOW_MS = 2000;
const TPM = 3000;
const env = {
  TRIBUTARY_MODEL_OVERRIDES: JSON.stringify({
    [TEST_MODEL]: {
      engine: "sim",
      sim: { tokens_per_second: 1000, first_token_latency_ms: 0 },
      slots: 64,
      queue_limit: 1000,
      rate_limits: { requests_per_minute: 100_000, tokens_per_minute: TPM },
    },
  }),
};

const nats = await startNats();
t.teardown(() => nats.stop());
const host = await startActorHost(nats.url, { ...env, TRIBUTARY_RATE_LIMIT_WINDOW_MS: String(WINDOW_MS) });
t.teardown(() => host.kill());
const runner = await startRunner(nats.url, env);
t.teardown(() => runner.kill());
const gateways = await Promise.all([0, 1, 2].map(() => startGateway(nats.url, env)));
for (const g of gateways) t.teardown(() => g.kill());

t.test("estimates are charged at admission and settled from usage, across gateways", async (t) => {
  // 400 characters: about 104 tokens estimated (100 to the sim); max_tokens 300; the sim stops
  // at "river" after one token. Charged ~404, used ~101.
  const body = { model: TEST_MODEL, messages: [{ role: "user", content: "a".repeat(400) }], max_tokens: 300, stop: ["river"] };
  await new Promise((r) => setTimeout(r, WINDOW_MS - (Date.now() % WINDOW_MS)));
  const started = Date.now();
  const stopAt = started + 4 * WINDOW_MS + 100;
  const outcomes = await runLoad({
    urls: gateways.map((g) => g.url),
    clientsPerGateway: 3,
    apiKey: TEST_KEY,
    body,
    windowMs: WINDOW_MS,
    pauseAfterRefusalMs: 20,
    until: () => Date.now() >= stopAt,
  });
  t.same(outcomes.filter((o) => o.status !== 200 && o.status !== 429), [], "only 200s and 429s");
  const used = outcomes.find((o) => o.status === 200)!.tokens!;
  t.ok(used > 90 && used < 110, `a request really uses ${used} tokens`);
  const tallies = tallyWindows(outcomes, WINDOW_MS, started, stopAt);
  t.comment(`admitted per window: ${tallies.map((w) => `${w.admitted} (${w.tokens} tokens)`).join(", ")}`);
  const byEstimate = Math.floor(TPM / 404);
  for (const w of tallies) {
    t.ok(w.tokens <= TPM, `window ${w.window}: ${w.tokens} tokens used <= ${TPM}`);
    t.ok(w.admitted >= 2 * byEstimate, `window ${w.window}: ${w.admitted} admitted, over twice the ${byEstimate} that unsettled estimates would allow`);
    t.ok(w.tokens >= TPM * 0.6, `window ${w.window}: ${w.tokens} tokens used >= 60% of ${TPM}`);
  }
});
