// tier: serial (budgets checked per time window)
import t from "tap";
import { startActorHost, startGateway, startNats, startRunner, TEST_KEY, TEST_MODEL } from "../../harness/processes.js";

// Budgets need an owner. With no actor host to own them, requests are refused (503 with
// retry-after) after TRIBUTARY_RATE_LIMIT_WAIT_MS rather than admitted without limits; as soon as
// an actor host runs, the first request activates the budget on it.

const nats = await startNats();
t.teardown(() => nats.stop());
const runner = await startRunner(nats.url);
t.teardown(() => runner.kill());
const gateway = await startGateway(nats.url, { TRIBUTARY_RATE_LIMIT_WAIT_MS: "500" });
t.teardown(() => gateway.kill());

const chat = () =>
  fetch(gateway.url + "/v1/chat/completions", {
    method: "POST",
    headers: { authorization: `Bearer ${TEST_KEY}`, "content-type": "application/json" },
    body: JSON.stringify({ model: TEST_MODEL, messages: [{ role: "user", content: "Hi" }], max_tokens: 1 }),
  });

t.test("no actor host: a 503 once the wait is over, nothing admitted", async (t) => {
  const started = Date.now();
  const res = await chat();
  t.equal(res.status, 503);
  t.ok(Date.now() - started >= 450, "after waiting for an owner");
  t.equal(res.headers.get("retry-after"), "1");
  const err = ((await res.json()) as { error: { code: string; message: string } }).error;
  t.equal(err.code, "service_unavailable");
  t.match(err.message, /Rate limits cannot be checked right now/);
});

t.test("an actor host appears: the next request activates the budget there", async (t) => {
  const host = await startActorHost(nats.url);
  t.teardown(() => host.kill());
  const res = await chat();
  t.equal(res.status, 200);
  t.equal(res.headers.get("x-ratelimit-remaining-requests"), "249");
});
