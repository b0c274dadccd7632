// tier: serial (faults injected into a cluster of many processes, with recovery deadlines)
import t from "tap";
import { startClusterStack } from "../../harness/cluster.js";
import { clusterFaultEnv, MixedLoad } from "../../harness/cluster-load.js";

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
  t.comment(JSON.stringify(losses));
  t.ok(losses.backgroundAccepted >= 10, `${losses.backgroundAccepted} background responses accepted`);
  t.same(Object.keys(losses.backgroundStatuses).filter((s) => s !== "completed" && s !== "incomplete"), [], "every background response completed (none failed, none left queued)");
  t.equal(losses.backgroundLost, 0, "each background response ran to its end");
  t.equal(losses.batchLinesMissing, 0, "the batch completed every line");
  t.equal(losses.batchDuplicates, 0, "no batch line twice");
  t.ok(losses.filesAccepted > 0, `${losses.filesAccepted} files accepted`);
  t.equal(losses.filesLost, 0, "each file reads back whole", { gatewayErrors: cluster.gateways.flatMap((g) => g.logs.filter((r) => r.level === "error")).slice(-5) });
});
