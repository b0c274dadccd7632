import type { NatsConnection } from "@nats-io/transport-node";
import { Kvm, type KV, type KvOptions } from "@nats-io/kv";
import { Objm, type ObjectStore, type ObjectStoreOptions } from "@nats-io/obj";
import { AckPolicy, type ConsumerConfig, type JetStreamManager, type StreamConfig } from "@nats-io/jetstream";

// Opening JetStream state the same way everywhere: create-or-bind, with the replica count of
// the deployment (1 on one machine, 3 on a JetStream cluster: TRIBUTARY_JS_REPLICAS).

export function jetStreamReplicas(env: NodeJS.ProcessEnv = process.env): number {
  const n = Number(env.TRIBUTARY_JS_REPLICAS ?? 1);
  return Number.isInteger(n) && n >= 1 && n <= 5 ? n : 1;
}

/** Opens the KV bucket `name`, creating it with `options` when it does not exist yet. */
export async function openKv(nc: NatsConnection, name: string, options: Partial<KvOptions> = {}): Promise<KV> {
  return new Kvm(nc).create(name, { replicas: jetStreamReplicas(), ...options });
}

/**
 * The distinct keys of a KV bucket under `filter`, without their shared prefix. KV's key listing
 * follows the bucket's stream, so a key written while the listing runs can come back twice.
 */
export async function listKeys(kv: KV, filter: string, prefix = ""): Promise<string[]> {
  const keys = new Set<string>();
  for await (const key of await kv.keys(filter)) keys.add(key.slice(prefix.length));
  return [...keys];
}

/** Opens the Object Store bucket `name`, creating it when it does not exist yet. */
export async function openObjectStore(nc: NatsConnection, name: string, options: Partial<ObjectStoreOptions> = {}): Promise<ObjectStore> {
  return new Objm(nc).create(name, { replicas: jetStreamReplicas(), ...options });
}

/** Creates the stream, or updates it to `config` when it exists (several processes may race here). */
export async function ensureStream(jsm: JetStreamManager, config: Partial<StreamConfig> & { name: string; subjects: string[] }): Promise<void> {
  const full = { num_replicas: jetStreamReplicas(), ...config };
  try {
    await jsm.streams.info(config.name);
    await jsm.streams.update(config.name, full);
  } catch (err) {
    if (!isNotFound(err)) throw err;
    try {
      await jsm.streams.add(full);
    } catch (e) {
      if (!/already in use|exists/i.test(String((e as Error).message))) throw e;
    }
  }
}

/** Creates or updates a durable pull consumer. */
export async function ensureDurableConsumer(jsm: JetStreamManager, stream: string, config: Partial<ConsumerConfig> & { durable_name: string }): Promise<void> {
  await jsm.consumers.add(stream, { ack_policy: AckPolicy.Explicit, ...config });
}

export function isNotFound(err: unknown): boolean {
  const e = err as { code?: unknown; message?: string; api_error?: { err_code?: number } };
  return e?.api_error?.err_code === 10059 || e?.api_error?.err_code === 10014 || /not found/i.test(String(e?.message ?? ""));
}
