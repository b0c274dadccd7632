import t from "tap";
import { Bucket } from "@nats-io/kv";
import { openKv, readStored } from "../../../lib/nats/jetstream.js";
import { buckets } from "../../../lib/nats/subjects.js";
import { startNats } from "../../harness/processes.js";

// A listing whose pull loses its idle heartbeats (nats-server stalled past two heartbeat
// intervals: an overloaded or paused server) reads on from where it was instead of failing:
// nats.js ends such a pull with "heartbeats missed", and under a load average of ~10 that had
// failed whole listings (and so list requests).

const KEYS = 4_000;
/** Longer than two of a 1 s pull's 500 ms idle heartbeats: nats.js gives the pull up. */
const STALL_MS = 1_600;

const nats = await startNats();
t.teardown(() => nats.stop());
const writer = await nats.connect("actors");
const lister = await nats.connect("gateway");
t.teardown(async () => {
  await writer.close();
  await lister.close();
});

const writerKv = await openKv(writer, buckets.batches, { history: 1 });
const listerKv = await openKv(lister, buckets.batches, { history: 1 });
const expected = Array.from({ length: KEYS }, (_, i) => `batch-${String(i).padStart(5, "0")}`);
await Promise.all(Array.from({ length: 16 }, async (_, w) => {
  for (let i = w; i < KEYS; i += 16) await writerKv.put(`proj.${expected[i]}`, "{}");
}));

if (!(listerKv instanceof Bucket)) throw new Error("openKv returns a Bucket");
const bucket = listerKv;
const filter = bucket.fullKeyName(bucket.encodeKey("proj.*"));

for (const stallAfter of [1, 1_500]) {
  await t.test(`nats-server stalls ${STALL_MS} ms after the read had ${stallAfter} messages`, async (t) => {
    const pid = nats.child.pid!;
    let seen = 0;
    let stalled: Promise<void> | undefined;
    const keys: string[] = [];
    for await (const m of readStored(bucket, bucket.stream, filter, { headersOnly: true, prefetch: 256 })) {
      keys.push(m.subject.substring(bucket.prefixLen + "proj.".length));
      if (++seen !== stallAfter) continue;
      process.kill(pid, "SIGSTOP");
      stalled = new Promise((resolve) =>
        setTimeout(() => {
          process.kill(pid, "SIGCONT");
          resolve();
        }, STALL_MS),
      );
    }
    await stalled;
    t.ok(stalled, "the server was stalled mid-read");
    t.same(keys.sort(), expected, "every message read once");
  });
}
