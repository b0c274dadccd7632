import * as Schema from "effect/Schema";
import type { KV } from "@nats-io/kv";
import { listKeys } from "./jetstream.js";
import { compareAndSet, kvRecord, live, valueSchema, type Mutable } from "./kv-records.js";

// A bound on how many records of a kind an owner (a project, an organization) may create, kept
// exact under parallel creates by one small counter record per owner, changed only by
// compare-and-set. Counting the records before writing one lets two creates at the limit both
// pass; admitting through the counter cannot. A create takes a pending slot (admit), writes its
// record, then turns the slot into a count (settle). A process that dies in between leaves a
// pending slot behind: past a grace period it is checked against the record (`written`) and
// counted or dropped, when the bound is reached, so a crash never leaks a slot for good.
//
// Records that can be deleted (a project's secrets) are not uncounted when they go: a delete that
// told the counter could die between the two writes and leave it wrong for good. Such a bound
// (`recount`) counts its records again instead whenever the counter says the bound is reached, so
// the counter may run high between deletes and the bound, never low at it, and a delete costs
// nothing. Ids may repeat (a caller-chosen project id, a secret's name): each admission is a slot
// of its own, and a create that finds its record there already settles as not written.

const AdmissionSchema = Schema.Struct({
  /** Records written, by the start of the hour they were admitted in (0 for bounds without a window). */
  counts: Schema.mutable(Schema.Array(Schema.Struct({ at: Schema.Number, n: Schema.Number }))),
  /** Admitted creates whose records are not known to be written yet (ms since the epoch). */
  pending: Schema.mutable(Schema.Array(Schema.Struct({ id: Schema.String, since: Schema.Number }))),
});
export type AdmissionRecord = Mutable<typeof AdmissionSchema.Type>;
export const admissionRecord = valueSchema<AdmissionRecord>()(AdmissionSchema);

const HOUR_MS = 3600_000;
/** A pending slot this old belongs to a create that died (or that failed to settle). */
export const ADMISSION_GRACE_MS = 120_000;
/** Compare-and-set attempts on the counter: a burst of creates in one project all write it, twice each. */
const CAS_ATTEMPTS = 100;

export interface AdmittedRecord {
  id: string;
  /** When it was created (ms since the epoch; any number for bounds without a window). */
  at: number;
}

export interface AdmissionBound {
  kv: KV;
  /** The counter's KV key (outside the listings of the records it counts). */
  key: string;
  max: number;
  /** Records count this long after their admission, then lapse (records that expire); absent: forever. */
  windowMs?: number;
  /** Whether the record admitted as `id` exists (asked of pending slots past the grace, and after a write that threw). */
  written: (id: string) => Promise<boolean>;
  /**
   * The records present (id, creation time in ms): read when the counter is first made (records
   * written before it existed) and, with `recount`, whenever the counter says the bound is reached.
   */
  existing: () => Promise<AdmittedRecord[]>;
  /**
   * The records can be deleted without the counter being told, or ids can repeat: recount them at
   * the bound (see the file's comment). Without it a stale slot is settled by `written(id)` alone,
   * which only unique ids answer exactly.
   */
  recount?: boolean;
  now?: () => number;
}

/** Admissions into one bound (see the file's comment). */
export class Admission {
  constructor(private readonly bound: AdmissionBound) {}

  private target() {
    return kvRecord(this.bound.kv, this.bound.key, admissionRecord);
  }

  private get upsert() {
    return { where: this.bound.key, create: true, attempts: CAS_ATTEMPTS };
  }

  private now(): number {
    return (this.bound.now ?? Date.now)();
  }

  private slotOf(ms: number): number {
    return this.bound.windowMs === undefined ? 0 : ms - (ms % HOUR_MS);
  }

  private count(record: AdmissionRecord, at: number, n = 1): void {
    const slot = this.slotOf(at);
    const found = record.counts.find((c) => c.at === slot);
    if (found) found.n += n;
    else record.counts.push({ at: slot, n });
  }

  /** How many records the counter holds now (written and pending), after dropping lapsed hours. */
  private held(record: AdmissionRecord, now: number): number {
    const windowMs = this.bound.windowMs;
    if (windowMs !== undefined) record.counts = record.counts.filter((c) => c.at + HOUR_MS + windowMs > now);
    return record.counts.reduce((sum, c) => sum + c.n, 0) + record.pending.length;
  }

  /** Counts the pending slots past the grace whose records exist, drops the others. */
  private async resolveStale(record: AdmissionRecord, now: number): Promise<boolean> {
    const stale = record.pending.filter((p) => now - p.since > ADMISSION_GRACE_MS);
    if (stale.length === 0) return false;
    const written = await Promise.all(stale.map((p) => this.bound.written(p.id)));
    stale.forEach((p, i) => written[i] && this.count(record, p.since));
    const resolved = new Set(stale.map((p) => p.id));
    record.pending = record.pending.filter((p) => !resolved.has(p.id));
    return true;
  }

  /**
   * Counts the records present again (`recount` bounds): pending creates whose records are among
   * them are counted with them (their settle then finds no slot), stale ones whose records are not
   * were lost. Records deleted while listing still count: high, never low. Whether it changed.
   */
  private async recount(record: AdmissionRecord, now: number): Promise<boolean> {
    const canonical = (r: AdmissionRecord) => JSON.stringify([[...r.counts].sort((a, b) => a.at - b.at), r.pending]);
    const before = canonical(record);
    const present = await this.bound.existing();
    const listed = new Set(present.map((r) => r.id));
    record.pending = record.pending.filter((p) => !listed.has(p.id) && now - p.since <= ADMISSION_GRACE_MS);
    record.counts = [];
    for (const r of present) this.count(record, r.at);
    this.held(record, now);
    return canonical(record) !== before;
  }

  /**
   * Takes a slot for the record `id` unless the bound is reached (compare-and-set: of creates
   * racing for the last slot exactly one gets it). `held` is what the counter held when it refused
   * or admitted. An admitted create must `settle` once its record is written (or failed).
   */
  async admit(id: string): Promise<{ admitted: boolean; held: number }> {
    let held = 0;
    let admitted = false;
    const result = await compareAndSet(this.target(), async (current) => {
      admitted = false;
      const now = this.now();
      const record = current ?? (await this.initial());
      held = this.held(record, now);
      if (held >= this.bound.max) {
        const learned = this.bound.recount ? await this.recount(record, now) : await this.resolveStale(record, now);
        held = this.held(record, now);
        // Refused; what was learned (a new counter, stale slots resolved, a recount) is stored all the same.
        if (held >= this.bound.max) return current && !learned ? undefined : record;
      }
      record.pending.push({ id, since: now });
      admitted = true;
      return record;
    }, this.upsert);
    return { admitted: admitted && result?.changed === true, held };
  }

  /** The admitted create of `id` ended: its record was `written` (counted), or not (the slot is freed). */
  async settle(id: string, written: boolean): Promise<void> {
    await compareAndSet(this.target(), (record) => {
      // Of slots with the same id (creates of one caller-chosen id), any one: they are alike.
      const slot = record!.pending.find((p) => p.id === id);
      // Gone: it was resolved as stale or recounted meanwhile (counted if its record was there).
      if (!slot) return undefined;
      record!.pending = record!.pending.filter((p) => p !== slot);
      if (written) this.count(record!, slot.since);
      return record;
    }, { where: this.bound.key, attempts: CAS_ATTEMPTS });
  }

  /** Counts a record written without admission (no bound applies to it). */
  async add(): Promise<void> {
    await compareAndSet(this.target(), async (current) => {
      // A new counter starts from the records present, this one among them.
      if (!current) return this.initial();
      this.count(current, this.now());
      return current;
    }, this.upsert);
  }

  private async initial(): Promise<AdmissionRecord> {
    const record: AdmissionRecord = { counts: [], pending: [] };
    for (const r of await this.bound.existing()) this.count(record, r.at);
    return record;
  }

  /**
   * Runs `write` (which writes the record `id`) inside an admission: `admitted: false` when the
   * bound is reached (`held` says how many the counter holds), else what `write` returned.
   * `stored` tells from that whether the record was written (default: it was); a create-only write
   * that found the record there already (a repeated id) returns "not written", and takes no place.
   */
  async within<T>(id: string, write: () => Promise<T>, stored: (value: T) => boolean = () => true): Promise<{ admitted: true; value: T } | { admitted: false; held: number }> {
    const { admitted, held } = await this.admit(id);
    if (!admitted) return { admitted: false, held };
    let value: T;
    try {
      value = await write();
    } catch (err) {
      // A write that failed may still have stored the record (a later step failed): ask.
      await this.bound.written(id).then((written) => this.settle(id, written)).catch(() => undefined);
      throw err;
    }
    // A settle that fails leaves the slot pending: resolved against the record past the grace.
    await this.settle(id, stored(value)).catch(() => undefined);
    return { admitted: true, value };
  }
}

/**
 * The bound over the records `<prefix><id>` of one bucket (a project's jobs, its secrets), with
 * its counter beside them at `<prefix>index.admitted` (one token more than the records, so
 * outside the listing of `<prefix>*`). `createdAt` dates a listed record for bounds with a window.
 */
export function prefixAdmission(
  kv: KV,
  prefix: string,
  max: number,
  options: { windowMs?: number; recount?: boolean; createdAt?: (id: string) => number } = {},
): Admission {
  return new Admission({
    kv,
    key: `${prefix}index.admitted`,
    max,
    ...(options.windowMs === undefined ? {} : { windowMs: options.windowMs }),
    ...(options.recount === undefined ? {} : { recount: options.recount }),
    written: async (id) => live(await kv.get(prefix + id)) !== undefined,
    existing: async () => (await listKeys(kv, `${prefix}*`, prefix)).map((id) => ({ id, at: options.createdAt?.(id) ?? 0 })),
  });
}
