// tier: slow (a stack of its own)
import t from "tap";
import { startStack } from "../../harness/stack.js";
import { batchResults, chatLine, createBatch, waitForBatch } from "../../harness/batches.js";

// Cancel mid-run and expiry: finished results are kept and downloadable, every other line is in
// the error file (batch_cancelled / batch_expired), each custom_id exactly once.
const stack = await startStack(t, { env: { TRIBUTARY_MODEL_OVERRIDES: JSON.stringify({ "test/stories-260k": { slots: 2 } }) } });
const client = stack.client;
const LINES = 120;
const lines = () => Array.from({ length: LINES }, (_, i) => chatLine(`c-${i}`, { max_tokens: 200 }));

t.test("cancel mid-run: cancelling -> cancelled, finished lines kept", async (t) => {
  const created = await createBatch(client, lines());
  await waitForBatch(client, created.id, 60_000, (b) => b.request_counts!.completed >= 4);
  const cancelling = await client.batches.cancel(created.id);
  t.equal(cancelling.status, "cancelling");
  t.type(cancelling.cancelling_at, "number");
  const again = await client.batches.cancel(created.id);
  t.ok(["cancelling", "cancelled"].includes(again.status), "cancelling twice is harmless");
  const done = await waitForBatch(client, created.id, 60_000);
  t.equal(done.status, "cancelled");
  t.type(done.cancelled_at, "number");
  const { output, errors, seen } = await batchResults(client, done);
  t.ok(output.length >= 4 && output.length < LINES, `${output.length} finished lines kept`);
  t.equal(done.request_counts!.completed, output.length);
  t.equal(seen.size, LINES, "every custom_id is in one of the files");
  t.ok([...seen.values()].every((n) => n === 1), "each exactly once");
  t.ok(errors.every((e) => e.error?.code === "batch_cancelled" && e.response === null), "the rest: batch_cancelled");
  for (const l of output) t.equal(l.response!.status_code, 200);
});

t.test("expiry: a batch not done within its completion window expires, finished lines kept", async (t) => {
  const created = await createBatch(client, lines(), { completion_window: "6s" });
  t.equal(created.expires_at, created.created_at + 6);
  const done = await waitForBatch(client, created.id, 60_000);
  t.equal(done.status, "expired");
  t.type(done.expired_at, "number");
  t.type(done.finalizing_at, "number");
  const { output, errors, seen } = await batchResults(client, done);
  t.ok(output.length > 0 && output.length < LINES, `${output.length} lines finished in time and are kept`);
  t.equal(seen.size, LINES);
  t.ok([...seen.values()].every((n) => n === 1), "each custom_id exactly once");
  t.ok(errors.every((e) => e.error?.code === "batch_expired"), "the rest: batch_expired");
  t.equal(done.request_counts!.completed, output.length);
  t.equal(done.request_counts!.total, LINES);
});

t.test("cancel while validating: cancelled without files", async (t) => {
  const created = await createBatch(client, [chatLine("v-1")]);
  const cancelled = await client.batches.cancel(created.id).catch(() => undefined);
  const done = await waitForBatch(client, created.id, 30_000);
  if (cancelled?.status === "cancelling" && done.in_progress_at === null) {
    t.equal(done.status, "cancelled");
    t.equal(done.output_file_id, null);
  } else t.pass(`the batch got past validation first (${done.status})`);
});
