import t from "tap";
import { listKeys, openKv } from "../../../lib/nats/jetstream.js";
import { MAX_SKIPPED_PER_PAGE, pageRecords, type PageQuery } from "../../../lib/nats/kv-records.js";
import { buckets } from "../../../lib/nats/subjects.js";
import { randomToken } from "../../../lib/ids.js";
import { startNats } from "../../harness/processes.js";

// pageRecords on a real nats-server: every page, in both orders, from every cursor, is exactly the
// page of the whole sorted list (the listing windows of a newest-first page change what is read,
// never what is answered), with records dated from a minute to ten days back (all written now:
// a record is never written before its id's time), one whose id carries no date, and ids of
// deleted records as cursors. A filtered listing stops after MAX_SKIPPED_PER_PAGE records it skips,
// with has_more and a cursor that goes on. A listing from a time reads only what was written since.

const nats = await startNats();
t.teardown(() => nats.stop());
const nc = await nats.connect("admin");
t.teardown(() => nc.close());
const kv = await openKv(nc, buckets.jobs, { history: 1 });

const ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
/** A sortable id (newSortableId's shape) minted at `ms`. */
function idAt(ms: number): string {
  let stamp = "";
  for (let i = 0, time = ms; i < 8; i++, time = Math.floor(time / 62)) stamp = ALPHABET[time % 62] + stamp;
  return "job_" + stamp + randomToken(16);
}

const now = Date.now();
const MIN = 60_000;
const ages = [1, 2, 5, 14, 20, 40, 70, 200, 1500, 3000, 2 * 1440, 6 * 1440, 10 * 1440, 10 * 1440 + 1];
const ids = ages.map((a) => idAt(now - a * MIN)).concat(["job_undated"]);
for (const id of ids) await kv.put(`p1.${id}`, JSON.stringify({ id }));
const gone = idAt(now - 30 * MIN);
await kv.put(`p1.${gone}`, JSON.stringify({ id: gone }));
await kv.delete(`p1.${gone}`);
// Keys below a record are not records.
await kv.put(`p1.${ids[0]}.part`, "{}");
const sorted = [...ids].sort();

const readId = async (id: string) => {
  const entry = await kv.get(`p1.${id}`);
  return entry && entry.operation === "PUT" ? (entry.json() as { id: string }).id : undefined;
};
function expected(query: PageQuery): { data: string[]; has_more: boolean } {
  const ordered = query.order === "desc" ? [...sorted].reverse() : sorted;
  const after = query.after;
  const rest = after === undefined ? ordered : ordered.filter((id) => (query.order === "desc" ? id < after : id > after));
  return { data: rest.slice(0, query.limit), has_more: rest.length > query.limit };
}

t.test("every page in both orders from every cursor is the page of the sorted list", async (t) => {
  for (const order of ["desc", "asc"] as const)
    for (const after of [undefined, ...ids, gone])
      for (const limit of [1, 3, 20]) {
        const query = { limit, order, after };
        const page = await pageRecords(kv, "p1", query, readId, { idPrefix: "job_", now });
        t.same(page, expected(query), `${order} limit ${limit} after ${after ?? "-"}`);
      }
});

t.test("walking the pages newest first, from a clock later than the records", async (t) => {
  const seen: string[] = [];
  let after: string | undefined;
  for (;;) {
    const page = await pageRecords(kv, "p1", { limit: 4, order: "desc", after }, readId, { idPrefix: "job_", now: now + 3 * 1440 * MIN });
    seen.push(...page.data);
    if (!page.has_more) break;
    after = page.data.at(-1);
  }
  t.same(seen, [...sorted].reverse());
});

t.test("a filtered listing stops after skipping its bound and goes on from its cursor", async (t) => {
  const many = Array.from({ length: MAX_SKIPPED_PER_PAGE + 50 }, (_, i) => idAt(now - (MAX_SKIPPED_PER_PAGE + 50 - i) * 1000));
  await Promise.all(many.map((id) => kv.put(`p2.${id}`, JSON.stringify({ id }))));
  // Only the oldest and the newest match.
  const wanted = new Set([many[0]!, many.at(-1)!]);
  const read = async (id: string) => (wanted.has(id) ? id : undefined);
  const first = await pageRecords(kv, "p2", { limit: 10, order: "desc" }, read, { idPrefix: "job_" });
  t.same(first.data, [many.at(-1)], "the newest match");
  t.equal(first.has_more, true, "more may follow");
  t.equal(first.cursor, many.at(-1 - MAX_SKIPPED_PER_PAGE), "the cursor: the last record read");
  const second = await pageRecords(kv, "p2", { limit: 10, order: "desc", after: first.cursor }, read, { idPrefix: "job_" });
  t.same([second.data, second.has_more, second.cursor], [[many[0]], false, undefined], "then the oldest, and the end");
  const unfiltered = await pageRecords(kv, "p2", { limit: 10, order: "asc" }, async (id) => id, { idPrefix: "job_" });
  t.same([unfiltered.data, unfiltered.has_more], [many.slice(0, 10), true], "an unfiltered page reads only its own");
});

t.test("a listing from a time reads only the keys written since", async (t) => {
  await Promise.all(Array.from({ length: 200 }, (_, i) => kv.put(`p3.old${i}`, "{}")));
  // The server's clock stamps the messages: a gap on both sides of the mark keeps it clear of them.
  await new Promise((r) => setTimeout(r, 1100));
  const mark = Date.now();
  await new Promise((r) => setTimeout(r, 1100));
  await kv.put("p3.new1", "{}");
  await kv.put("p3.old7", "{}");
  t.same((await listKeys(kv, "p3.*", "p3.", { writtenSince: mark })).sort(), ["new1", "old7"], "the new key and the one rewritten");
  t.equal((await listKeys(kv, "p3.*", "p3.")).length, 201, "all of them without");
});
