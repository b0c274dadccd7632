// tier: serial (faults injected into a cluster of many processes, with recovery deadlines)
import t from "tap";
import { startClusterStack } from "../../harness/cluster.js";
import { checkNothingLost, clusterFaultEnv, gatewayErrors, MixedLoad } from "../../harness/cluster-load.js";

// A runner and then an actor host killed (-9) under the steady mixed load of the cluster fault
// tests (streamed chat completions, background responses, a running batch, uploads), each
// restarted afterwards, on the 3-node JetStream cluster (replicas 3: a worker may read what a
// gateway wrote a moment ago through another server). Nothing accepted may be lost or run
// twice, no stream may hang, and no background response may end `failed` or stay `queued`.

const cluster = await startClusterStack({ gateways: 2, actorHosts: 2, runners: 2, env: clusterFaultEnv });
t.teardown(() => cluster.stop());
const load = new MixedLoad(() => cluster.clients, { streamTimeoutMs: 20_000 });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

await load.seed(24, 4);
load.start();
await sleep(2_000);
const runnerKilledAt = Date.now();
await cluster.runners[0]!.kill();
await sleep(5_000);
await cluster.restart("runner", 0);
await sleep(1_000);
const hostKilledAt = Date.now();
await cluster.actors[0]!.kill();
await sleep(6_000);
await cluster.restart("actors", 0);
await sleep(2_000);
await load.stop();

t.test("every request was served; streams ended or erred, none hung", async (t) => {
  const figures = load.figures();
  t.comment(`errors of failed attempts: ${JSON.stringify(load.errors())}`);
  for (const [fault, at] of [["runner", runnerKilledAt], ["actor host", hostKilledAt]] as const)
    t.comment(`${fault} killed: ${JSON.stringify(load.figures(at))}; recovery (ms): ${JSON.stringify(load.recoveryMs(at))}`);
  t.equal(figures.failed, 0, "no request failed on both gateways until its deadline");
  t.ok(figures.streamsFinished > 0, `${figures.streamsFinished} streams finished`);
  t.equal(figures.streamsHung, 0, "no stream hung past its timeout");
});

t.test("nothing accepted was lost, nothing ran twice, no background response failed", async (t) => {
  const losses = await load.losses(cluster.clients[1]!);
  t.same(Object.keys(losses.backgroundStatuses).filter((s) => s !== "completed" && s !== "incomplete"), [], "every background response completed (none failed, none left queued)");
  checkNothingLost(t, losses, { minBackground: 10, errorRecords: () => gatewayErrors(cluster) });
});
