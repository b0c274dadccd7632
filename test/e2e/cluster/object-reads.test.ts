// tier: serial (faults injected into a cluster of many processes, with recovery deadlines)
import { createHash } from "node:crypto";
import t from "tap";
import { jetstreamManager } from "@nats-io/jetstream";
import { ObjectContents } from "../../../lib/nats/object-contents.js";
import { listKeys, openKv } from "../../../lib/nats/jetstream.js";
import { buckets } from "../../../lib/nats/subjects.js";
import { startNatsCluster } from "../../harness/cluster.js";
import { connectAs } from "../../harness/processes.js";

// Reads of a replicated Object Store (and KV listings) agree with what the writer was
// acknowledged, whichever replica the server places the reading consumer on. A write is
// acknowledged once two of three replicas hold it; here the third is paused (SIGSTOP) while
// objects are written and resumed just before they are read, so it is behind when the reads
// begin. The server places a reader's consumer on any replica: reads that trusted the consumer's
// own count of what is pending ended short ("read 262144 of 786432 bytes") or listed an object
// as missing when it landed on the one behind. The placement is the server's choice, so each
// round reads several times; rounds where no consumer landed there pass trivially.

process.env.TRIBUTARY_JS_REPLICAS = "3";
const ROUNDS = 4;
const OBJECTS_PER_ROUND = 3;
const OBJECT_BYTES = 3 * 256 * 1024; // three chunks
const READS_PER_OBJECT = 4;

const cluster = await startNatsCluster(3);
t.teardown(() => cluster.stop());

// The buckets first (created with three replicas), then the replica to pause: one that leads
// neither (a paused leader would stall the writes until another is elected), and a writer on
// another node.
const setupNc = await connectAs(cluster.nodes[0]!.url, "actors");
await ObjectContents.open(setupNc, buckets.fileContents);
await openKv(setupNc, buckets.files, { history: 1 });
const jsm = await jetstreamManager(setupNc);
const objects = await jsm.streams.info(`OBJ_${buckets.fileContents}`);
const keys = await jsm.streams.info(`KV_${buckets.files}`);
await setupNc.close();
const leaders = new Set([objects.cluster?.leader, keys.cluster?.leader]);
const behind = cluster.nodes.find((n) => !leaders.has(n.name))!;
const writerNode = cluster.nodes.find((n) => n !== behind)!;
t.comment(`leaders: ${[...leaders].join(", ")}; ${behind.name} is paused while the writer (on ${writerNode.name}) writes`);

const writerNc = await connectAs(writerNode.url, "actors");
const readerNc = await connectAs(cluster.url, "gateway");
t.teardown(async () => {
  await writerNc.close();
  await readerNc.close();
});
const writer = await ObjectContents.open(writerNc, buckets.fileContents);
const reader = await ObjectContents.open(readerNc, buckets.fileContents);
const writerKv = await openKv(writerNc, buckets.files, { history: 1 });
const readerKv = await openKv(readerNc, buckets.files, { history: 1 });

async function* bytesOf(data: Uint8Array): AsyncGenerator<Uint8Array> {
  for (let i = 0; i < data.length; i += 64 * 1024) yield data.subarray(i, i + 64 * 1024);
}

async function readAll(name: string): Promise<Buffer> {
  const parts: Uint8Array[] = [];
  for await (const chunk of reader.read(name)) parts.push(chunk);
  return Buffer.concat(parts);
}

const tooLarge = { maxBytes: OBJECT_BYTES, tooLarge: () => new Error("too large") };

t.test("objects and keys written while a replica was paused read back whole right after it resumes", async (t) => {
  t.equal(objects.config.num_replicas, 3, "the object store is replicated");
  t.equal(keys.config.num_replicas, 3, "the bucket is replicated");
  for (let round = 0; round < ROUNDS; round++) {
    const written: Array<{ name: string; sha256: string }> = [];
    behind.child.kill("SIGSTOP");
    try {
      for (let i = 0; i < OBJECTS_PER_ROUND; i++) {
        const name = `obj-${round}-${i}`;
        const data = Buffer.alloc(OBJECT_BYTES, (round * OBJECTS_PER_ROUND + i) % 251);
        data.writeUInt32BE(round * 1000 + i, 0);
        const stored = await writer.put(name, { project: "p" }, bytesOf(data), tooLarge);
        written.push({ name, sha256: createHash("sha256").update(data).digest("hex") });
        t.equal(stored.bytes, OBJECT_BYTES);
        await writerKv.put(`p.${name}`, JSON.stringify({ name }));
      }
    } finally {
      behind.child.kill("SIGCONT");
    }
    const reads = written.flatMap((w) => Array.from({ length: READS_PER_OBJECT }, () => w));
    const results = await Promise.all(
      reads.map(async (w) => {
        try {
          const info = await reader.info(w.name);
          const data = await readAll(w.name);
          return { w, info, sha256: createHash("sha256").update(data).digest("hex"), bytes: data.length };
        } catch (err) {
          return { w, error: String(err) };
        }
      }),
    );
    for (const r of results) {
      if ("error" in r) t.fail(`round ${round}: ${r.w.name}: ${r.error}`);
      else {
        t.equal(r.info?.sha256, r.w.sha256, `round ${round}: ${r.w.name}: its record, as written`);
        t.equal(r.bytes, OBJECT_BYTES, `round ${round}: ${r.w.name}: every byte`);
        t.equal(r.sha256, r.w.sha256, `round ${round}: ${r.w.name}: the bytes written`);
      }
    }
    const listings = await Promise.all(Array.from({ length: READS_PER_OBJECT }, () => reader.list("obj-")));
    const keyListings = await Promise.all(Array.from({ length: READS_PER_OBJECT }, () => listKeys(readerKv, "p.*", "p.")));
    for (const listed of listings) {
      const names = new Set(listed.map((o) => o.name));
      t.same(written.filter((w) => !names.has(w.name)).map((w) => w.name), [], `round ${round}: the object listing holds every object written`);
    }
    for (const keys of keyListings) {
      const names = new Set(keys);
      t.same(written.filter((w) => !names.has(w.name)).map((w) => w.name), [], `round ${round}: the key listing holds every key written`);
    }
  }
});
