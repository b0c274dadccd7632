import { nanos, type NatsConnection } from "@nats-io/transport-node";
import {
  AckPolicy,
  DeliverPolicy,
  jetstream,
  jetstreamManager,
  type ConsumerConfig,
  type JetStreamClient,
  type JetStreamManager,
  type JsMsg,
  type StreamConfig,
} from "@nats-io/jetstream";
import { Kvm, type KV, type KvOptions } from "@nats-io/kv";
import { Objm, type ObjectStore, type ObjectStoreOptions } from "@nats-io/obj";
import { jetStreamConfig, readConfig } from "../config.js";

// Opening JetStream state the same way everywhere: create-or-bind, with the replica count of
// the deployment (1 on one machine, 3 on a JetStream cluster: TRIBUTARY_JS_REPLICAS).

let replicas: number | undefined;
const jetStreamReplicas = () => (replicas ??= readConfig(jetStreamConfig).replicas);

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

export interface JetStreamHandles {
  js: JetStreamClient;
  jsm: JetStreamManager;
}

export async function jetStreamHandles(nc: NatsConnection): Promise<JetStreamHandles> {
  return { js: jetstream(nc), jsm: await jetstreamManager(nc) };
}

/**
 * Reads every message stored under `filter` in `stream` (from `startSeq` or `startTime` when given), in stream order, through an ephemeral
 * pull consumer that fetches at most `prefetch` messages ahead: a caller that stops iterating
 * (a slow HTTP client, a slow Object Store write) stops the reads, so nothing piles up in memory.
 * Ends after the last message that was stored when the read began.
 */
export async function* readStored(
  handles: JetStreamHandles,
  stream: string,
  filter: string,
  options: { prefetch?: number; headersOnly?: boolean; startSeq?: number; startTime?: Date } = {},
): AsyncGenerator<JsMsg> {
  const start = options.startSeq !== undefined
    ? { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: Math.max(1, options.startSeq) }
    : options.startTime !== undefined
      ? { deliver_policy: DeliverPolicy.StartTime, opt_start_time: options.startTime.toISOString() }
      : { deliver_policy: DeliverPolicy.All };
  const info = await handles.jsm.consumers.add(stream, {
    ack_policy: AckPolicy.None,
    ...start,
    filter_subject: filter,
    headers_only: options.headersOnly ?? false,
    inactive_threshold: nanos(60_000),
    mem_storage: true,
    num_replicas: 1,
  });
  const remove = () => handles.jsm.consumers.delete(stream, info.name).catch(() => {});
  if (info.num_pending === 0) {
    await remove();
    return;
  }
  const consumer = handles.js.consumers.getConsumerFromInfo(info);
  const messages = await consumer.consume({ max_messages: options.prefetch ?? 64 });
  try {
    let left = info.num_pending;
    for await (const m of messages) {
      yield m;
      if (--left <= 0 || m.info.pending === 0) return;
    }
  } finally {
    messages.stop();
    await remove();
  }
}

/**
 * Binds to the KV bucket `name` for reading only: no stream lookup or creation (an identity that
 * may only read the bucket's values with direct gets). A bucket that does not exist yet reads as
 * empty through `getRecord`'s callers, which treat failed reads as absent.
 */
export function bindKvForReading(nc: NatsConnection, name: string): Promise<KV> {
  return new Kvm(nc).open(name, { bindOnly: true, allow_direct: true });
}
