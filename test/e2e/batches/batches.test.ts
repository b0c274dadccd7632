// tier: serial (fills the runner and measures interactive latency beside it)
import t from "tap";
import OpenAI from "openai";
import { sharedStack } from "../../harness/shared-stack.js";
import { TEST_MODEL } from "../../harness/processes.js";
import { batchResults, chatLine, createBatch, waitForBatch } from "../../harness/batches.js";

// The batch life cycle through the openai client: upload, create, poll, download, match by
// custom_id; lines that fail at run time; listing; cancel and delete rules; project isolation.
const stack = await sharedStack(t);
const client = stack.client;
// Another project of the same organization, with a key of its own.
const otherProject = await stack.project("other");

t.test("upload, create, poll to completed, download and match every line by custom_id", async (t) => {
  const lines = Array.from({ length: 40 }, (_, i) => chatLine(`req-${i}`, { max_tokens: 4 + (i % 5) }));
  lines.push(chatLine("unknown-model", { model: "nobody/no-such-model" }));
  lines.push(chatLine("too-many-tokens", { max_tokens: 100_000 }));
  lines.push(chatLine("max-completion", { max_tokens: undefined, max_completion_tokens: 3 }));
  const created = await createBatch(client, lines, { metadata: { purpose: "test" } });
  t.equal(created.object, "batch");
  t.match(created.id, /^batch_/);
  t.equal(created.status, "validating");
  t.same(created.request_counts, { total: 0, completed: 0, failed: 0 });
  t.same(created.metadata, { purpose: "test" });
  for (const key of ["errors", "output_file_id", "error_file_id", "in_progress_at", "finalizing_at", "completed_at", "failed_at", "expired_at", "cancelling_at", "cancelled_at"])
    t.equal((created as unknown as Record<string, unknown>)[key], null, `${key} is sent as null`);
  t.equal(created.expires_at, created.created_at + 24 * 3600);

  const done = await waitForBatch(client, created.id);
  t.equal(done.status, "completed");
  t.same(done.request_counts, { total: 43, completed: 41, failed: 2 });
  for (const key of ["in_progress_at", "finalizing_at", "completed_at"] as const) t.type(done[key], "number", `${key} is set`);
  t.equal(done.model, TEST_MODEL);
  const usage = (done as unknown as { usage: { input_tokens: number; output_tokens: number; total_tokens: number } }).usage;
  t.ok(usage.output_tokens > 0 && usage.total_tokens === usage.input_tokens + usage.output_tokens, "usage adds up");

  const { output, errors, seen } = await batchResults(client, done);
  t.equal(output.length, 41);
  t.equal(errors.length, 2);
  t.equal(seen.size, 43, "every custom_id appears");
  t.ok([...seen.values()].every((n) => n === 1), "each exactly once");
  for (const line of output) {
    t.match(line.id, /^batch_req_/);
    t.equal(line.error, null);
    t.equal(line.response!.status_code, 200);
    t.match(line.response!.request_id, /^req_/);
    t.equal(line.response!.body.object, "chat.completion");
  }
  const byId = new Map(output.map((l) => [l.custom_id, l]));
  t.equal(byId.get("req-3")!.response!.body.usage.completion_tokens <= 7, true, "max_tokens is applied per line");
  t.ok(byId.get("max-completion")!.response!.body.usage.completion_tokens <= 3, "max_completion_tokens too");
  const unknown = errors.find((l) => l.custom_id === "unknown-model")!;
  t.equal(unknown.response, null);
  t.equal(unknown.error!.code, "invalid_request");
  t.match(unknown.error!.message, /nobody\/no-such-model/);
  const tooMany = errors.find((l) => l.custom_id === "too-many-tokens")!;
  t.equal(tooMany.error, null);
  t.equal(tooMany.response!.status_code, 400);
  t.equal(tooMany.response!.body.error.param, "max_tokens");

  const outputFile = await client.files.retrieve(done.output_file_id!);
  t.equal(outputFile.purpose, "batch_output");
  t.equal(outputFile.filename, `batch_${done.id}_output.jsonl`);
  t.equal((await client.files.retrieve(done.error_file_id!)).filename, `batch_${done.id}_error.jsonl`);

  await t.test("a final batch cannot be cancelled, and can be deleted", async (t) => {
    const err = await client.batches.cancel(done.id).catch((e: unknown) => e);
    t.ok(err instanceof OpenAI.BadRequestError, "400 on cancel");
    const res = await stack.fetch(`/v1/batches/${done.id}`, { method: "DELETE" });
    t.equal(res.status, 200);
    t.same(await res.json(), { id: done.id, object: "batch", deleted: true });
    t.ok((await client.batches.retrieve(done.id).catch((e: unknown) => e)) instanceof OpenAI.NotFoundError, "gone");
    t.equal((await client.files.retrieve(done.output_file_id!)).id, done.output_file_id, "its output file stays (delete it with DELETE /v1/files)");
  });
});

t.test("the output_expires_after policy sets the expiry of output and error files", async (t) => {
  const created = await createBatch(client, [chatLine("a"), chatLine("b", { model: "nobody/x" })], { output_expires_after: { anchor: "created_at", seconds: 7200 } });
  const done = await waitForBatch(client, created.id);
  const out = await client.files.retrieve(done.output_file_id!);
  const err = await client.files.retrieve(done.error_file_id!);
  t.equal(out.expires_at, out.created_at + 7200);
  t.equal(err.expires_at, err.created_at + 7200);
});

t.test("synchronous validation of the create request", async (t) => {
  const file = await client.files.create({ file: await OpenAI.toFile(Buffer.from(JSON.stringify(chatLine("x")) + "\n"), "in.jsonl"), purpose: "batch" });
  const userFile = await client.files.create({ file: await OpenAI.toFile(Buffer.from("hello"), "notes.txt"), purpose: "user_data" });
  const attempt = async (body: Record<string, unknown>) => {
    const res = await stack.fetch("/v1/batches", { method: "POST", body: JSON.stringify(body) });
    return { status: res.status, error: ((await res.json()) as { error: { param: string; code: string; message: string } }).error };
  };
  const base = { input_file_id: file.id, endpoint: "/v1/chat/completions", completion_window: "24h" };
  let r = await attempt({ ...base, endpoint: "/v1/embeddings" });
  t.same([r.status, r.error.param, r.error.code], [400, "endpoint", "unsupported_value"]);
  r = await attempt({ ...base, endpoint: "/v1/nothing" });
  t.same([r.status, r.error.param], [400, "endpoint"]);
  r = await attempt({ ...base, completion_window: "48h" });
  t.same([r.status, r.error.param], [400, "completion_window"]);
  r = await attempt({ endpoint: base.endpoint, completion_window: "24h" });
  t.same([r.status, r.error.param, r.error.code], [400, "input_file_id", "missing_required_parameter"]);
  r = await attempt({ ...base, input_file_id: "file-doesnotexist" });
  t.same([r.status, r.error.param], [400, "input_file_id"]);
  r = await attempt({ ...base, input_file_id: userFile.id });
  t.same([r.status, r.error.param, r.error.code], [400, "input_file_id", "invalid_file_purpose"]);
  r = await attempt({ ...base, output_expires_after: { anchor: "created_at", seconds: 10 } });
  t.same([r.status, r.error.param], [400, "output_expires_after.seconds"]);
  r = await attempt({ ...base, surprise: 1 });
  t.same([r.status, r.error.code], [400, "unknown_parameter"]);
});

t.test("listing pages newest first with limit and after; the SDK iterates every page", async (t) => {
  const ids: string[] = [];
  for (let i = 0; i < 3; i++) ids.push((await createBatch(client, [chatLine(`p${i}`, { max_tokens: 1 })])).id);
  const first = await client.batches.list({ limit: 2 });
  t.equal(first.data.length, 2);
  t.equal(first.data[0]!.id, ids[2], "newest first");
  t.ok(
    first.data[0]!.created_at >= first.data[1]!.created_at && first.data[0]!.id > first.data[1]!.id,
    `in creation order, newest first (ours: ${ids.join(", ")}; listed: ${first.data.map((b) => `${b.id}@${b.created_at}`).join(", ")})`,
  );
  t.equal(first.has_more, true);
  const raw = (await (await stack.fetch("/v1/batches?limit=2")).json()) as { object: string; first_id: string; last_id: string };
  t.equal(raw.object, "list");
  t.equal(raw.first_id, first.data[0]!.id);
  t.equal(raw.last_id, first.data[1]!.id);
  const next = await client.batches.list({ limit: 2, after: ids[1] });
  t.ok(next.data.every((b) => b.id < ids[1]!), "after: only older batches");
  t.ok(next.data.some((b) => b.id === ids[0]), "the next older one of ours is there");
  const all: string[] = [];
  for await (const b of client.batches.list({ limit: 2 })) all.push(b.id);
  t.same(all.filter((id) => ids.includes(id)), [...ids].reverse(), "auto-pagination reaches every batch, newest first");
  t.equal(new Set(all).size, all.length, "no batch twice");
  const bad = await stack.fetch("/v1/batches?limit=101");
  t.equal(bad.status, 400);
  for (const id of ids) await waitForBatch(client, id);
});

t.test("projects do not see each other's batches", async (t) => {
  const mine = await createBatch(client, [chatLine("iso", { max_tokens: 1 })]);
  const other = otherProject.client;
  t.ok((await other.batches.retrieve(mine.id).catch((e: unknown) => e)) instanceof OpenAI.NotFoundError, "retrieve: 404");
  t.ok((await other.batches.cancel(mine.id).catch((e: unknown) => e)) instanceof OpenAI.NotFoundError, "cancel: 404");
  t.equal((await other.batches.list()).data.length, 0, "list: empty");
  const res = await otherProject.fetch("/v1/batches", {
    method: "POST",
    body: JSON.stringify({ input_file_id: mine.input_file_id, endpoint: "/v1/chat/completions", completion_window: "24h" }),
  });
  t.equal(res.status, 400, "another project's input file is not found");
  const done = await waitForBatch(client, mine.id);
  t.ok((await other.files.content(done.output_file_id!).catch((e: unknown) => e)) instanceof OpenAI.NotFoundError, "output file: 404");
});

t.test("interactive requests keep being served while a batch fills the runner", async (t) => {
  const lines = Array.from({ length: 300 }, (_, i) => chatLine(`bg-${i}`, { max_tokens: 64 }));
  const batch = await createBatch(client, lines);
  await waitForBatch(client, batch.id, 60_000, (b) => b.request_counts!.completed > 5);
  const latencies: number[] = [];
  for (let i = 0; i < 10; i++) {
    const started = performance.now();
    const stream = await client.chat.completions.create({ model: TEST_MODEL, messages: [{ role: "user", content: "Hello" }], max_tokens: 4, stream: true });
    let first = 0;
    for await (const chunk of stream) if (!first && chunk.choices[0]?.delta.content) first = performance.now() - started;
    latencies.push(first);
  }
  latencies.sort((a, b) => a - b);
  const p50 = latencies[5]!;
  t.ok(p50 < 1000, `interactive TTFT p50 ${p50.toFixed(0)} ms during the batch (generous bound; the bench measures it)`);
  const running = await client.batches.retrieve(batch.id);
  t.equal(running.status, "in_progress", "the batch was still running meanwhile");
  await client.batches.cancel(batch.id);
  await waitForBatch(client, batch.id);
});
