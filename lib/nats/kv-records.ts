import * as Schema from "effect/Schema";
import { Bucket, type KV, type KvEntry } from "@nats-io/kv";
import { firstIssue } from "../schema-errors.js";
import { listKeys } from "./jetstream.js";
import { subjectPurgeSparesOtherConsumers } from "./server-version.js";
import { sortableIdTime } from "../ids.js";
import type { Page, PageQuery } from "../page.js";

// Values in JetStream (KV records, stream messages) are JSON written by this code and read back
// through a schema, never cast: a value that does not decode is an error of the request that read
// it (InvalidValue, logged with its key), not a process crash or a lie to the type checker.
// Updates are compare-and-set on the revision a record was read at, so two writers never
// overwrite each other's change unseen.

export interface Versioned<T> {
  value: T;
  revision: number;
}

/** Types as decoded from JSON: fresh objects, so `readonly` (which schemas put everywhere) can go. */
export type Mutable<T> = T extends ReadonlyArray<infer U>
  ? Mutable<U>[]
  : T extends (...args: never[]) => unknown
    ? T
    : T extends object
      ? { -readonly [K in keyof T]: Mutable<T[K]> }
      : T;

/** A stored value (or a message between processes) that does not decode with its schema. */
export class InvalidValue extends Error {
  override name = "InvalidValue";
  constructor(
    /** The KV key, or the subject and stream sequence of a message. */
    readonly where: string,
    readonly path: string,
    readonly issue: string,
  ) {
    super(`stored value at ${where} does not decode${path ? ` at ${path}` : ""}: ${issue}`);
  }
}

type DecoderOf<T> = (input: unknown) => { ok: true; value: T } | { ok: false; path: string; message: string };

/** How a stored value of type T is read back: decode with a schema. See `valueSchema`. */
export class ValueSchema<T> {
  constructor(private readonly decoder: DecoderOf<T>) {}

  /** The value, or InvalidValue naming `where`. */
  decode(where: string, input: unknown): T {
    const result = this.decoder(input);
    if (result.ok) return result.value;
    throw new InvalidValue(where, result.path, result.message);
  }

  /** JSON text (a KV value, a message payload) to a value, or InvalidValue. */
  parse(where: string, json: string): T {
    let input: unknown;
    try {
      input = JSON.parse(json);
    } catch (err) {
      throw new InvalidValue(where, "", `not JSON (${(err as Error).message})`);
    }
    return this.decode(where, input);
  }

  /** A message payload (UTF-8 JSON) to a value, or InvalidValue. */
  parseBytes(where: string, data: Uint8Array): T {
    return this.parse(where, new TextDecoder().decode(data));
  }
}

/**
 * The ValueSchema of T for `schema`, which must decode exactly to a T (the type checker refuses
 * a schema whose decoded type, readonly markers aside, is not assignable to T). Unknown keys are
 * dropped, so a schema lists every key its type has, optional ones included.
 *
 *   const FileSchema = valueSchema<StoredFile>()(Schema.Struct({ ... }));
 */
export function valueSchema<T>() {
  return <S extends Schema.ConstraintDecoder<unknown>>(schema: S & ([Mutable<S["Type"]>] extends [T] ? unknown : { "decodes to a type other than T": never })): ValueSchema<T> => {
    const decode = Schema.decodeUnknownResult(schema, { errors: "first", onExcessProperty: "ignore" });
    return new ValueSchema<T>((input) => {
      const result = decode(input);
      if (result._tag === "Success") return { ok: true, value: result.success as T };
      const issue = firstIssue(result.failure);
      return { ok: false, path: issue.path, message: issue.message };
    });
  };
}

// JetStream API codes of a failed expectation on the last sequence (compare-and-set lost).
const WRONG_LAST_SEQUENCE = new Set([10071, 10164]);

/** True when a create or update failed because the key changed (or exists) meanwhile. */
export function isRevisionConflict(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  if (typeof code === "number" && WRONG_LAST_SEQUENCE.has(code)) return true;
  return /wrong last sequence/i.test(String((err as Error | null)?.message ?? ""));
}

/** The entry, or undefined when the key is absent, deleted or purged. */
export function live(entry: KvEntry | null): KvEntry | undefined {
  return entry && entry.operation === "PUT" && entry.length > 0 ? entry : undefined;
}

/** A KV entry's value decoded with `schema`, with its revision; undefined when there is none. */
export function decodeEntry<T>(entry: KvEntry | null, schema: ValueSchema<T>): Versioned<T> | undefined {
  const found = live(entry);
  return found ? { value: schema.parse(found.key, found.string()), revision: found.revision } : undefined;
}

export async function getRecord<T>(kv: KV, key: string, schema: ValueSchema<T>): Promise<Versioned<T> | undefined> {
  return decodeEntry(await kv.get(key), schema);
}

/** Creates the record; its revision, or undefined when the key already holds one. */
export async function createRecord<T>(kv: KV, key: string, value: T): Promise<number | undefined> {
  try {
    return await kv.create(key, JSON.stringify(value));
  } catch (err) {
    if (isRevisionConflict(err)) return undefined;
    throw err;
  }
}

/** Replaces the record if it is still at `revision`; the new revision, or undefined when it changed meanwhile. */
export async function updateRecord<T>(kv: KV, key: string, value: T, revision: number): Promise<number | undefined> {
  try {
    return await kv.update(key, JSON.stringify(value), revision);
  } catch (err) {
    if (isRevisionConflict(err)) return undefined;
    throw err;
  }
}

/** What a compare-and-set loop reads and writes: one KV record, or a store's own layout of one. */
export interface CasTarget<T> {
  read(): Promise<Versioned<T> | undefined>;
  /** Writes `value` if the record is still at `revision` (absent, when undefined); the new revision, or undefined on conflict. */
  write(value: T, revision: number | undefined): Promise<number | undefined>;
}

/** The value stored after a compare-and-set, and whether this call's change is what put it there. */
export interface Modified<T> extends Versioned<T> {
  changed: boolean;
}

/** Thrown when a record kept changing under a compare-and-set loop. */
export class RecordContended extends Error {
  override name = "RecordContended";
  constructor(readonly where: string, readonly attempts: number) {
    super(`${where} kept changing: gave up after ${attempts} attempts`);
  }
}

const DEFAULT_ATTEMPTS = 20;
const MAX_CONFLICT_PAUSE_MS = 50;

/**
 * The compare-and-set loop every store uses: read the record, let `change` compute the next value
 * from it, write that at the revision read, and start over when someone else wrote in between.
 * `change` gets a freshly decoded value on each attempt (it may modify it) and returns the value
 * to store, or undefined to leave the record as it is; it may be async (look something up before
 * deciding), the write still fails if the record changed meanwhile. With `create`, `change` also runs for an
 * absent record (getting undefined) and its value is created. Returns what is stored afterwards,
 * or undefined when the record is absent (and nothing was created).
 */
export async function compareAndSet<T>(
  target: CasTarget<T>,
  change: (current: T | undefined) => T | undefined | Promise<T | undefined>,
  options: { where: string; create?: boolean; attempts?: number },
): Promise<Modified<T> | undefined> {
  const attempts = options.attempts ?? DEFAULT_ATTEMPTS;
  for (let i = 0; i < attempts; i++) {
    const current = await target.read();
    if (!current && !options.create) return undefined;
    const next = await change(current?.value);
    if (next === undefined) return current ? { ...current, changed: false } : undefined;
    const revision = await target.write(next, current?.revision);
    if (revision !== undefined) return { value: next, revision, changed: true };
    // Lost to another writer: a random pause, growing with the attempts, spreads the writers of
    // one hot record (a bound's counter under a burst of creates) instead of retrying in lockstep.
    if (i + 1 < attempts) await new Promise((resolve) => setTimeout(resolve, Math.random() * Math.min(2 ** i, MAX_CONFLICT_PAUSE_MS)));
  }
  throw new RecordContended(options.where, attempts);
}

/** A plain KV record as a compare-and-set target. */
export function kvRecord<T>(kv: KV, key: string, schema: ValueSchema<T>): CasTarget<T> {
  return {
    read: () => getRecord(kv, key, schema),
    write: (value, revision) => (revision === undefined ? createRecord(kv, key, value) : updateRecord(kv, key, value, revision)),
  };
}

/**
 * Read-modify-write of an existing record with compare-and-set (see `compareAndSet`): `change`
 * returns the new value, or undefined to leave it. Undefined when there is no record.
 */
export function modifyRecord<T>(kv: KV, key: string, schema: ValueSchema<T>, change: (current: T) => T | undefined): Promise<Modified<T> | undefined> {
  return compareAndSet(kvRecord(kv, key, schema), (current) => change(current!), { where: key });
}

/** Like `modifyRecord`, but an absent record is created from `change(undefined)`. */
export function upsertRecord<T>(kv: KV, key: string, schema: ValueSchema<T>, change: (current: T | undefined) => T | undefined): Promise<Modified<T> | undefined> {
  return compareAndSet(kvRecord(kv, key, schema), change, { where: key, create: true });
}

/** The records of every key matching `filter`, read in parallel; keys deleted meanwhile are skipped. */
export async function listRecords<T>(kv: KV, filter: string, schema: ValueSchema<T>): Promise<Array<Versioned<T> & { key: string }>> {
  const keys = await listKeys(kv, filter);
  const records = await Promise.all(keys.map(async (key) => ({ key, record: await getRecord(kv, key, schema) })));
  return records.flatMap(({ key, record }) => (record ? [{ key, ...record }] : []));
}

// pageRecords' types live in lib/page.ts (re-exported here for callers that import them with it).
export type { Page, PageQuery };

/**
 * Records one page skips at most (filtered out, expired): a filtered listing (a status, a purpose)
 * whose matches are rare stops there with what it found, `has_more` and the `cursor` to go on
 * from, instead of reading a project's whole history in one request. A page so reads at most
 * `limit` + 1 + this many records.
 */
export const MAX_SKIPPED_PER_PAGE = 1000;
/** How far the clock that minted an id may run ahead of the NATS server's (a listing window's margin). */
const CLOCK_SKEW_MS = 5 * 60_000;
/** The listing windows tried in turn for a page newest-first (then the whole bucket). */
const WINDOWS_MS = [15 * 60_000, 3600_000, 24 * 3600_000, 7 * 24 * 3600_000];
/** Records a page reads at once. */
const PARALLEL_READS = 64;

/**
 * One page of the records `<prefix>.<id>` (a project's, say; keys below them are not records),
 * in key order or its reverse: sortable ids list in creation order. `after` is the last id of the
 * previous page (it need not exist any more); `read` returns undefined for records to skip
 * (expired, filtered out), which do not count towards `limit`; at most MAX_SKIPPED_PER_PAGE
 * are skipped (see Page's `cursor`).
 *
 * With `idPrefix` (ids minted by newSortableId after it, or dated no later than their record's
 * first write), the listing reads only the keys written in a recent window, not all of the
 * prefix's: a record is last written no earlier than its id's time, so every record dated within
 * the window (less the clock skew) is in it. Newest first, the window widens (15 minutes, an hour,
 * a day, a week, everything) until the page is filled from records it is sure of; oldest first
 * after a cursor, it starts at the cursor's time. Only the first page oldest first reads it all.
 */
export async function pageRecords<T>(
  kv: KV,
  prefix: string,
  query: PageQuery,
  read: (id: string) => Promise<T | undefined>,
  options: { idPrefix?: string; now?: number } = {},
): Promise<Page<T>> {
  const desc = query.order === "desc";
  const dateOf = (id: string) => (options.idPrefix === undefined ? undefined : sortableIdTime(id, options.idPrefix));
  const afterTime = query.after === undefined ? undefined : dateOf(query.after);
  // Where each listing starts (undefined: the whole bucket); the last is always the whole bucket.
  const windows: Array<number | undefined> = [];
  if (options.idPrefix !== undefined) {
    if (desc) {
      const newest = afterTime ?? (query.after === undefined ? (options.now ?? Date.now()) : undefined);
      if (newest !== undefined) for (const w of WINDOWS_MS) windows.push(newest - w - CLOCK_SKEW_MS);
    } else if (afterTime !== undefined) windows.push(afterTime - CLOCK_SKEW_MS);
  }
  windows.push(undefined);

  const data: T[] = [];
  let cursor = query.after;
  let skipped = 0;
  for (const since of windows) {
    const ids = await listKeys(kv, `${prefix}.*`, prefix + ".", since === undefined ? {} : { writtenSince: since });
    ids.sort();
    if (desc) ids.reverse();
    const from = cursor;
    const next = from === undefined ? ids : ids.filter((id) => (desc ? id < from : id > from));
    // Records this listing is sure to hold: those dated from the window's start (less the skew) on.
    const sure = (id: string) => since === undefined || (dateOf(id) ?? -Infinity) >= since + CLOCK_SKEW_MS;
    let i = 0;
    while (i < next.length && sure(next[i]!)) {
      if (skipped >= MAX_SKIPPED_PER_PAGE) return { data, has_more: true, cursor: cursor! };
      // Read in parallel as many as could still fill the page (one more tells has_more).
      const batch: string[] = [];
      const room = Math.min(query.limit + 1 - data.length, MAX_SKIPPED_PER_PAGE - skipped, PARALLEL_READS);
      while (batch.length < room && i < next.length && sure(next[i]!)) batch.push(next[i++]!);
      const values = await Promise.all(batch.map(read));
      for (const [j, value] of values.entries()) {
        cursor = batch[j]!;
        if (value === undefined) {
          skipped++;
          continue;
        }
        if (data.length === query.limit) return { data, has_more: true };
        data.push(value);
      }
    }
    // The end of a listing is the end of the list when it held every record past the cursor: the
    // whole bucket, or oldest first from the cursor's time. A newest-first window may not have.
    if (i === next.length && (since === undefined || !desc)) return { data, has_more: false };
  }
  return { data, has_more: false };
}

/**
 * Removes a key's record: every single-key removal goes through here. A purge where the server
 * has the fix: nothing of the key stays. Before nats-server 2.9.12 a purge moved every listing and
 * watcher of the bucket whose filter covers the key past the records it had not read yet
 * (nats-io/nats-server#3838, see SUBJECT_PURGE_FIXED_IN): a file listing during another file's
 * deletion came back without files. There it deletes instead: a delete marker is an ordinary
 * write, which moves no one. With history 1 (every bucket removed from here) the marker replaces
 * the value; only it stays, a few dozen bytes, and no old value.
 */
export async function removeKey(kv: KV, key: string): Promise<void> {
  if (kv instanceof Bucket && subjectPurgeSparesOtherConsumers(kv.js)) await kv.purge(key);
  else await kv.delete(key);
}

/** Removes a live record (see `removeKey`); false when there was none (absent, deleted or purged). */
export async function removeLive(kv: KV, key: string): Promise<boolean> {
  const entry = await kv.get(key);
  if (!entry || entry.operation !== "PUT") return false;
  await removeKey(kv, key);
  return true;
}
