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
 * Writes in tight loops until stopped, several in flight at once (as the actor hosts and gateways
 * of a deployment write): keys created and deleted under the listed project (a batch created and
 * deleted, a sandbox come and gone), and keys of another project (past the end of the listed
 * filter). nats.js's listing followed such writes for as long as they came.
 */
function churn(writers = 4): { stop: () => Promise<number> } {
  let running = true;
  let writes = 0;
  const loops = Array.from({ length: writers }, async (_, w) => {
    for (let i = 0; running; i++) {
      const key = `proj-a.churn-${w}-${i % 5}`;
      await writerKv.put(key, JSON.stringify({ i }));
      await writerKv.delete(key);
      await writerKv.put(`proj-b.other-${w}-${i % 5}`, JSON.stringify({ i }));
      writes += 3;
    }
  });
  return {
    async stop() {
      running = false;
      await Promise.all(loops);
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

  // A bucket that keeps history: a key is listed once however many revisions it has, and not
  // when its newest revision deletes it.
  const history = await openKv(actors, buckets.accounts, { history: 5 });
  const historyLister = await openKv(gateway, buckets.accounts, { history: 5 });
  for (let i = 0; i < 3; i++) await history.put("org.kept", String(i));
  await history.put("org.gone", "1");
  await history.put("org.gone", "2");
  await history.delete("org.gone");
  t.same(await listKeys(historyLister, "org.*", "org."), ["kept"]);
});

t.test("a listing leaves no consumer behind", async (t) => {
  const jsm = await jetstreamManager(actors);
  const consumers = await jsm.consumers.list(`KV_${buckets.batches}`).next();
  t.same(consumers.map((c) => c.name), []);
});
