import t from "tap";
import { jetstreamManager } from "@nats-io/jetstream";
import { listKeys, openKv } from "../../../lib/nats/jetstream.js";
import { buckets } from "../../../lib/nats/subjects.js";
import { startNats } from "../../harness/processes.js";

// Listing a KV bucket's keys while another process writes to it. nats.js's own listing (an
// ordered push consumer) waited for a 30 s idle heartbeat when a write raced it; every project
// listing (batches, files, jobs, sandboxes, ...) goes through listKeys. Here the lister is a
// gateway and the writer an actor host, each with its own identity, as in a deployment (the
// consumer a listing creates must be granted to the identity that lists).

const STABLE_KEYS = 300;
const ROUNDS = 40;
/** A hang bound, not a timing: a listing that raced a write used to take 30 s. */
const HANG_MS = 5_000;

const nats = await startNats();
t.teardown(() => nats.stop());
const gateway = await nats.connect("gateway");
const actors = await nats.connect("actors");
t.teardown(async () => {
  await gateway.close();
  await actors.close();
});

const writerKv = await openKv(actors, buckets.batches, { history: 1 });
const listerKv = await openKv(gateway, buckets.batches, { history: 1 });

const stable = Array.from({ length: STABLE_KEYS }, (_, i) => `stable-${String(i).padStart(4, "0")}`);
for (const id of stable) await writerKv.put(`proj-a.${id}`, JSON.stringify({ id }));

/**
 * Writes in a tight loop until stopped: keys created and deleted under the listed project, keys
 * of another project (past the end of the listed filter), all on one connection's stream of acks.
 */
function churn(): { stop: () => Promise<number> } {
  let running = true;
  let writes = 0;
  const done = (async () => {
    for (let i = 0; running; i++) {
      const key = `proj-a.churn-${i % 50}`;
      await writerKv.put(key, JSON.stringify({ i }));
      await writerKv.put(`proj-b.other-${i % 20}`, JSON.stringify({ i }));
      if (i % 3 === 0) await writerKv.delete(key);
      writes += i % 3 === 0 ? 3 : 2;
    }
  })();
  return {
    async stop() {
      running = false;
      await done;
      return writes;
    },
  };
}

function withinHangBound<T>(work: Promise<T>): Promise<T | "hung"> {
  let timer: NodeJS.Timeout | undefined;
  const hung = new Promise<"hung">((resolve) => (timer = setTimeout(() => resolve("hung"), HANG_MS)));
  return Promise.race([work, hung]).finally(() => clearTimeout(timer));
}

t.test("listings finish and hold every stable key while another identity writes in a tight loop", async (t) => {
  const writer = churn();
  let hangs = 0;
  let missing = 0;
  for (let round = 0; round < ROUNDS; round++) {
    const listed = await withinHangBound(listKeys(listerKv, "proj-a.*", "proj-a."));
    if (listed === "hung") {
      hangs++;
      break;
    }
    const set = new Set(listed);
    const absent = stable.filter((id) => !set.has(id));
    missing += absent.length;
    if (absent.length) t.fail(`round ${round}: ${absent.length} stable keys missing, e.g. ${absent.slice(0, 3).join(", ")}`);
    const strangers = listed.filter((id) => !id.startsWith("stable-") && !id.startsWith("churn-"));
    if (strangers.length) t.fail(`round ${round}: keys from outside the filter: ${strangers.slice(0, 3).join(", ")}`);
  }
  const writes = await writer.stop();
  t.equal(hangs, 0, `no listing took ${HANG_MS} ms or more`);
  t.equal(missing, 0, "no stable key was ever missing");
  t.ok(writes > ROUNDS, `the writer raced the listings (${writes} writes)`);
});

t.test("a quiet bucket lists exactly its live keys; deleted and purged keys are not listed", async (t) => {
  await writerKv.put("proj-q.one", "1");
  await writerKv.put("proj-q.two", "2");
  await writerKv.put("proj-q.three", "3");
  await writerKv.delete("proj-q.two");
  await writerKv.purge("proj-q.three");
  t.same((await listKeys(listerKv, "proj-q.*", "proj-q.")).sort(), ["one"]);
  t.same(await listKeys(listerKv, "proj-none.*"), [], "a filter nothing was written under lists nothing");
  t.equal((await listKeys(listerKv, "proj-a.*", "", { limit: 10 })).length, 10, "a limit stops the listing at that many keys");
});

t.test("a listing leaves no consumer behind", async (t) => {
  const jsm = await jetstreamManager(actors);
  const consumers = await jsm.consumers.list(`KV_${buckets.batches}`).next();
  t.same(consumers.map((c) => c.name), []);
});
