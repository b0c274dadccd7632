// tier: serial (faults injected into a cluster of many processes, with recovery deadlines)
import { jetstreamManager } from "@nats-io/jetstream";
import t from "tap";
import { streams } from "../../../lib/nats/subjects.js";
import { startClusterStack } from "../../harness/cluster.js";
import { checkNothingLost, clusterFaultEnv, gatewayErrors, MixedLoad } from "../../harness/cluster-load.js";
import { connectAs } from "../../harness/processes.js";

// Processes killed (-9) under the steady mixed load of the cluster fault tests (streamed chat
// completions, background responses, a running batch, uploads) on the 3-node JetStream cluster
// (replicas 3: a worker may read what a gateway wrote a moment ago through another server).
// Clients spread over both gateways and retry a refused attempt on the other one, as behind a
// load balancer. Two rounds on one cluster (starting it is a third of the time), each with a load
// and checks of its own:
//  1. a runner and then an actor host, each restarted afterwards: every request is served,
//     nothing accepted is lost or runs twice, no stream hangs, and no background response ends
//     `failed` or stays `queued`;
//  2. the NATS node that leads the background responses' stream, then a gateway (not restarted:
//     this round is the last), then the node is restarted: nothing accepted into JetStream is lost
//     (background responses reach a final state, the batch has each line once, every uploaded file
//     reads back whole); streams in flight continue or end with an error, none hangs.
// The figures per fault go to the test's comments (bench/cluster-faults.ts measures every kind of
// process in turn).

const cluster = await startClusterStack({ gateways: 2, actorHosts: 2, runners: 2, env: clusterFaultEnv });
t.teardown(() => cluster.stop());
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

// Each round is one subtest, its checks run after its load (the root test, which has a
// teardown, would end itself while the test waits on child processes alone: tap's autoend on idle).
await t.test("a runner, then an actor host killed and restarted", async (t) => {
  const load = new MixedLoad(() => cluster.clients, { streamTimeoutMs: 20_000 });
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

  await t.test("every request was served; streams ended or erred, none hung", async (t) => {
    const figures = load.figures();
    t.comment(`errors of failed attempts: ${JSON.stringify(load.errors())}`);
    for (const [fault, at] of [["runner", runnerKilledAt], ["actor host", hostKilledAt]] as const)
      t.comment(`${fault} killed: ${JSON.stringify(load.figures(at))}; recovery (ms): ${JSON.stringify(load.recoveryMs(at))}`);
    t.equal(figures.failed, 0, "no request failed on both gateways until its deadline");
    t.ok(figures.streamsFinished > 0, `${figures.streamsFinished} streams finished`);
    t.equal(figures.streamsHung, 0, "no stream hung past its timeout");
  });

  await t.test("nothing accepted was lost, nothing ran twice, no background response failed", async (t) => {
    const losses = await load.losses(cluster.clients[1]!);
    t.same(Object.keys(losses.backgroundStatuses).filter((s) => s !== "completed" && s !== "incomplete"), [], "every background response completed (none failed, none left queued)");
    checkNothingLost(t, losses, { minBackground: 10, errorRecords: () => gatewayErrors(cluster) });
  });
});

await t.test("the NATS node leading the background stream, then a gateway killed; the node restarted", async (t) => {
  // A load of its own: before the faults, a batch running, background responses queued.
  const load = new MixedLoad(() => cluster.clients, { streamTimeoutMs: 20_000 });
  await load.seed(24, 4);

  const admin = await connectAs(cluster.nats.url);
  const leader = (await (await jetstreamManager(admin)).streams.info(streams.responsesBackground)).cluster?.leader;
  await admin.close();
  const victim = cluster.nats.nodes.find((n) => n.name === leader) ?? cluster.nats.nodes[0]!;
  t.comment(`killing NATS node ${victim.name} (leader of ${streams.responsesBackground}), then gateway 1`);

  load.start();
  await sleep(2_000);
  const natsKilledAt = Date.now();
  await victim.kill();
  await sleep(3_000);
  const gatewayKilledAt = Date.now();
  await cluster.gateways[0]!.kill();
  await sleep(4_000);
  await victim.restart();
  await sleep(2_000);
  await load.stop();

  await t.test("every request was served in the end (failed attempts retried on the other gateway)", async (t) => {
    const figures = load.figures();
    t.equal(figures.failed, 0, "no request failed on both gateways until its deadline");
    t.comment(`errors of failed attempts: ${JSON.stringify(load.errors())}`);
    for (const [fault, at] of [["NATS node", natsKilledAt], ["gateway", gatewayKilledAt]] as const)
      t.comment(`${fault} killed: ${JSON.stringify(load.figures(at))}; recovery (ms): ${JSON.stringify(load.recoveryMs(at))}`);
  });

  await t.test("streams continued or ended with an error event; none hung", async (t) => {
    const figures = load.figures();
    t.ok(figures.streamsFinished + figures.streamsEndedWithError > 0, "streams ran");
    t.equal(figures.streamsHung, 0, "no stream hung past its timeout");
  });

  await t.test("nothing accepted was lost, nothing ran twice", async (t) => {
    const losses = await load.losses(cluster.clients[1]!);
    checkNothingLost(t, losses, { minBackground: 6, errorRecords: () => gatewayErrors(cluster) });
  });
});
