import type { NatsConnection } from "@nats-io/transport-node";
import { KvWatchInclude, type KV, type KvWatchEntry } from "@nats-io/kv";
import type { QueuedIterator } from "@nats-io/nats-core";
import { decodeEntry, InvalidValue } from "../../lib/nats/kv-records.js";
import type { Logger } from "../../lib/log.js";
import { accountRecordSchema, type AccountKey } from "./records.js";

export interface DirectoryOptions {
  /** Entries kept at most (unknown keys included); the oldest written go first. */
  maxEntries: number;
  /** Safety net only: the watch keeps entries current; these bound how long a missed update could last. */
  foundTtlMs: number;
  missingTtlMs: number;
}

export const DEFAULT_DIRECTORY_OPTIONS: DirectoryOptions = { maxEntries: 100_000, foundTtlMs: 10 * 60_000, missingTtlMs: 30_000 };

interface Cached {
  /** KV revision the value was read at (0 for "not found"); a write applies only if not older. */
  revision: number;
  value: unknown;
  expiresAt: number;
}

/** Returned by `peek` when the answer needs a KV read. */
export const MISS: unique symbol = Symbol("miss");

/**
 * The gateway's read-through cache of the accounts bucket (keys, organizations, projects).
 * A watch on the bucket applies every change to the entries held, so a revoked key stops working
 * on every gateway as soon as the change reaches it (milliseconds), not when a TTL runs out.
 * Reads racing a change keep whichever is newer, by KV revision.
 */
export class AccountDirectory {
  private readonly cache = new Map<string, Cached>();
  private readonly inflight = new Map<string, Promise<unknown>>();
  private watcher: QueuedIterator<KvWatchEntry> | undefined;
  private stopped = false;

  constructor(
    private readonly nc: NatsConnection,
    private readonly kv: KV,
    private readonly log: Logger,
    private readonly options: DirectoryOptions = DEFAULT_DIRECTORY_OPTIONS,
  ) {}

  /** Starts the watch; resolves once it is in place (changes from then on are seen). */
  async start(): Promise<void> {
    await this.watch();
    (async () => {
      for await (const s of this.nc.status()) {
        // Whatever happened while disconnected, start from a clean cache.
        if (s.type === "reconnect") this.cache.clear();
      }
    })().catch(() => {});
  }

  stop(): void {
    this.stopped = true;
    this.watcher?.stop();
  }

  get size(): number {
    return this.cache.size;
  }

  /**
   * The cached value of `key` (undefined: known not to exist), or MISS. Values are cached as
   * decoded by the schema of their key (`accountRecordSchema`), which is what `AccountKey<T>` names.
   */
  peek<T>(key: AccountKey<T>): T | undefined | typeof MISS {
    const c = this.cache.get(key);
    if (!c || c.expiresAt <= performance.now()) return MISS;
    return c.value as T | undefined;
  }

  /** The record at `key`, from the cache or read (InvalidValue when the stored value does not decode). */
  async get<T>(key: AccountKey<T>): Promise<T | undefined> {
    const cached = this.peek<T>(key);
    if (cached !== MISS) return cached;
    let pending = this.inflight.get(key);
    if (!pending) {
      pending = this.read(key).finally(() => this.inflight.delete(key));
      this.inflight.set(key, pending);
    }
    return (await pending) as T | undefined;
  }

  private async read(key: string): Promise<unknown> {
    const entry = await this.kv.get(key);
    const record = decodeEntry(entry, schemaOf(key));
    return this.store(key, entry?.revision ?? 0, record?.value);
  }

  /** Keeps the newer of what is cached and what was read; returns the value now cached. */
  private store(key: string, revision: number, value: unknown): unknown {
    const current = this.cache.get(key);
    if (current && current.revision > revision) return current.value;
    this.cache.delete(key);
    const ttl = value === undefined ? this.options.missingTtlMs : this.options.foundTtlMs;
    this.cache.set(key, { revision, value, expiresAt: performance.now() + ttl });
    if (this.cache.size > this.options.maxEntries) {
      const oldest = this.cache.keys().next().value;
      if (oldest !== undefined) this.cache.delete(oldest);
    }
    return value;
  }

  private apply(e: KvWatchEntry): void {
    // Only keys held (or being read) matter: anything else is read fresh when first needed.
    if (!this.cache.has(e.key) && !this.inflight.has(e.key)) return;
    let value: unknown;
    try {
      value = decodeEntry(e, schemaOf(e.key))?.value;
    } catch (err) {
      if (!(err instanceof InvalidValue)) throw err;
      // Forgotten: the next request that needs it reads it again and fails with the error.
      this.log.error("an accounts record does not decode", { key: e.key, err });
      this.cache.delete(e.key);
      return;
    }
    this.store(e.key, e.revision, value);
  }

  private async watch(): Promise<void> {
    const watcher = await this.kv.watch({ key: ">", include: KvWatchInclude.UpdatesOnly });
    this.watcher = watcher;
    (async () => {
      for await (const e of watcher) this.apply(e);
    })()
      .catch((err: unknown) => this.log.warn("accounts watch failed", { err }))
      .finally(() => {
        if (this.stopped) return;
        // Changes may have been missed: forget everything and watch again.
        this.cache.clear();
        this.log.warn("accounts watch ended; restarting it");
        setTimeout(() => void this.watch().catch((err: unknown) => this.log.error("accounts watch restart failed", { err })), 500);
      });
  }
}

function schemaOf(key: string) {
  const schema = accountRecordSchema(key);
  if (!schema) throw new Error(`no account record lives at ${key}`);
  return schema;
}
