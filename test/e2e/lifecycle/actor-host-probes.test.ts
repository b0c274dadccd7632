// tier: slow (a stack of its own)
import t from "tap";
import { freePort } from "../../harness/cluster.js";
import { startActorHost, startNats } from "../../harness/processes.js";

// The actor host's probes, on its metrics port (k8s/actors.yaml): alive whatever NATS does;
// ready once its actors have started and while NATS is connected.

const nats = await startNats();
t.teardown(() => nats.stop());
const port = await freePort();
const host = await startActorHost(nats.url, { TRIBUTARY_ACTORS_METRICS_PORT: String(port) });
t.teardown(() => host.kill());

const probe = async (path: string) => {
  const res = await fetch(`http://127.0.0.1:${port}${path}`);
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
};

t.test("started and connected: alive and ready", async (t) => {
  t.equal((await probe("/healthz")).status, 200, "alive");
  const ready = await probe("/readyz");
  t.equal(ready.status, 200, "ready");
  t.same(ready.body, { status: "ready", nats: "connected", actors_started: true, draining: false });
});

t.test("NATS gone: still alive (no restart), not ready", async (t) => {
  await nats.kill();
  let ready = await probe("/readyz");
  for (let i = 0; i < 100 && ready.status !== 503; i++) {
    await new Promise((r) => setTimeout(r, 100));
    ready = await probe("/readyz");
  }
  t.equal(ready.status, 503, "not ready");
  t.match(ready.body, { status: "not ready", nats: "disconnected" });
  t.equal((await probe("/healthz")).status, 200, "alive");
});
