import t from "tap";
import { openKv } from "../../../lib/nats/jetstream.js";
import { Admission, ADMISSION_GRACE_MS } from "../../../lib/nats/admission.js";
import { buckets } from "../../../lib/nats/subjects.js";
import { startNats } from "../../harness/processes.js";

// The admission counter behind the job and API key bounds (lib/nats/admission.ts), on a real
// nats-server with an injected clock: admissions lapse after the window, a stale pending slot
// whose record was written is counted (not freed), a counter made anew starts from the records
// present, a write that fails frees its slot unless its record was stored, and a burst of creates
// on one counter neither gives up (compare-and-set with random pauses) nor overshoots.

const nats = await startNats();
t.teardown(() => nats.stop());
const nc = await nats.connect("admin");
t.teardown(() => nc.close());
const kv = await openKv(nc, buckets.jobs, { history: 1 });
const DAY = 24 * 3600_000;
const written = new Set<string>();
const bound = (key: string, now: number, options: { windowMs?: number; existing?: number[] } = {}) =>
  new Admission({ kv, key, max: 2, now: () => now, written: async (id) => written.has(id), existing: async () => (options.existing ?? []).map((at, i) => ({ id: `present${i}`, at })), ...(options.windowMs !== undefined ? { windowMs: options.windowMs } : {}) });

t.test("admissions lapse after the window, by the hour they were made in", async (t) => {
  const now = Date.now();
  const old = bound("p1.index.admitted", now - 8 * DAY, { windowMs: 7 * DAY });
  for (const id of ["a", "b"]) {
    t.ok((await old.admit(id)).admitted, `${id}: admitted 8 days ago`);
    await old.settle(id, true);
  }
  t.same(await old.admit("c"), { admitted: false, held: 2 }, "refused at the bound then");
  // Counted until the window has passed since the end of their hour.
  const hourStart = now - 8 * DAY - ((now - 8 * DAY) % 3600_000);
  const lapse = hourStart + 3600_000 + 7 * DAY;
  t.same(await bound("p1.index.admitted", lapse - 1, { windowMs: 7 * DAY }).admit("c"), { admitted: false, held: 2 }, "counted 1 ms before they lapse");
  t.same(await bound("p1.index.admitted", lapse, { windowMs: 7 * DAY }).admit("c"), { admitted: true, held: 0 }, "lapsed at the end of the window");
});

t.test("a stale slot whose record was written counts; one whose record was not is freed", async (t) => {
  const past = bound("p2.index.admitted", Date.now() - ADMISSION_GRACE_MS - 1000);
  t.ok((await past.admit("stored")).admitted);
  t.ok((await past.admit("lost")).admitted);
  written.add("stored");
  const now = bound("p2.index.admitted", Date.now());
  t.same(await now.admit("next"), { admitted: true, held: 1 }, "the lost one's slot is free, the stored one counted");
  t.same(await now.admit("more"), { admitted: false, held: 2 }, "then the bound holds");
});

t.test("a new counter starts from the records present", async (t) => {
  t.same(await bound("p3.index.admitted", Date.now(), { existing: [1, 2] }).admit("x"), { admitted: false, held: 2 }, "two present: full");
  t.same(await bound("p4.index.admitted", Date.now(), { existing: [1] }).admit("x"), { admitted: true, held: 1 }, "one present: one more");
});

t.test("a failed write frees its slot unless its record was stored", async (t) => {
  const b = bound("p5.index.admitted", Date.now());
  await t.rejects(b.within("failed", async () => Promise.reject(new Error("write failed"))));
  written.add("half");
  await t.rejects(b.within("half", async () => Promise.reject(new Error("queue publish failed"))));
  t.same(await b.within("ok", async () => "done"), { admitted: true, value: "done" }, "one slot was free");
  t.same(await b.within("over", async () => "never"), { admitted: false, held: 2 }, "the half-written one counts");
});

t.test("a burst of 120 creates from 4 connections: no create gives up, exactly the bound is admitted", async (t) => {
  const connections = await Promise.all(Array.from({ length: 4 }, () => nats.connect("admin")));
  t.teardown(() => Promise.all(connections.map((c) => c.close())));
  const kvs = await Promise.all(connections.map((c) => openKv(c, buckets.jobs, { history: 1 })));
  const results = await Promise.all(
    Array.from({ length: 120 }, (_, i) =>
      new Admission({ kv: kvs[i % 4]!, key: "p6.index.admitted", max: 50, written: async () => true, existing: async () => [] }).within(`burst${i}`, async () => i),
    ),
  );
  t.equal(results.filter((r) => r.admitted).length, 50, "50 admitted, none failed");
  const again = await new Admission({ kv, key: "p6.index.admitted", max: 50, written: async () => true, existing: async () => [] }).admit("one more");
  t.same(again, { admitted: false, held: 50 }, "all settled as counts");
});

// Bounds whose records can be deleted without the counter being told, or whose ids can repeat
// (secrets by name, projects by a caller-chosen id), recount their records at the bound.
const recounting = (key: string, present: Set<string>, max = 2) =>
  new Admission({ kv, key, max, recount: true, written: async (id) => present.has(id), existing: async () => [...present].map((id) => ({ id, at: 0 })) });
const revisionOf = async (key: string) => (await kv.get(key))?.revision;

t.test("a recount bound: deleted records free their places at the bound, and nothing is counted twice", async (t) => {
  const present = new Set<string>();
  const b = recounting("p7.index.admitted", present);
  for (const id of ["a", "b"]) {
    t.same(await b.within(id, async () => present.add(id)), { admitted: true, value: present }, `${id}: made`);
  }
  const full = await revisionOf("p7.index.admitted");
  t.same(await b.admit("c"), { admitted: false, held: 2 }, "full");
  t.equal(await revisionOf("p7.index.admitted"), full, "a refusal that learned nothing writes nothing");
  present.delete("a");
  t.same(await b.admit("c"), { admitted: true, held: 1 }, "a deleted, the counter not told: recounted at the bound, c admitted");
  // c's record is written but c has not settled when the next create finds the bound reached:
  // the recount counts c by its record and drops its slot, so c's settle counts nothing more.
  present.add("c");
  t.same(await b.admit("d"), { admitted: false, held: 2 }, "b and c: full");
  await b.settle("c", true);
  present.delete("b");
  t.same(await b.admit("d"), { admitted: true, held: 1 }, "b deleted: c was counted once");
});

t.test("a repeated id: each admission a slot of its own, only the one that wrote counts", async (t) => {
  const present = new Set<string>();
  const b = recounting("p8.index.admitted", present, 3);
  const writes = await Promise.all([1, 2].map(() => b.within("same", async () => (present.has("same") ? undefined : present.add("same")), (v) => v !== undefined)));
  t.same(writes.map((w) => w.admitted), [true, true], "both admitted: there was room");
  t.same(await b.admit("other"), { admitted: true, held: 1 }, "the repeat took no place");
  t.same(await b.admit("more"), { admitted: true, held: 2 });
  t.same(await b.admit("too many"), { admitted: false, held: 3 });
});
