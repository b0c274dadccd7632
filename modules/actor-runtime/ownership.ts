import { compareAndSet, type CasTarget, type Modified } from "../../lib/nats/kv-records.js";

// One owner at a time for a piece of work several actor hosts could do (a rate-limit budget, the
// reconciler of app deployments): the owner is named in a KV record, and a host takes it over
// only when the named owner does not say it owns it (its process died or is cut off). The claim
// is a compare-and-set on the record, which fences the old owner: its own next compare-and-set
// on that record fails, and it steps down.
//
// That fence is enough for an owner that writes the record before each act takes effect (a
// budget answers a grant only once the state counting it is stored). An owner that acts between
// writes (the reconciler places instances; a KV read of a minority node can still name it) holds
// the record as a lease besides: it renews it by compare-and-set, stops acting when the lease
// could have lapsed as another host sees it (LeaseTerms), and acts again only after claiming anew.
// A host that gets no answer from such an owner takes over only once the record has stood
// unrenewed for a whole term as it measured it.

/** How a record names its owner, and what it becomes when claimed. */
export interface OwnedRecord<T> {
  ownerOf(value: T): string;
  /** The record once `me` claimed it: `current` with its owner replaced, or a fresh one when there is none. */
  claimedBy(current: T | undefined, me: string): T;
}

export type Claim<T> =
  /** `me` owns it now: the record as written, and who owned it before ("" for nobody, or me). */
  | { owned: Modified<T>; previousOwner: string }
  /** A live host owns it (it said so, or its lease has not lapsed yet as seen from here). */
  | { liveOwner: string }
  /** Nothing claimed: this host is stopping. */
  | { stopping: true };

/** What the recorded owner answered to "do you own it?": yes, no, or nothing in time (dead or cut off). */
export type OwnerProbe = "owns" | "disowns" | "silent";

/** A lease's term, as each side measures it on its own monotonic clock. */
export interface LeaseTerms {
  /** A record unrenewed this long (as a claimer saw it) may be taken from a silent owner. */
  readonly ttlMs: number;
  /** The owner stops acting this much before its term could end: scheduling delays, clock-rate drift. */
  readonly marginMs: number;
}

/**
 * Until when an owner may act (monotonic ms): its last successful renewal's term, counted from
 * when that write was sent (the store applied it no earlier, so no claimer saw it earlier), less
 * the margin.
 */
export const actsUntil = (terms: LeaseTerms, renewalSentAt: number): number => renewalSentAt + terms.ttlMs - terms.marginMs;

/** A record's revision as a claimer saw it: which one, and since when (its monotonic ms). */
export interface SeenRevision {
  readonly revision: number;
  readonly since: number;
}

/** What a claimer knows after reading `revision` at `now`: a new revision starts a new term. */
export const seeRevision = (previous: SeenRevision | undefined, revision: number, now: number): SeenRevision =>
  previous?.revision === revision ? previous : { revision, since: now };

/** The record has stood unrenewed for a whole term since this claimer first saw its revision. */
export const leaseLapsed = (terms: LeaseTerms, seen: SeenRevision, now: number): boolean => now - seen.since >= terms.ttlMs;

/**
 * Whether a host may take the record from its named owner (another host): not while the owner
 * says it owns it; at once when it says it does not; when it is silent, at once for an unleased
 * record (the compare-and-set fences it), and for a leased one only once its lease has lapsed.
 */
export function mayTakeOver(probe: OwnerProbe, lease: "unleased" | "held" | "lapsed"): boolean {
  if (probe === "owns") return false;
  if (probe === "disowns") return true;
  return lease !== "held";
}

/** A claimer's view of a leased record across its attempts: the revision it saw and since when. */
export class LeaseWatch {
  private seen: SeenRevision | undefined;

  constructor(readonly terms: LeaseTerms, private readonly now: () => number = () => performance.now()) {}

  /** Reads `revision` now: "lapsed" when it has stood unrenewed for a whole term, else "held". */
  observe(revision: number): "held" | "lapsed" {
    const now = this.now();
    this.seen = seeRevision(this.seen, revision, now);
    return leaseLapsed(this.terms, this.seen, now) ? "lapsed" : "held";
  }
}

/**
 * Makes `me` the owner of the record unless a live host owns it. A missing record is created
 * owned by `me`; one that names no owner, or `me`, is claimed (by compare-and-set, so a record
 * taken meanwhile is not); one that names another is taken over when mayTakeOver says so, `lease`
 * telling whether its term has lapsed as this host saw it.
 */
export async function claimOwnership<T>(
  target: CasTarget<T>,
  me: string,
  record: OwnedRecord<T>,
  options: { where: string; attempts?: number; probeOwner(owner: string): Promise<OwnerProbe>; stopping(): boolean; lease?: LeaseWatch },
): Promise<Claim<T>> {
  let liveOwner = "";
  let previousOwner = "";
  let readRevision = 0;
  const reading: CasTarget<T> = {
    read: async () => {
      const current = await target.read();
      readRevision = current?.revision ?? 0;
      return current;
    },
    write: (value, revision) => target.write(value, revision),
  };
  const claimed = await compareAndSet(
    reading,
    async (current) => {
      previousOwner = current ? record.ownerOf(current) : "";
      if (!current) return record.claimedBy(undefined, me);
      if (options.stopping()) return undefined;
      const owner = record.ownerOf(current);
      if (owner && owner !== me) {
        // Observed before the probe: the term is counted from the first read of this revision.
        const lease = options.lease ? options.lease.observe(readRevision) : "unleased";
        if (!mayTakeOver(await options.probeOwner(owner), lease)) {
          liveOwner = owner;
          return undefined;
        }
      }
      liveOwner = "";
      return record.claimedBy(current, me);
    },
    { where: options.where, create: true, ...(options.attempts === undefined ? {} : { attempts: options.attempts }) },
  );
  if (claimed?.changed) return { owned: claimed, previousOwner };
  return liveOwner ? { liveOwner } : { stopping: true };
}
