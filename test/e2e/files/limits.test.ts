// tier: serial (200 MB and 320 MB uploads, and the gateway's peak memory)
import t from "tap";
import { readFileSync } from "node:fs";
import { jetstreamManager } from "@nats-io/jetstream";
import { startStack } from "../../harness/stack.js";
import { TEST_KEY } from "../../harness/processes.js";
import { buckets } from "../../../lib/nats/subjects.js";

// The size limits at their edges (200 MB for batch input, streamed over loopback), that an upload
// streams through the gateway without sitting in its memory, and that a broken upload leaves
// nothing behind.
const MB = 1024 * 1024;
const BATCH_LIMIT = 200 * MB;
const stack = await startStack(t);
const nc = await stack.nats.connect();
t.teardown(() => nc.close());
const jsm = await jetstreamManager(nc);
const storedBytes = async () => (await jsm.streams.info(`OBJ_${buckets.fileContents}`)).state.bytes;

/** Peak resident memory of a process, from /proc (VmHWM), in bytes. */
function peakRss(pid: number): number {
  const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return Number(m![1]) * 1024;
}

/** POSTs a multipart upload whose file part is `size` bytes, generated as it is sent. */
async function streamedUpload(size: number, options: { purpose?: string; filename?: string; abortAfter?: number } = {}) {
  const boundary = "----tributary-test-boundary";
  const head = Buffer.from(
    `--${boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\n${options.purpose ?? "batch"}\r\n` +
      `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="${options.filename ?? "big.jsonl"}"\r\nContent-Type: application/octet-stream\r\n\r\n`,
  );
  const tail = Buffer.from(`\r\n--${boundary}--\r\n`);
  const block = Buffer.alloc(MB, "x");
  let sent = 0;
  const controller = new AbortController();
  const body = new ReadableStream<Uint8Array>({
    start(c) {
      c.enqueue(head);
    },
    pull(c) {
      if (options.abortAfter !== undefined && sent >= options.abortAfter) {
        controller.abort();
        return;
      }
      if (sent >= size) {
        c.enqueue(tail);
        c.close();
        return;
      }
      const n = Math.min(block.length, size - sent);
      sent += n;
      c.enqueue(n === block.length ? block : block.subarray(0, n));
    },
  });
  return fetch(`${stack.gateway.url}/v1/files`, {
    method: "POST",
    body,
    headers: { authorization: `Bearer ${TEST_KEY}`, "content-type": `multipart/form-data; boundary=${boundary}` },
    signal: controller.signal,
    duplex: "half",
  } as RequestInit);
}

t.test("a 200 MB batch file is accepted, streamed through the gateway and back", async (t) => {
  const res = await streamedUpload(BATCH_LIMIT);
  t.equal(res.status, 200);
  const file = (await res.json()) as { id: string; bytes: number };
  t.equal(file.bytes, BATCH_LIMIT);
  const download = await stack.client.files.content(file.id);
  let bytes = 0;
  for await (const chunk of download.body as unknown as AsyncIterable<Uint8Array>) bytes += chunk.length;
  t.equal(bytes, BATCH_LIMIT, "downloaded in full");
  await stack.client.files.delete(file.id);
});

t.test("a 320 MB upload and download never sit whole in the gateway's memory", async (t) => {
  const size = 320 * MB;
  const res = await streamedUpload(size, { purpose: "user_data", filename: "big.bin" });
  t.equal(res.status, 200);
  const file = (await res.json()) as { id: string; bytes: number };
  t.equal(file.bytes, size);
  const download = await stack.client.files.content(file.id);
  let bytes = 0;
  for await (const chunk of download.body as unknown as AsyncIterable<Uint8Array>) bytes += chunk.length;
  t.equal(bytes, size, "downloaded in full");
  const peak = peakRss(stack.gateway.child.pid!);
  // Held whole, the file alone would take the gateway past this (its own footprint is ~100 MB).
  t.ok(peak < 240 * MB, `the gateway's peak memory was ${(peak / MB).toFixed(0)} MB for a ${size / MB} MB file each way`);
  await stack.client.files.delete(file.id);
});

t.test("200 MB + 1 byte for purpose batch is refused with a 400, and nothing stays stored", async (t) => {
  const before = await storedBytes();
  const res = await streamedUpload(BATCH_LIMIT + 1);
  t.equal(res.status, 400);
  const body = (await res.json()) as { error: { code: string; param: string } };
  t.equal(body.error.code, "file_too_large");
  t.equal(body.error.param, "file");
  t.equal(await storedBytes(), before, "the partial object was deleted");
});

t.test("a client that breaks off mid-upload leaves nothing behind", async (t) => {
  const before = await storedBytes();
  const files = (await stack.client.files.list()).data.length;
  await streamedUpload(50 * MB, { abortAfter: 20 * MB }).catch(() => undefined);
  // The gateway notices the abort and purges what it had written.
  const deadline = Date.now() + 10_000;
  while ((await storedBytes()) !== before && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
  t.equal(await storedBytes(), before, "no chunks left in the Object Store");
  t.equal((await stack.client.files.list()).data.length, files, "no file record");
});
