import * as Schema from "effect/Schema";
import type { KV } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import { listKeys, openKv } from "../../lib/nats/jetstream.js";
import { getRecord, live, modifyRecord, createRecord, pageRecords, upsertRecord, valueSchema, type Mutable, type Versioned } from "../../lib/nats/kv-records.js";
import type { Page, PageQuery } from "../../lib/page.js";
import { buckets, kvToken } from "../../lib/nats/subjects.js";
import { isFinal, SANDBOX_STATUSES, TERMINATION_REASONS } from "./sandbox-states.js";

// Sandbox records in JetStream KV: the sandbox object the API returns, the host that runs it and
// the project it belongs to. Its status moves as sandbox-states.ts says; a final record never
// changes again (every write is a compare-and-set through `transition`).

/** Sandbox ids: the prefix and 24 base62 characters (newSortableId). */
export const SANDBOX_ID = /^sbx_[0-9A-Za-z]{24}$/;

const Resources = Schema.Struct({ cpu_mhz: Schema.Number, memory_mb: Schema.Number, disk_mb: Schema.Number });

export const SandboxObjectSchema = Schema.Struct({
  id: Schema.String,
  object: Schema.Literal("sandbox"),
  status: Schema.Literals(SANDBOX_STATUSES),
  termination_reason: Schema.NullOr(Schema.Literals(TERMINATION_REASONS)),
  /** Why it failed, in words (never a secret, never host internals). */
  error: Schema.NullOr(Schema.String),
  created_at: Schema.Number,
  started_at: Schema.NullOr(Schema.Number),
  expires_at: Schema.Number,
  stopped_at: Schema.NullOr(Schema.Number),
  timeout_seconds: Schema.Number,
  idle_timeout_seconds: Schema.NullOr(Schema.Number),
  network: Schema.Literals(["none", "egress"]),
  resources: Resources,
  metadata: Schema.Record(Schema.String, Schema.String),
  /** Names of the environment variables and secrets it was created with (never their values). */
  env_names: Schema.mutable(Schema.Array(Schema.String)),
  secrets: Schema.mutable(Schema.Array(Schema.String)),
});
export type SandboxObject = Mutable<typeof SandboxObjectSchema.Type>;

const StoredSandboxSchema = Schema.Struct({
  sandbox: SandboxObjectSchema,
  project: Schema.String,
  host_id: Schema.String,
});
export type StoredSandbox = Mutable<typeof StoredSandboxSchema.Type>;
const storedSandbox = valueSchema<StoredSandbox>()(StoredSandboxSchema);

/**
 * A project's sandboxes not yet final, in one small record beside its sandbox records (key
 * <project>.index.live: three tokens, so the listings of <project>.* and *.* never see it). Create
 * admits a sandbox into it with compare-and-set before writing its record, so two creates racing
 * at the limit cannot both pass; a record turning final leaves it. It is bounded by the limit, so
 * counting and listing live sandboxes never read the project's history. A crash between the two
 * writes leaves an entry without a live record: `reconcile` (the sweeper, and a create at the
 * limit) drops those, and the sweeper's occasional full scan adopts live records it lacks.
 */
const LiveIndexSchema = Schema.Struct({
  project: Schema.String,
  sandboxes: Schema.mutable(Schema.Array(Schema.Struct({ id: Schema.String, since: Schema.Number }))),
  /** When `reconcile` last checked the entries against their records (seconds). */
  checked_at: Schema.Number,
});
type LiveIndex = Mutable<typeof LiveIndexSchema.Type>;
const liveIndex = valueSchema<LiveIndex>()(LiveIndexSchema);
/** An entry this old without a record is a create that died between admission and its record. */
const ADMISSION_GRACE_S = 120;

export const nowSeconds = () => Math.floor(Date.now() / 1000);

/** Sandbox records: KV bucket `sandboxes`, key <project>.<sandbox id>, kept 7 days after their last write. */
export class SandboxStore {
  private constructor(readonly kv: KV) {}

  static async open(nc: NatsConnection): Promise<SandboxStore> {
    return new SandboxStore(await openKv(nc, buckets.sandboxes, { history: 1, ttl: 7 * 24 * 3600 * 1000 }));
  }

  key(project: string, id: string): string {
    return `${kvToken(project)}.${id}`;
  }

  private indexKey(project: string): string {
    return `${kvToken(project)}.index.live`;
  }

  /**
   * Admits sandbox `id` into the project's live index unless it holds `max` already (a
   * compare-and-set: racing creates at the limit cannot both pass). `live` is the count seen.
   */
  async admit(project: string, id: string, max: number): Promise<{ admitted: boolean; live: number }> {
    let live = 0;
    const result = await upsertRecord(this.kv, this.indexKey(project), liveIndex, (current) => {
      const index = current ?? { project, sandboxes: [], checked_at: nowSeconds() };
      live = index.sandboxes.length;
      if (live >= max || index.sandboxes.some((s) => s.id === id)) return undefined;
      index.sandboxes.push({ id, since: nowSeconds() });
      return index;
    });
    return { admitted: result?.changed === true, live };
  }

  /** Takes `id` out of the project's live index (its record is final or gone). */
  async release(project: string, id: string): Promise<void> {
    await modifyRecord(this.kv, this.indexKey(project), liveIndex, (index) => {
      const rest = index.sandboxes.filter((s) => s.id !== id);
      return rest.length === index.sandboxes.length ? undefined : { ...index, sandboxes: rest };
    });
  }

  /**
   * The project's live records, from its live index (at most the limit reads), dropping entries
   * whose record is final, or absent past the admission grace. With `minInterval`, skipped
   * (returns undefined) when the index was checked that recently.
   */
  async reconcile(project: string, minIntervalS = 0): Promise<StoredSandbox[] | undefined> {
    const index = await getRecord(this.kv, this.indexKey(project), liveIndex);
    if (!index) return [];
    const now = nowSeconds();
    if (minIntervalS > 0 && now - index.value.checked_at < minIntervalS) return undefined;
    const records = await Promise.all(index.value.sandboxes.map(async (s) => ({ entry: s, record: await this.get(project, s.id).catch(() => undefined) })));
    const stale = new Set(
      records.filter(({ entry, record }) => (record ? isFinal(record.sandbox.status) : now - entry.since > ADMISSION_GRACE_S)).map(({ entry }) => entry.id),
    );
    // The sweeper writes only when something changed; a create at the limit also notes the check.
    if (stale.size > 0 || minIntervalS > 0)
      await modifyRecord(this.kv, this.indexKey(project), liveIndex, (current) => ({ ...current, sandboxes: current.sandboxes.filter((s) => !stale.has(s.id)), checked_at: now }));
    return records.flatMap(({ record }) => (record && !isFinal(record.sandbox.status) ? [record] : []));
  }

  /** The project's live records, from its live index (at most the limit reads, no writes). */
  async liveRecords(project: string): Promise<StoredSandbox[]> {
    const index = await getRecord(this.kv, this.indexKey(project), liveIndex);
    const records = await Promise.all((index?.value.sandboxes ?? []).map((s) => this.get(project, s.id).catch(() => undefined)));
    return records.flatMap((r) => (r && !isFinal(r.sandbox.status) ? [r] : []));
  }

  /** Adds a live record the index lacks (the full scan's repair; no limit applies). */
  private async adopt(project: string, id: string): Promise<void> {
    await upsertRecord(this.kv, this.indexKey(project), liveIndex, (current) => {
      const index = current ?? { project, sandboxes: [], checked_at: nowSeconds() };
      if (index.sandboxes.some((s) => s.id === id)) return undefined;
      index.sandboxes.push({ id, since: nowSeconds() });
      return index;
    });
  }

  async create(record: StoredSandbox): Promise<void> {
    const revision = await createRecord(this.kv, this.key(record.project, record.sandbox.id), record);
    if (revision === undefined) throw new Error(`sandbox ${record.sandbox.id} exists already`);
  }

  async get(project: string, id: string): Promise<StoredSandbox | undefined> {
    return (await getRecord(this.kv, this.key(project, id), storedSandbox))?.value;
  }

  /**
   * Compare-and-set on a live record: `move` (one of sandbox-states.ts) returns the next sandbox
   * object or undefined to leave it. A final record is never changed; one turning final leaves
   * the live index. Returns what is stored afterwards.
   */
  async transition(project: string, id: string, move: (current: SandboxObject) => SandboxObject | undefined): Promise<StoredSandbox | undefined> {
    const result = await modifyRecord(this.kv, this.key(project, id), storedSandbox, (current) => {
      if (isFinal(current.sandbox.status)) return undefined;
      const next = move(current.sandbox);
      return next ? { ...current, sandbox: next } : undefined;
    });
    if (result && isFinal(result.value.sandbox.status)) await this.release(project, id);
    return result?.value;
  }

  async delete(project: string, id: string): Promise<boolean> {
    const key = this.key(project, id);
    if (!live(await this.kv.get(key))) return false;
    await this.kv.delete(key);
    await this.release(project, id);
    return true;
  }

  /**
   * One page of a project's sandboxes (ids sort by creation time), reading only that page's
   * records; `keep` filters (filtered-out records do not count towards `limit`).
   */
  page(project: string, query: PageQuery, keep: (s: SandboxObject) => boolean): Promise<Page<SandboxObject>> {
    return pageRecords(this.kv, kvToken(project), query, async (id) => {
      const record = await this.get(project, id).catch(() => undefined);
      return record && keep(record.sandbox) ? record.sandbox : undefined;
    }, { idPrefix: "sbx_" });
  }

  /** Every record not yet final, of every project, from the live indexes (the sweeper's view); reconciles each index on the way. */
  async live(): Promise<StoredSandbox[]> {
    const indexKeys = await listKeys(this.kv, "*.index.live");
    const out: StoredSandbox[] = [];
    for (const key of indexKeys) {
      const index = await getRecord(this.kv, key, liveIndex).catch(() => undefined);
      if (index) out.push(...((await this.reconcile(index.value.project)) ?? []));
    }
    return out;
  }

  /**
   * Reads every record of every project (all of the last 7 days: rare, the sweeper's repair) and
   * adds to the live indexes the live records they lack (records from before the indexes, or an
   * index that expired). Returns how many it added.
   */
  async adoptUnindexed(): Promise<number> {
    const keys = await listKeys(this.kv, "*.*");
    const indexed = new Map<string, Set<string>>();
    let added = 0;
    for (const key of keys) {
      const record = await getRecord(this.kv, key, storedSandbox).catch(() => undefined);
      if (!record || isFinal(record.value.sandbox.status)) continue;
      const { project, sandbox } = record.value;
      let ids = indexed.get(project);
      if (!ids) {
        const index = await getRecord(this.kv, this.indexKey(project), liveIndex).catch(() => undefined);
        ids = new Set(index?.value.sandboxes.map((s) => s.id) ?? []);
        indexed.set(project, ids);
      }
      if (ids.has(sandbox.id)) continue;
      await this.adopt(project, sandbox.id);
      ids.add(sandbox.id);
      added++;
    }
    return added;
  }
}
