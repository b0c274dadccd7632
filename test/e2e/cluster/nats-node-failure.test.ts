// tier: serial (faults injected into a cluster of many processes, with recovery deadlines)
import { jetstreamManager } from "@nats-io/jetstream";
import t from "tap";
import { streams } from "../../../lib/nats/subjects.js";
import { startClusterStack } from "../../harness/cluster.js";
import { checkNothingLost, clusterFaultEnv, gatewayErrors, MixedLoad } from "../../harness/cluster-load.js";
import { connectAs } from "../../harness/processes.js";

// A NATS node and a gateway killed (-9) under a small mixed load, on a 3-node JetStream cluster
// with every bucket and stream at 3 replicas. The node killed is the leader of the background
// responses' stream; it is restarted afterwards. Clients spread over both gateways and retry on
// the other one, as behind a load balancer. Nothing accepted into JetStream may be lost:
// background responses reach a final state, the batch has each line once, every uploaded file
// reads back whole. Streams in flight continue or end with an error, none hangs past its
// timeout. The figures per fault go to the test's comments (bench/cluster-faults.ts measures
// every kind of process in turn).

const env = clusterFaultEnv;

const cluster = await startClusterStack({ gateways: 2, actorHosts: 2, runners: 2, env });
t.teardown(() => cluster.stop());
const load = new MixedLoad(() => cluster.clients, { streamTimeoutMs: 20_000 });

// Before the faults: a batch running, background responses queued.
await load.seed(24, 4);

const admin = await connectAs(cluster.nats.url);
const leader = (await (await jetstreamManager(admin)).streams.info(streams.responsesBackground)).cluster?.leader;
await admin.close();
const victim = cluster.nats.nodes.find((n) => n.name === leader) ?? cluster.nats.nodes[0]!;
t.comment(`killing NATS node ${victim.name} (leader of ${streams.responsesBackground}), then gateway 1`);

load.start();
await new Promise((r) => setTimeout(r, 2_000));
const natsKilledAt = Date.now();
await victim.kill();
await new Promise((r) => setTimeout(r, 3_000));
const gatewayKilledAt = Date.now();
await cluster.gateways[0]!.kill();
await new Promise((r) => setTimeout(r, 4_000));
await victim.restart();
await new Promise((r) => setTimeout(r, 2_000));
await load.stop();

t.test("every request was served in the end (failed attempts retried on the other gateway)", async (t) => {
  const figures = load.figures();
  t.equal(figures.failed, 0, "no request failed on both gateways until its deadline");
  t.comment(`errors of failed attempts: ${JSON.stringify(load.errors())}`);
  for (const [fault, at] of [["NATS node", natsKilledAt], ["gateway", gatewayKilledAt]] as const)
    t.comment(`${fault} killed: ${JSON.stringify(load.figures(at))}; recovery (ms): ${JSON.stringify(load.recoveryMs(at))}`);
});

t.test("streams continued or ended with an error event; none hung", async (t) => {
  const figures = load.figures();
  t.ok(figures.streamsFinished + figures.streamsEndedWithError > 0, "streams ran");
  t.equal(figures.streamsHung, 0, "no stream hung past its timeout");
});

t.test("nothing accepted was lost, nothing ran twice", async (t) => {
  const losses = await load.losses(cluster.clients[1]!);
  checkNothingLost(t, losses, { minBackground: 6, errorRecords: () => gatewayErrors(cluster) });
});
