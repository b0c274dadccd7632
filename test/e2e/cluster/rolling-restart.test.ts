// tier: serial (faults injected into a cluster of many processes, with recovery deadlines)
import t from "tap";
import { spawnSync } from "node:child_process";
import { startClusterStack } from "../../harness/cluster.js";
import { checkNothingLost, clusterFaultEnv, gatewayErrors, MixedLoad } from "../../harness/cluster-load.js";

// A rolling restart of every process, one at a time, each stopped with its drain (SIGTERM; a
// NATS node in lame-duck mode) and started again, under the steady mixed load of the cluster
// fault tests (streamed chat completions, background responses, a running batch, uploads) on the
// 3-node JetStream cluster. Clients spread over both gateways and retry a refused attempt on the
// other one, as behind a load balancer. No request may fail in the end, no stream may end with an
// error or hang, and nothing accepted may be lost or run twice.

const cluster = await startClusterStack({ gateways: 2, actorHosts: 2, runners: 2, env: clusterFaultEnv });
t.teardown(() => cluster.stop());
// Creates and uploads paced at a few a second: the restarts take a minute and a half, and each
// item accepted is read back at the end.
const load = new MixedLoad(() => cluster.clients, { streamTimeoutMs: 20_000, pauseMs: 400 });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

type Step = { name: string; stop: () => Promise<unknown>; start: () => Promise<void> };
const steps: Step[] = [
  ...cluster.runners.map((_, i): Step => ({ name: `runner ${i + 1}`, stop: () => cluster.runners[i]!.stop(), start: () => cluster.restart("runner", i) })),
  ...cluster.actors.map((_, i): Step => ({ name: `actor host ${i + 1}`, stop: () => cluster.actors[i]!.stop(), start: () => cluster.restart("actors", i) })),
  ...cluster.gateways.map((_, i): Step => ({ name: `gateway ${i + 1}`, stop: () => cluster.gateways[i]!.stop(), start: () => cluster.restart("gateway", i) })),
  ...cluster.nats.nodes.map((node): Step => ({
    name: `NATS ${node.name}`,
    stop: () => {
      spawnSync("nats-server", ["--signal", `ldm=${node.child.pid}`]);
      return node.exited;
    },
    start: () => node.restart(),
  })),
];

await load.seed(24, 4);
load.start();
await sleep(2_000);
const startedAt = new Map<string, number>();
/** Per step: how long its stop (the drain) and its start took, in ms. */
const took = new Map<string, { stop: number; start: number }>();
for (const step of steps) {
  const began = Date.now();
  startedAt.set(step.name, began);
  await step.stop();
  const stopped = Date.now();
  await step.start();
  took.set(step.name, { stop: stopped - began, start: Date.now() - stopped });
  await sleep(1_500);
}
await sleep(1_000);
await load.stop();

t.test("no request failed in the end; no stream ended with an error; none hung", async (t) => {
  const figures = load.figures();
  t.comment(`errors of failed attempts: ${JSON.stringify(load.errors())}`);
  for (const step of steps) t.comment(`${step.name}: ${JSON.stringify(took.get(step.name))} ms; ${JSON.stringify(load.figures(startedAt.get(step.name)!))}`);
  t.equal(figures.failed, 0, "every request was served (a refused attempt retried on the other gateway)");
  t.ok(figures.streamsFinished > 0, `${figures.streamsFinished} streams finished`);
  t.equal(figures.streamsHung, 0, "no stream hung past its timeout");
  // Drains finish their streams; events that core NATS dropped while a NATS node in lame duck
  // handed its clients on are sent again by their runner (ResendQuery).
  t.equal(figures.streamsEndedWithError, 0, "no stream ended with an error, whichever process or NATS node drained");
});

t.test("nothing accepted was lost, nothing ran twice", async (t) => {
  const losses = await load.losses(cluster.clients[1]!);
  checkNothingLost(t, losses, { minBackground: 10, errorRecords: () => gatewayErrors(cluster) });
});
