// tier: serial (two 50,000-line batches: about 20 s of CPU across the actor host, gateway and NATS, and a runner fed 50,000 lines until the cancel)
import t from "tap";
import { sharedStack } from "../../harness/shared-stack.js";
import { TEST_MODEL } from "../../harness/processes.js";
import { chatLine, createBatch, jsonl, uploadBatchFile, waitForBatch } from "../../harness/batches.js";

// Every validation failure of a batch input file at its edge: the batch goes validating -> failed
// with `errors` naming each problem and its line, and nothing runs.
const stack = await sharedStack(t);
const client = stack.client;

async function failedWith(t: import("tap").Test, lines: Array<ReturnType<typeof chatLine> | string>) {
  const created = await createBatch(client, lines);
  const done = await waitForBatch(client, created.id);
  t.equal(done.status, "failed");
  t.type(done.failed_at, "number");
  t.equal(done.output_file_id, null);
  t.equal(done.in_progress_at, null, "nothing ran");
  return done.errors!.data!;
}

t.test("each kind of bad line is reported with its code, param and 1-based line", async (t) => {
  const errors = await failedWith(t, [
    chatLine("ok-1"),
    "{not json",
    JSON.stringify({ method: "POST", url: "/v1/chat/completions", body: {} }),
    chatLine("ok-1"),
    { ...chatLine("wrong-url"), url: "/v1/embeddings" },
    { ...chatLine("wrong-method"), method: "GET" },
    chatLine("no-messages", { messages: undefined }),
    chatLine("bad-temperature", { temperature: 9 }),
    chatLine("no-model", { model: undefined }),
    JSON.stringify({ custom_id: "no-body", method: "POST", url: "/v1/chat/completions" }),
  ]);
  const summary = errors.map((e) => [e.line, e.code, e.param]);
  t.same(summary, [
    [2, "invalid_json_line", null],
    [3, "missing_required_parameter", "custom_id"],
    [4, "duplicate_custom_id", "custom_id"],
    [5, "url_mismatch", "url"],
    [6, "invalid_request", "method"],
    [7, "missing_required_parameter", "body.messages"],
    [8, "invalid_value", "body.temperature"],
    [9, "missing_required_parameter", "body.model"],
    [10, "missing_required_parameter", "body"],
  ]);
  for (const e of errors) t.match(e.message, new RegExp(`Line ${e.line}`), "the message names the line");
});

t.test("an empty file fails with empty_file", async (t) => {
  const errors = await failedWith(t, ["", "  "]);
  t.same(errors.map((e) => e.code), ["empty_file"]);
});

const tinyLine = (i: number) => JSON.stringify({ custom_id: `r${i}`, method: "POST", url: "/v1/chat/completions", body: { model: TEST_MODEL, messages: [{ role: "user", content: "hi" }], max_tokens: 1 } });
const manyLines = (n: number) => Array.from({ length: n }, (_, i) => tinyLine(i)).join("\n") + "\n";

t.test("50,001 requests is one too many: too_many_tasks", async (t) => {
  const file = await uploadBatchFile(client, manyLines(50_001));
  const created = await client.batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
  const done = await waitForBatch(client, created.id);
  t.equal(done.status, "failed");
  t.same(done.errors!.data!.map((e) => [e.code, e.line]), [["too_many_tasks", 50_001]]);
});

t.test("50,000 requests pass validation (then the batch is cancelled)", async (t) => {
  const file = await uploadBatchFile(client, manyLines(50_000));
  const created = await client.batches.create({ input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" });
  const running = await waitForBatch(client, created.id, 120_000, (b) => b.status !== "validating");
  t.equal(running.status, "in_progress");
  t.equal(running.request_counts!.total, 50_000);
  await client.batches.cancel(created.id);
  const done = await waitForBatch(client, created.id, 180_000);
  t.equal(done.status, "cancelled");
  t.equal(done.request_counts!.total, 50_000);
});

t.test("a file that is not the batch's endpoint or is bad JSON throughout fails without running", async (t) => {
  const errors = await failedWith(t, [jsonl([chatLine("a")]).trim().replace("/v1/chat/completions", "/v1/responses")]);
  t.same(errors.map((e) => e.code), ["url_mismatch"]);
});

