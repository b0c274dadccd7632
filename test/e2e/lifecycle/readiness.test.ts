// tier: slow (a stack of its own)
import t from "tap";
import { startGateway, startNats, startRunner, TEST_KEY, TEST_MODEL } from "../../harness/processes.js";
import { until } from "../../harness/until.js";

// Probes that mean what they say: a gateway is ready only when connected to NATS and knowing a
// ready runner; its liveness never depends on NATS. GET /v1/models says per model whether it can
// serve. (The sim engine: only readiness is under test.)

const env = { TRIBUTARY_ENGINE: "sim", TRIBUTARY_RATE_LIMITS: "off" };
const nats = await startNats();
t.teardown(() => nats.stop());
const gateway = await startGateway(nats.url, env);
t.teardown(() => gateway.kill());

const probe = async (path: string) => {
  const res = await fetch(gateway.url + path, { headers: { authorization: `Bearer ${TEST_KEY}` } });
  return { status: res.status, body: (await res.json()) as Record<string, any> };
};

t.test("without a runner: alive, not ready, the model not ready", async (t) => {
  t.equal((await probe("/healthz")).status, 200, "alive");
  const ready = await probe("/readyz");
  t.equal(ready.status, 503, "not ready");
  t.match(ready.body, { nats: "connected", ready_runners: 0 });
  const model = await probe(`/v1/models/${TEST_MODEL}`);
  t.match(model.body, { id: TEST_MODEL, object: "model", status: { ready: false, runners_ready: 0 } });
});

t.test("with a runner whose model is loaded: ready, and the model too", async (t) => {
  const runner = await startRunner(nats.url, env);
  t.teardown(() => runner.kill());
  await until(async () => (await probe("/readyz")).status === 200, "the gateway to hear the runner", 10_000);
  t.match((await probe("/readyz")).body, { status: "ready", nats: "connected", ready_runners: 1 });
  const list = await probe("/v1/models");
  t.match(list.body.data[0], { id: TEST_MODEL, status: { ready: true, runners_ready: 1, runners_loading: 0 } });

  // NATS gone: not ready, still alive (a NATS outage must not restart every gateway).
  await nats.kill();
  await until(async () => (await probe("/readyz")).status === 503, "the gateway to notice the outage", 10_000);
  t.match((await probe("/readyz")).body, { nats: "disconnected" });
  t.equal((await probe("/healthz")).status, 200, "still alive");
});
