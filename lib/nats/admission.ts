import { Schema } from "effect";
import type { KV } from "@nats-io/kv";
import { compareAndSet, kvRecord, valueSchema, type Mutable } from "./kv-records.js";

// A bound on how many records of a kind an owner (a project, an organization) may create, kept
// exact under parallel creates by one small counter record per owner, changed only by
// compare-and-set. Counting the records before writing one lets two creates at the limit both
// pass; admitting through the counter cannot. A create takes a pending slot (admit), writes its
// record, then turns the slot into a count (settle). A process that dies in between leaves a
// pending slot behind: past a grace period it is checked against the record (`written`) and
// counted or dropped, when the bound is reached, so a crash never leaks a slot for good.

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

export interface AdmissionBound {
  kv: KV;
  /** The counter's KV key (outside the listings of the records it counts). */
  key: string;
  max: number;
  /** Records count this long after their admission, then lapse (records that expire); absent: forever. */
  windowMs?: number;
  /** Whether the record admitted as `id` exists (asked only of pending slots past the grace). */
  written: (id: string) => Promise<boolean>;
  /** Creation times (ms) of the records present when the counter is first made (written before it existed). */
  existing: () => Promise<number[]>;
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
   * Takes a slot for the record `id` unless the bound is reached (compare-and-set: of creates
   * racing for the last slot exactly one gets it). `held` is what the counter held when it refused
   * or admitted. An admitted create must `settle` once its record is written (or failed).
   */
  async admit(id: string): Promise<{ admitted: boolean; held: number }> {
    let held = 0;
    const result = await compareAndSet(this.target(), async (current) => {
      const now = this.now();
      const record = current ?? (await this.initial());
      held = this.held(record, now);
      if (held >= this.bound.max) {
        const resolved = await this.resolveStale(record, now);
        held = this.held(record, now);
        // Refused; what was learned (a new counter, stale slots resolved) is stored all the same.
        if (held >= this.bound.max) return current && !resolved ? undefined : record;
      }
      if (record.pending.some((p) => p.id === id)) return undefined;
      record.pending.push({ id, since: now });
      return record;
    }, this.upsert);
    const admitted = result?.changed === true && result.value.pending.some((p) => p.id === id);
    return { admitted, held };
  }

  /** The admitted create of `id` ended: its record was `written` (counted), or not (the slot is freed). */
  async settle(id: string, written: boolean): Promise<void> {
    await compareAndSet(this.target(), (record) => {
      const slot = record!.pending.find((p) => p.id === id);
      // Gone: it was resolved as stale meanwhile (counted if its record was there).
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
    for (const at of await this.bound.existing()) this.count(record, at);
    return record;
  }

  /**
   * Runs `write` (which writes the record `id`) inside an admission: `admitted: false` when the
   * bound is reached (`held` says how many the counter holds), else what `write` returned.
   */
  async within<T>(id: string, write: () => Promise<T>): Promise<{ admitted: true; value: T } | { admitted: false; held: number }> {
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
    await this.settle(id, true).catch(() => undefined);
    return { admitted: true, value };
  }
}
