import { Schema } from "effect";
import type { KV } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import { listKeys, openKv } from "../../lib/nats/jetstream.js";
import { getRecord, live, modifyRecord, createRecord, valueSchema, type Mutable, type Versioned } from "../../lib/nats/kv-records.js";
import { buckets, kvToken } from "../../lib/nats/subjects.js";

// Sandbox records in JetStream KV: the sandbox object the API returns, the host that runs it and
// the project it belongs to. Status moves one way: starting -> running -> stopping -> stopped,
// or to failed from any live state; a final record never changes again (every write is a
// compare-and-set through `transition`).

export const SANDBOX_STATUSES = ["starting", "running", "stopping", "stopped", "failed"] as const;
export type SandboxStatus = (typeof SANDBOX_STATUSES)[number];
export const TERMINATION_REASONS = ["user_stop", "deleted", "timeout", "idle", "oom", "host_lost", "error"] as const;
export type TerminationReason = (typeof TERMINATION_REASONS)[number];

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

export const isFinal = (status: SandboxStatus) => status === "stopped" || status === "failed";
const FAILURES: ReadonlySet<TerminationReason> = new Set(["oom", "host_lost", "error"]);
export const nowSeconds = () => Math.floor(Date.now() / 1000);

/** The record after the sandbox ended for `reason` (a failure reason ends it as failed). */
export function ended(sandbox: SandboxObject, reason: TerminationReason, error: string | null = null): SandboxObject {
  return { ...sandbox, status: FAILURES.has(reason) ? "failed" : "stopped", termination_reason: reason, stopped_at: nowSeconds(), error: error ?? sandbox.error };
}

/** Sandbox records: KV bucket `sandboxes`, key <project>.<sandbox id>, kept 7 days after their last write. */
export class SandboxStore {
  private constructor(readonly kv: KV) {}

  static async open(nc: NatsConnection): Promise<SandboxStore> {
    return new SandboxStore(await openKv(nc, buckets.sandboxes, { history: 1, ttl: 7 * 24 * 3600 * 1000 }));
  }

  key(project: string, id: string): string {
    return `${kvToken(project)}.${id}`;
  }

  async create(record: StoredSandbox): Promise<void> {
    const revision = await createRecord(this.kv, this.key(record.project, record.sandbox.id), record);
    if (revision === undefined) throw new Error(`sandbox ${record.sandbox.id} exists already`);
  }

  async get(project: string, id: string): Promise<StoredSandbox | undefined> {
    return (await getRecord(this.kv, this.key(project, id), storedSandbox))?.value;
  }

  /**
   * Compare-and-set on a live record: `change` returns the next sandbox object or undefined to
   * leave it. A final record is never changed. Returns what is stored afterwards.
   */
  async transition(project: string, id: string, change: (current: SandboxObject, record: StoredSandbox) => SandboxObject | undefined): Promise<StoredSandbox | undefined> {
    const result = await modifyRecord(this.kv, this.key(project, id), storedSandbox, (current) => {
      if (isFinal(current.sandbox.status)) return undefined;
      const next = change(current.sandbox, current);
      return next ? { ...current, sandbox: next } : undefined;
    });
    return result?.value;
  }

  async delete(project: string, id: string): Promise<boolean> {
    const key = this.key(project, id);
    if (!live(await this.kv.get(key))) return false;
    await this.kv.delete(key);
    return true;
  }

  /** A project's sandboxes, newest first (ids sort by creation time). */
  async list(project: string): Promise<StoredSandbox[]> {
    const keys = (await listKeys(this.kv, `${kvToken(project)}.*`)).sort().reverse();
    const records = await Promise.all(keys.map((k) => getRecord(this.kv, k, storedSandbox).catch(() => undefined)));
    return records.filter((r): r is Versioned<StoredSandbox> => r !== undefined).map((r) => r.value);
  }

  /** Every record not yet final, of every project (the sweeper's view). */
  async live(): Promise<StoredSandbox[]> {
    const keys = await listKeys(this.kv, "*.*");
    const records = await Promise.all(keys.map((k) => getRecord(this.kv, k, storedSandbox).catch(() => undefined)));
    return records.flatMap((r) => (r && !isFinal(r.value.sandbox.status) ? [r.value] : []));
  }
}
