// tier: slow (a stack of its own)
import t from "tap";
import { startActorHost, startRunner } from "../../harness/processes.js";
import { startStack } from "../../harness/stack.js";
import { batchResults, chatLine, createBatch, waitForBatch } from "../../harness/batches.js";

// kill -9 of a runner and of the actor host (coordinator and workers) mid-batch: after restart
// the batch completes, and every custom_id is in the output exactly once.
const root = t;
const ACK_WAIT = "3000";
const stack = await startStack(t, { actorsEnv: { TRIBUTARY_BATCH_ACK_WAIT_MS: ACK_WAIT }, gatewayEnv: { TRIBUTARY_RUNNER_TIMEOUT_MS: "2000" } });
const client = stack.client;
const LINES = 150;
const lines = (tag: string) => Array.from({ length: LINES }, (_, i) => chatLine(`${tag}-${i}`, { max_tokens: 48 }));

async function checkComplete(t: import("tap").Test, id: string) {
  const done = await waitForBatch(client, id, 180_000);
  t.equal(done.status, "completed");
  const { output, errors, seen } = await batchResults(client, done);
  t.equal(errors.length, 0, "no line failed");
  t.equal(output.length, LINES, "every line has its output");
  t.equal(seen.size, LINES, "every custom_id appears");
  t.ok([...seen.values()].every((n) => n === 1), "none twice");
  t.same(done.request_counts, { total: LINES, completed: LINES, failed: 0 });
}

t.test("kill -9 of the runner mid-batch", async (t) => {
  const created = await createBatch(client, lines("runner"));
  await waitForBatch(client, created.id, 60_000, (b) => b.request_counts!.completed >= 10);
  await stack.runners[0]!.kill();
  // An outage, not a restart in place: lines keep going to the dead runner for a while.
  await new Promise((r) => setTimeout(r, 1000));
  const runner = await startRunner(stack.nats.url);
  root.teardown(() => runner.kill()); // it serves the later tests too
  await checkComplete(t, created.id);
});

t.test("kill -9 of the actor host (coordinator and workers) mid-batch", async (t) => {
  const created = await createBatch(client, lines("coord"));
  await waitForBatch(client, created.id, 60_000, (b) => b.request_counts!.completed >= 10);
  await stack.actors.kill();
  const actors = await startActorHost(stack.nats.url, { TRIBUTARY_BATCH_ACK_WAIT_MS: ACK_WAIT });
  t.teardown(() => actors.kill());
  await checkComplete(t, created.id);
});

t.test("kill -9 of the actor host while it validates and enqueues a batch", async (t) => {
  const created = await createBatch(client, lines("early"));
  const actors = await startActorHost(stack.nats.url, { TRIBUTARY_BATCH_ACK_WAIT_MS: ACK_WAIT });
  t.teardown(() => actors.kill());
  await actors.waitForLog((r) => r.msg === "batch validated" && r.batchId === created.id, 30_000).catch(() => undefined);
  await actors.kill();
  const again = await startActorHost(stack.nats.url, { TRIBUTARY_BATCH_ACK_WAIT_MS: ACK_WAIT });
  t.teardown(() => again.kill());
  await checkComplete(t, created.id);
});
