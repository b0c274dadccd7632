// tier: slow (a NATS cluster of its own, two of its nodes stopped and started again; nothing timed: its waits allow a minute or two)
import { join } from "node:path";
import OpenAI from "openai";
import t from "tap";
import { startNatsCluster } from "../../harness/cluster.js";
import { identityEnv, repoRoot, startProcess, TEST_KEY, testCatalog } from "../../harness/processes.js";

// A gateway started while its JetStream cluster has no quorum (two of three nodes down) does not
// exit on its start-up requests' timeouts: it retries them, logging each, serves nothing
// meanwhile, and comes up once the nodes are back.

const nats = await startNatsCluster(3);
t.teardown(() => nats.stop());

// One subtest: the root test, which has a teardown, would end itself between checks while the
// test waits on child processes alone (tap's autoend on idle).
t.test("a gateway waits for JetStream's quorum and starts once it returns", async (t) => {
  const [reachable, ...stopped] = nats.nodes;
  await Promise.all(stopped.map((n) => n.stop(10_000)));

  const gateway = startProcess(
    process.execPath,
    [join(repoRoot, "dist", "gateway", "main.js")],
    { NATS_URL: reachable!.url, TRIBUTARY_JS_REPLICAS: "3", TRIBUTARY_CATALOG: testCatalog, TRIBUTARY_PORT: "0", TRIBUTARY_API_KEY: TEST_KEY, ...identityEnv(reachable!.url, "gateway") },
    "gateway",
  );
  t.teardown(() => gateway.kill());

  const isRetry = (r: Record<string, unknown>) => r.msg === "JetStream set-up failed; retrying";
  const retry = await gateway.waitForLog(isRetry, 60_000);
  t.comment(`first retry: ${String(retry.what)} (${String(retry.err)})`);
  // Past a few more failed attempts of one request: still starting, not gone (waitForLog fails
  // if it exits meanwhile). Its third failure, once one attempt has waited out the client's 5 s
  // timeout; when the server answers at once instead ("no suitable peers"), its sixth, some 8 s
  // of backoff later, longer than a timeout. Several set-ups retry side by side: each record
  // counts its own request's `tries`.
  const timedOut = (r: Record<string, unknown>) => isRetry(r) && /timeout/i.test(String(r.err));
  const later = await gateway.waitForLog((r) => isRetry(r) && Number(r.tries) >= (gateway.logs.some(timedOut) ? 3 : 6), 60_000);
  t.comment(`failed attempt ${String(later.tries)}: ${String(later.what)} (${String(later.err)})`);
  t.equal(gateway.child.exitCode, null, "the gateway is still running without quorum");
  t.notOk(gateway.logs.some((r) => r.msg === "gateway listening"), "and does not listen yet");
  const retries = gateway.logs.filter(isRetry).length;
  t.ok(retries >= 2, `it retried (${retries} times so far)`);

  await Promise.all(stopped.map((n) => n.restart()));
  const listening = await gateway.waitForLog((r) => r.msg === "gateway listening", 120_000);
  const client = new OpenAI({ apiKey: TEST_KEY, baseURL: `http://127.0.0.1:${String(listening.port)}/v1`, maxRetries: 0 });
  const models = await client.models.list();
  t.ok(models.data.length > 0, "it serves once quorum is back");
});
