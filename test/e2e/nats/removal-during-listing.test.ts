import t from "tap";
import { FileStore, type FileObject } from "../../../modules/files/mod.js";
import { ObjectContents } from "../../../lib/nats/object-contents.js";
import { buckets } from "../../../lib/nats/subjects.js";
import { startNats } from "../../harness/processes.js";

// Listings that run while other records of the same listing are removed. On nats-server before
// 2.9.12 a subject purge (a KV purge; an Object Store write or delete, which roll up their
// record) moved every consumer whose filter covers the subject to the purge's own message, past
// the messages of other subjects it had not delivered yet (nats-io/nats-server#3838): a file
// listing during the deletion of another file of the project came back without files. Here files
// of a project come and go while its files, and the objects of their contents, are listed; every
// file that stays must be in every listing, whichever operation the removals use.

/** Files that stay; enough that a listing pulls them in several batches (listKeys reads 256 a pull). */
const STAYING = 800;
/** Listings per test, in turn ascending and descending (a descending page lists several windows). */
const LISTINGS = 8;
const PROJECT = "proj-listing";
/** Uploads in flight while the staying files are set up. */
const PARALLEL_UPLOADS = 32;

const nats = await startNats();
t.teardown(() => nats.stop());
const nc = await nats.connect("admin");
t.teardown(() => nc.close());
const store = await FileStore.open(nc);

async function upload(name: string): Promise<FileObject> {
  return store.upload({ project: PROJECT, maxBytes: 1024, describe: () => ({ filename: name, purpose: "user_data", expiresAt: null }) }, (async function* () {
    yield Buffer.from(name);
  })());
}

/**
 * Runs `listing` while other files of the project come and go: uploaded, then deleted, one after
 * another from the start of the listing to its end. The listing's result, the ids of the files
 * that came and went, and how many deletions ran during the listing.
 */
async function listWhileDeleting<T>(listing: () => Promise<T>): Promise<{ listed: T; transient: Set<string>; deletedMeanwhile: number }> {
  let running = true;
  let deletedMeanwhile = 0;
  const transient = new Set<string>();
  const churn = (async () => {
    while (running) {
      const file = await upload(`transient-${transient.size}`);
      transient.add(file.id);
      await store.delete(PROJECT, file.id);
      if (running) deletedMeanwhile++;
    }
  })();
  try {
    const listed = await listing();
    return { listed, transient, deletedMeanwhile };
  } finally {
    running = false;
    await churn;
  }
}

const stayingIds: string[] = [];
for (let i = 0; i < STAYING; i += PARALLEL_UPLOADS)
  stayingIds.push(...(await Promise.all(Array.from({ length: Math.min(PARALLEL_UPLOADS, STAYING - i) }, (_, j) => upload(`staying-${i + j}`)))).map((f) => f.id));
stayingIds.sort();

t.test("a project's file listing holds every file while other files of the project are deleted", async (t) => {
  let missing = 0;
  for (let i = 0; i < LISTINGS; i++) {
    const order = i % 2 === 0 ? "asc" : "desc";
    const run = await listWhileDeleting(() => store.list(PROJECT, { limit: 10_000, order }));
    const listed = run.listed.data.map((f) => f.id);
    const absent = stayingIds.filter((id) => !listed.includes(id));
    missing += absent.length;
    if (absent.length) t.fail(`listing ${i} (${order}): ${absent.length} of ${STAYING} files missing while ${run.deletedMeanwhile} others were deleted`);
    t.same(listed.filter((id) => !stayingIds.includes(id) && !run.transient.has(id)), [], `listing ${i} (${order}): only files of the project`);
    t.equal(run.listed.has_more, false);
    t.ok(run.deletedMeanwhile > 0, `listing ${i} (${order}): deletions raced it (${run.deletedMeanwhile})`);
  }
  t.equal(missing, 0, "no staying file was ever missing from a listing");
  const quiet = await store.list(PROJECT, { limit: 10_000, order: "asc" });
  t.same(quiet.data.map((f) => f.id), stayingIds, "a quiet listing holds exactly the staying files");
});

t.test("the listing of stored objects holds every object while other objects are removed", async (t) => {
  // The files' contents, listed as the sweeper lists them (orphan objects, orphan chunks). Each
  // removal rolls up the object's record (the Object Store's delete), then purges it.
  const contents = await ObjectContents.open(nc, buckets.fileContents);
  let missing = 0;
  for (let i = 0; i < LISTINGS; i++) {
    const run = await listWhileDeleting(() => contents.list());
    const listed = new Set(run.listed.map((o) => o.name));
    const absent = stayingIds.filter((id) => !listed.has(id));
    missing += absent.length;
    if (absent.length) t.fail(`listing ${i}: ${absent.length} of ${STAYING} objects missing while ${run.deletedMeanwhile} others were removed`);
    t.ok(run.deletedMeanwhile > 0, `listing ${i}: removals raced it (${run.deletedMeanwhile})`);
  }
  t.equal(missing, 0, "no staying object was ever missing from a listing");
});
