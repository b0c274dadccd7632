import t from "tap";
import type { CasTarget, Versioned } from "../../lib/nats/kv-records.js";
import { actsUntil, claimOwnership, LeaseWatch, leaseLapsed, mayTakeOver, seeRevision, type LeaseTerms, type OwnerProbe } from "../../modules/actor-runtime/mod.js";
import { reconcilerLease } from "../../actors/apps/deployment-reconciler.js";

// One owner at a time under a partition: an owner that acts between its writes stops acting when
// its lease could have lapsed as the store's other clients see it, before any of them may take
// the record from it; a host that gets no answer from the owner waits out a whole term of an
// unchanged revision. Times are values here (monotonic ms of each side), nothing sleeps.

const terms: LeaseTerms = { ttlMs: 6_000, marginMs: 1_500 };

t.test("the owner's fence ends before a claimer may take over, however the renewal was timed", async (t) => {
  // The owner sends a renewal at 0 (its clock); the store applies it at some time after; a
  // claimer reads the new revision no earlier than that, and keeps it as the term's start.
  for (const appliedAfterMs of [0, 50, 800, 4_000])
    for (const readAfterMs of [0, 10, 900]) {
      const sentAt = 0;
      const seen = seeRevision(undefined, 7, sentAt + appliedAfterMs + readAfterMs);
      let firstLapse = seen.since;
      while (!leaseLapsed(terms, seen, firstLapse)) firstLapse += 10;
      t.ok(actsUntil(terms, sentAt) <= firstLapse - terms.marginMs, `applied after ${appliedAfterMs} ms, read after ${readAfterMs} ms`);
    }
});

t.test("a claimer counts the term from its first read of a revision; a renewal starts it again", async (t) => {
  const first = seeRevision(undefined, 3, 1_000);
  t.same(first, { revision: 3, since: 1_000 });
  t.equal(seeRevision(first, 3, 4_000), first, "the same revision read again keeps its start");
  t.same(seeRevision(first, 4, 4_000), { revision: 4, since: 4_000 }, "a new revision (a renewal) starts a new term");
  t.notOk(leaseLapsed(terms, first, 6_999));
  t.ok(leaseLapsed(terms, first, 7_000));
});

t.test("who may take a record over", async (t) => {
  const cases: Array<[OwnerProbe, "unleased" | "held" | "lapsed", boolean]> = [
    ["owns", "unleased", false],
    ["owns", "lapsed", false],
    ["disowns", "held", true],
    ["disowns", "unleased", true],
    ["silent", "unleased", true],
    ["silent", "held", false],
    ["silent", "lapsed", true],
  ];
  for (const [probe, lease, may] of cases) t.equal(mayTakeOver(probe, lease), may, `${probe}, ${lease}`);
});

t.test("the reconciler's term: six rounds, at least 3 s; it stops a quarter earlier", async (t) => {
  t.same(reconcilerLease(1_000), { ttlMs: 6_000, marginMs: 1_500 });
  t.same(reconcilerLease(250), { ttlMs: 3_000, marginMs: 750 });
});

/** One record with revisions, as the store keeps it (compare-and-set on the revision). */
function storedRecord(initial: { owner: string } | undefined): CasTarget<{ owner: string }> & { current: Versioned<{ owner: string }> | undefined } {
  const target = {
    current: initial === undefined ? undefined : { value: initial, revision: 1 },
    read: async () => (target.current ? { value: { ...target.current.value }, revision: target.current.revision } : undefined),
    write: async (value: { owner: string }, revision: number | undefined) => {
      if (revision !== target.current?.revision) return undefined;
      target.current = { value, revision: (revision ?? 0) + 1 };
      return target.current.revision;
    },
  };
  return target;
}

const owned = { ownerOf: (r: { owner: string }) => r.owner, claimedBy: (_: unknown, me: string) => ({ owner: me }) };

t.test("a silent owner of a leased record keeps it for a whole term of an unchanged revision", async (t) => {
  let now = 0;
  const watch = new LeaseWatch(terms, () => now);
  const record = storedRecord({ owner: "a" });
  const claim = () => claimOwnership(record, "b", owned, { where: "reconciler", probeOwner: async () => "silent", stopping: () => false, lease: watch });
  t.same(await claim(), { liveOwner: "a" }, "first seen: held");
  now = 5_999;
  t.same(await claim(), { liveOwner: "a" }, "still within the term");
  // The owner renewed meanwhile (it was only slow to answer): a new term.
  record.current = { value: { owner: "a" }, revision: 2 };
  now = 6_500;
  t.same(await claim(), { liveOwner: "a" }, "a renewal starts the term again");
  now = 12_500;
  const taken = await claim();
  t.ok("owned" in taken && taken.previousOwner === "a", "taken once a whole term passed without a renewal");
  t.equal(record.current?.value.owner, "b");
  t.equal(record.current?.revision, 3);
});

t.test("an owner that says it does not own the record gives it up at once; one that says it does keeps it", async (t) => {
  const watch = new LeaseWatch(terms, () => 0);
  const record = storedRecord({ owner: "a" });
  t.same(await claimOwnership(record, "b", owned, { where: "r", probeOwner: async () => "owns", stopping: () => false, lease: watch }), { liveOwner: "a" });
  const taken = await claimOwnership(record, "b", owned, { where: "r", probeOwner: async () => "disowns", stopping: () => false, lease: watch });
  t.ok("owned" in taken);
});

t.test("an owner whose term ended claims anew, by compare-and-set: not over a host that took it", async (t) => {
  const watch = new LeaseWatch(terms, () => 0);
  const record = storedRecord({ owner: "a" });
  // The partition healed; meanwhile b took the record over and answers that it owns it.
  record.current = { value: { owner: "b" }, revision: 5 };
  t.same(await claimOwnership(record, "a", owned, { where: "r", probeOwner: async () => "owns", stopping: () => false, lease: watch }), { liveOwner: "b" });
  // Nobody took it: the record still names a, which claims it again (a new revision).
  record.current = { value: { owner: "a" }, revision: 6 };
  const again = await claimOwnership(record, "a", owned, { where: "r", probeOwner: async () => "silent", stopping: () => false, lease: watch });
  t.ok("owned" in again && again.owned.revision === 7, "re-claimed at a new revision");
});

t.test("an unleased record (a budget: every grant is written first) is taken from a silent owner at once", async (t) => {
  const record = storedRecord({ owner: "a" });
  const taken = await claimOwnership(record, "b", owned, { where: "budget", probeOwner: async () => "silent", stopping: () => false });
  t.ok("owned" in taken && taken.previousOwner === "a");
  // The old owner's next write (a grant) is at the revision it knew: refused, so it answers nothing.
  t.equal(await record.write({ owner: "a" }, 1), undefined);
});
