import { createHash } from "node:crypto";
import { jetstreamManager } from "@nats-io/jetstream";
import OpenAI, { toFile } from "openai";
import t from "tap";
import { streams } from "../../../lib/nats/subjects.js";
import { batchResults, chatLine, createBatch, waitForBatch } from "../../harness/batches.js";
import { startClusterStack } from "../../harness/cluster.js";
import { connectAs, TEST_MODEL } from "../../harness/processes.js";

// A NATS node and a gateway killed (-9) under a small mixed load, on a 3-node JetStream cluster
// with every bucket and stream at 3 replicas. The node killed is the leader of the background
// responses' stream. Clients spread over both gateways and retry on the other one, as behind a
// load balancer. Nothing accepted into JetStream may be lost: background responses reach a final
// state, the batch has each line once, every uploaded file reads back whole. Streams in flight
// continue or end with an error, none hangs past its timeout. Per fault, the figures go to the
// test's comments: requests failed (then retried), lost, recovery time, duplicates.

const TOKENS_PER_SECOND = 50;
const env = {
  TRIBUTARY_ENGINE: "sim",
  TRIBUTARY_MODEL_OVERRIDES: JSON.stringify({ [TEST_MODEL]: { sim: { tokens_per_second: TOKENS_PER_SECOND, first_token_latency_ms: 10 } } }),
  TRIBUTARY_RUNNER_TIMEOUT_MS: "3000",
  TRIBUTARY_BATCH_ACK_WAIT_MS: "5000",
  TRIBUTARY_BACKGROUND_ACK_WAIT_MS: "5000",
};
const STREAM_TIMEOUT_MS = 20_000;

const cluster = await startClusterStack({ gateways: 2, actorHosts: 2, runners: 2, env });
t.teardown(() => cluster.stop());

interface Op {
  kind: string;
  start: number;
  end: number;
  ok: boolean;
  attempts: number;
  error?: string;
}
const ops: Op[] = [];
let next = 0;

/** Runs `fn` on one gateway's client, on the other one when it fails (a load balancer's retry), until `deadlineMs`. */
async function withFailover<T>(kind: string, fn: (client: OpenAI) => Promise<T>, deadlineMs = 30_000): Promise<T | undefined> {
  const op: Op = { kind, start: Date.now(), end: 0, ok: false, attempts: 0 };
  ops.push(op);
  let index = next++ % cluster.clients.length;
  while (Date.now() - op.start < deadlineMs) {
    op.attempts++;
    try {
      const value = await fn(cluster.clients[index]!);
      op.ok = true;
      op.end = Date.now();
      return value;
    } catch (err) {
      op.error = String(err).slice(0, 200);
      index = (index + 1) % cluster.clients.length;
      await new Promise((r) => setTimeout(r, 200));
    }
  }
  op.end = Date.now();
  return undefined;
}

/** One streamed chat completion: how it ended, and whether it ended within its timeout. */
async function stream(client: OpenAI): Promise<"finished" | "error event"> {
  const s = await client.chat.completions.create(
    { model: TEST_MODEL, messages: [{ role: "user", content: "go" }], max_tokens: 100, stream: true },
    { signal: AbortSignal.timeout(STREAM_TIMEOUT_MS) },
  );
  try {
    let finish: string | null = null;
    for await (const chunk of s) finish = chunk.choices[0]?.finish_reason ?? finish;
    if (finish !== "length") throw new Error(`stream ended without finish_reason (${finish})`);
    return "finished";
  } catch (err) {
    if ((err as Error).name === "AbortError" || /abort|timeout/i.test(String(err))) throw new Error("stream hung past its timeout");
    return "error event";
  }
}

const backgroundIds: string[] = [];
const files: Array<{ id: string; sha256: string }> = [];
let fileSeq = 0;
async function upload(client: OpenAI) {
  const content = Buffer.from(`file ${fileSeq++} `.repeat(5_000));
  const file = await client.files.create({ file: await toFile(content, "data.txt"), purpose: "user_data" });
  files.push({ id: file.id, sha256: createHash("sha256").update(content).digest("hex") });
}
async function queueBackground(client: OpenAI) {
  const r = await client.responses.create({ model: TEST_MODEL, input: "go", background: true, max_output_tokens: 60 });
  backgroundIds.push(r.id);
}

// Before the faults: a batch running, background responses queued.
const batch = await withFailover("batch create", (c) => createBatch(c, Array.from({ length: 24 }, (_, i) => chatLine(`line-${i}`, { max_tokens: 30 }))));
for (let i = 0; i < 4; i++) await withFailover("background create", queueBackground);

// The node to kill: the leader of the background responses' stream.
const admin = await connectAs(cluster.nats.url);
const leader = (await (await jetstreamManager(admin)).streams.info(streams.responsesBackground)).cluster?.leader;
await admin.close();
const victim = cluster.nats.nodes.find((n) => n.name === leader) ?? cluster.nats.nodes[0]!;
t.comment(`killing NATS node ${victim.name} (leader of ${streams.responsesBackground}) and gateway 1`);

// The steady load: streams, background creates, uploads, one after another on two workers each.
let loadRunning = true;
const streamOutcomes: string[] = [];
const worker = async (kind: string, fn: (c: OpenAI) => Promise<unknown>) => {
  while (loadRunning) await withFailover(kind, fn).then((v) => kind === "stream" && v && streamOutcomes.push(String(v)));
};
const workers = [
  worker("stream", stream),
  worker("stream", stream),
  worker("background create", queueBackground),
  worker("file upload", upload),
];

await new Promise((r) => setTimeout(r, 2_000));
const natsKilledAt = Date.now();
await victim.kill();
await new Promise((r) => setTimeout(r, 3_000));
const gatewayKilledAt = Date.now();
await cluster.gateways[0]!.kill();
await new Promise((r) => setTimeout(r, 4_000));
await victim.restart();
await new Promise((r) => setTimeout(r, 2_000));
loadRunning = false;
await Promise.all(workers);
const survivor = cluster.clients[1]!;

t.test("every request was served in the end (failed attempts retried on the other gateway)", async (t) => {
  const unserved = ops.filter((o) => !o.ok);
  t.same(unserved.map((o) => `${o.kind}: ${o.error}`), [], "no request failed on both gateways until its deadline");
  for (const [fault, at] of [["NATS node", natsKilledAt], ["gateway", gatewayKilledAt]] as const) {
    const after = ops.filter((o) => o.end >= at);
    const retried = after.filter((o) => o.attempts > 1).length;
    const failed = after.reduce((n, o) => n + o.attempts - (o.ok ? 1 : 0), 0);
    // Recovery of a kind: from the kill to the end of its first request started after the kill that succeeded at once.
    const recovery = ["stream", "background create", "file upload"].map((kind) => {
      const first = ops.find((o) => o.kind === kind && o.ok && o.attempts === 1 && o.start >= at);
      return `${kind} ${first ? `${first.end - at} ms` : "none"}`;
    });
    t.comment(`${fault} killed: ${after.length} requests ended after it, ${retried} of them retried (${failed} failed attempts), lost 0 (checked below); recovery: ${recovery.join(", ")}`);
  }
});

t.test("streams continued or ended with an error event; none hung", async (t) => {
  t.ok(streamOutcomes.length > 0, `${streamOutcomes.length} streams`);
  t.comment(`streams: ${streamOutcomes.filter((s) => s === "finished").length} finished, ${streamOutcomes.filter((s) => s === "error event").length} ended with an error event`);
  t.notOk(ops.some((o) => o.kind === "stream" && /hung/.test(o.error ?? "")), "no stream hung past its timeout");
});

t.test("no accepted background response was lost", async (t) => {
  t.ok(backgroundIds.length >= 6, `${backgroundIds.length} accepted`);
  const statuses = new Map<string, number>();
  for (const id of backgroundIds) {
    const deadline = Date.now() + 40_000;
    let status = "";
    for (;;) {
      status = (await survivor.responses.retrieve(id).catch((e: unknown) => ({ status: `error ${String(e).slice(0, 80)}` }))).status ?? "";
      if (["completed", "incomplete", "failed", "cancelled"].includes(status) || Date.now() > deadline) break;
      await new Promise((r) => setTimeout(r, 250));
    }
    statuses.set(status, (statuses.get(status) ?? 0) + 1);
  }
  t.comment(`background responses: ${JSON.stringify(Object.fromEntries(statuses))}`);
  t.equal((statuses.get("completed") ?? 0) + (statuses.get("incomplete") ?? 0), backgroundIds.length, "each ran to its end");
});

t.test("the batch ran every line exactly once", async (t) => {
  t.ok(batch, "the batch was accepted");
  const final = await waitForBatch(survivor, batch!.id, 60_000);
  t.equal(final.status, "completed");
  const { output, errors, seen } = await batchResults(survivor, final);
  t.equal(output.length, 24, "24 output lines");
  t.same(errors, [], "no error lines");
  t.same([...seen.values()].filter((n) => n !== 1), [], "no duplicate line");
});

t.test("every uploaded file reads back whole", async (t) => {
  t.ok(files.length > 0, `${files.length} files accepted`);
  let intact = 0;
  for (const f of files) {
    const body = Buffer.from(await (await survivor.files.content(f.id)).arrayBuffer());
    if (createHash("sha256").update(body).digest("hex") === f.sha256) intact++;
  }
  t.equal(intact, files.length, "each file's contents are the ones uploaded");
});
