import type { KV, KvEntry } from "@nats-io/kv";

// JSON records in a KV bucket, with the revision each was read at: updates are compare-and-set on
// that revision, so two writers never overwrite each other's change unseen.

export interface Versioned<T> {
  value: T;
  revision: number;
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

export function decodeEntry<T>(entry: KvEntry | null): Versioned<T> | undefined {
  const found = live(entry);
  return found ? { value: found.json<T>(), revision: found.revision } : undefined;
}

export async function getRecord<T>(kv: KV, key: string): Promise<Versioned<T> | undefined> {
  return decodeEntry<T>(await kv.get(key));
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

/**
 * Read-modify-write with retries on conflict: `change` gets the current value and returns the new
 * one (or undefined to leave it as it is). Returns the value that ended up stored.
 */
export async function modifyRecord<T>(kv: KV, key: string, change: (current: T) => T | undefined, attempts = 10): Promise<T | undefined> {
  for (let i = 0; i < attempts; i++) {
    const current = await getRecord<T>(kv, key);
    if (!current) return undefined;
    const next = change(current.value);
    if (next === undefined) return current.value;
    if ((await updateRecord(kv, key, next, current.revision)) !== undefined) return next;
  }
  throw new Error(`KV record ${key} kept changing: gave up after ${attempts} attempts`);
}

/** Every key matching `filter` (wildcards allowed). */
export async function listKeys(kv: KV, filter: string): Promise<string[]> {
  const out: string[] = [];
  for await (const k of await kv.keys(filter)) out.push(k);
  return out;
}

/** The records of every key matching `filter`, read in parallel; keys deleted meanwhile are skipped. */
export async function listRecords<T>(kv: KV, filter: string): Promise<Array<Versioned<T> & { key: string }>> {
  const keys = await listKeys(kv, filter);
  const records = await Promise.all(keys.map(async (key) => ({ key, record: await getRecord<T>(kv, key) })));
  return records.flatMap(({ key, record }) => (record ? [{ key, ...record }] : []));
}
