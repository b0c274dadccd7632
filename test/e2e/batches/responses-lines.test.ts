import t from "tap";
import { sharedStack } from "../../harness/shared-stack.js";
import { TEST_MODEL } from "../../harness/processes.js";
import { batchResults, uploadBatchFile, jsonl, waitForBatch } from "../../harness/batches.js";

// Batch lines for /v1/responses run through the Responses core at batch priority.
const stack = await sharedStack(t);
const client = stack.client;

t.test("a /v1/responses batch: each line is a response object, stored in the batch's project", async (t) => {
  const lines = Array.from({ length: 6 }, (_, i) => ({ custom_id: `r-${i}`, method: "POST", url: "/v1/responses", body: { model: TEST_MODEL, input: `Story ${i}`, max_output_tokens: 16 } }));
  lines.push({ custom_id: "bad", method: "POST", url: "/v1/responses", body: { model: TEST_MODEL, input: "x", max_output_tokens: 5000 } });
  const file = await uploadBatchFile(client, jsonl(lines));
  const created = await client.batches.create({ input_file_id: file.id, endpoint: "/v1/responses", completion_window: "24h" });
  const done = await waitForBatch(client, created.id);
  t.equal(done.status, "completed");
  t.same(done.request_counts, { total: 7, completed: 6, failed: 1 });
  const { output, errors } = await batchResults(client, done);
  t.equal(output.length, 6);
  t.equal(errors.length, 1);
  for (const line of output) {
    const body = (line as { response: { status_code: number; body: { id: string; object: string; status: string } } }).response.body;
    t.equal(body.object, "response");
    t.equal(body.status, "incomplete");
    const stored = await client.responses.retrieve(body.id);
    t.equal(stored.id, body.id, "stored: retrievable by the batch's project");
  }
});
