import t from "tap";
import { startStack } from "../../harness/stack.js";
import { clusterFaultEnv, MixedLoad } from "../../harness/cluster-load.js";
import { startActorHost, startRunner, type ActorHost } from "../../harness/processes.js";

// A runner and then an actor host killed (-9) under the steady mixed load of the cluster fault
// tests (streamed chat completions, background responses, a running batch, uploads), each
// restarted afterwards. One NATS server is enough here: these faults are about the processes
// (redelivery, failover of budgets and batch coordination, runs started over), and
// nats-node-failure.test.ts covers the NATS cluster. Nothing accepted may be lost or run twice,
// no stream may hang, and no background response may end `failed` because of either fault.

const env = clusterFaultEnv;
const stack = await startStack(t, { runners: 2, env });
const secondHost = await startActorHost(stack.nats.url, env);
const hosts: ActorHost[] = [stack.actors, secondHost];
t.teardown(() => Promise.all(hosts.map((h) => h.kill())));
const load = new MixedLoad(() => [stack.client], { streamTimeoutMs: 20_000 });

await load.seed(24, 4);
load.start();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
await sleep(2_000);

const runnerKilledAt = Date.now();
await stack.runners[0]!.kill();
await sleep(5_000);
const runner = await startRunner(stack.nats.url, env);
t.teardown(() => runner.kill());

await sleep(1_000);
const hostKilledAt = Date.now();
await hosts[0]!.kill();
await sleep(6_000);
hosts.push(await startActorHost(stack.nats.url, env));
await sleep(2_000);
await load.stop();

t.test("every request was served; streams ended or erred, none hung", async (t) => {
  const figures = load.figures();
  t.comment(`errors of failed attempts: ${JSON.stringify(load.errors())}`);
  for (const [fault, at] of [["runner", runnerKilledAt], ["actor host", hostKilledAt]] as const)
    t.comment(`${fault} killed: ${JSON.stringify(load.figures(at))}; recovery (ms): ${JSON.stringify(load.recoveryMs(at))}`);
  t.equal(figures.failed, 0, "no request failed until its deadline");
  t.ok(figures.streamsFinished > 0, `${figures.streamsFinished} streams finished`);
  t.equal(figures.streamsHung, 0, "no stream hung past its timeout");
});

t.test("nothing accepted was lost, nothing ran twice, no background response failed", async (t) => {
  const losses = await load.losses(stack.client);
  t.comment(JSON.stringify(losses));
  t.ok(losses.backgroundAccepted >= 10, `${losses.backgroundAccepted} background responses accepted`);
  t.equal(losses.backgroundStatuses.failed ?? 0, 0, "no background response failed");
  t.equal(losses.backgroundLost, 0, "each background response ran to its end");
  t.equal(losses.batchLinesMissing, 0, "the batch completed every line");
  t.equal(losses.batchDuplicates, 0, "no batch line twice");
  t.ok(losses.filesAccepted > 0, `${losses.filesAccepted} files accepted`);
  t.equal(losses.filesLost, 0, "each file reads back whole");
});
