import { compareAndSet, type CasTarget, type Modified } from "../../lib/nats/kv-records.js";

// One owner at a time for a piece of work several actor hosts could do (a rate-limit budget, the
// reconciler of app deployments): the owner is named in a KV record, and a host takes it over
// only when the named owner does not answer a probe (its process died or is cut off). The claim
// is a compare-and-set on the record, which fences the old owner: its own next compare-and-set
// on that record fails, and it steps down.

/** How a record names its owner, and what it becomes when claimed. */
export interface OwnedRecord<T> {
  ownerOf(value: T): string;
  /** The record once `me` claimed it: `current` with its owner replaced, or a fresh one when there is none. */
  claimedBy(current: T | undefined, me: string): T;
}

export type Claim<T> =
  /** `me` owns it now: the record as written, and who owned it before ("" for nobody, or me). */
  | { owned: Modified<T>; previousOwner: string }
  /** A live host owns it. */
  | { liveOwner: string }
  /** Nothing claimed: this host is stopping. */
  | { stopping: true };

/**
 * Makes `me` the owner of the record unless a live host owns it. A missing record is created
 * owned by `me`; one that names another owner is taken over when `ownerAlive(owner)` says no.
 */
export async function claimOwnership<T>(
  target: CasTarget<T>,
  me: string,
  record: OwnedRecord<T>,
  options: { where: string; attempts?: number; ownerAlive(owner: string): Promise<boolean>; stopping(): boolean },
): Promise<Claim<T>> {
  let liveOwner = "";
  let previousOwner = "";
  const claimed = await compareAndSet(
    target,
    async (current) => {
      previousOwner = current ? record.ownerOf(current) : "";
      if (!current) return record.claimedBy(undefined, me);
      if (options.stopping()) return undefined;
      const owner = record.ownerOf(current);
      if (owner && owner !== me && (await options.ownerAlive(owner))) {
        liveOwner = owner;
        return undefined;
      }
      liveOwner = "";
      return record.claimedBy(current, me);
    },
    { where: options.where, create: true, ...(options.attempts === undefined ? {} : { attempts: options.attempts }) },
  );
  if (claimed?.changed) return { owned: claimed, previousOwner };
  return liveOwner ? { liveOwner } : { stopping: true };
}
