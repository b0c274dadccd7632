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
import { Bucket, Kvm, type KV, type KvOptions } from "@nats-io/kv";
import { Objm, type ObjectStore, type ObjectStoreOptions } from "@nats-io/obj";
import { jetStreamConfig, readConfig } from "../config.js";

// Opening JetStream state the same way everywhere: create-or-bind, with the replica count of
// the deployment (1 on one machine, 3 on a JetStream cluster: TRIBUTARY_JS_REPLICAS).

let replicas: number | undefined;
const jetStreamReplicas = () => (replicas ??= readConfig(jetStreamConfig).replicas);

/**
 * Opens the KV bucket `name`, creating it with `options` when it does not exist yet.
 *
 * With replicas, reads go to the bucket's leader: a direct get may be answered by any replica,
 * and a follower that has not applied the latest writes yet answers with an older value or none.
 * A worker that reads a record a gateway has just written (a queued background response, its
 * input items) would then find it missing and drop or fail the job; compare-and-set would loop on
 * stale revisions. With one replica, the direct get is as current and cheaper.
 */
export async function openKv(nc: NatsConnection, name: string, options: Partial<KvOptions> = {}): Promise<KV> {
  const replicas = jetStreamReplicas();
  return new Kvm(nc).create(name, { replicas, allow_direct: replicas === 1, ...options });
}

// Listing KV keys. nats.js's `kv.keys()` follows the bucket with an ordered push consumer and ends
// when a message reports nothing pending, or on the consumer's idle heartbeat: while keys keep
// changing, nothing pending never comes (each write adds one), and a listing that raced writes
// waited for the heartbeat (30 s stalls of GET /v1/batches). This listing reads the stream itself
// with a pull consumer and ends at a stream sequence it looked up, not at quiet.

/** Messages per pull request of a key listing (headers only: a few hundred bytes each). */
const LIST_BATCH = 256;
/**
 * Times a listing looks up the newest write again to catch up with writes that landed while it
 * ran. A key updated while listed can move past the listing's end (with history 1 the update
 * removes the message the listing was about to read): each look-up extends the listing to the
 * bucket's newest write, so a key moved in one stretch is found in the next, unless it moves
 * again before it is reached in each of them.
 */
const LIST_CATCH_UPS = 4;
/** How long a pull waits for messages the stream does not hold yet (a replica catching up, a removed message). */
const LIST_PULL_EXPIRES_MS = 1_000;

/**
 * The distinct live keys of a KV bucket under `filter`, without their shared `prefix`, read from
 * the bucket's stream through an ephemeral pull consumer (headers only, in batches of LIST_BATCH).
 * Every key that exists while the listing runs and is not written meanwhile is in it; a key
 * written or deleted meanwhile may or may not be. With `limit`, it stops once it has found at
 * least that many keys (a count checked against a bound needs no more).
 *
 * The consumer delivers every message under the filter, not only the last per key: on
 * nats-server 2.9 a last-per-subject consumer whose messages were replaced while it read
 * delivered one message several times and skipped later ones. KV buckets here keep history 1
 * (one message per key) except accounts (5), so this reads little more.
 */
export async function listKeys(kv: KV, filter: string, prefix = "", options: { limit?: number } = {}): Promise<string[]> {
  if (!(kv instanceof Bucket)) throw new Error("listKeys reads the stream of a bucket opened with openKv");
  const stream = kv.stream;
  const subjectFilter = kv.fullKeyName(kv.encodeKey(filter));
  const limit = options.limit ?? Number.POSITIVE_INFINITY;
  const info = await kv.jsm.consumers.add(stream, {
    ack_policy: AckPolicy.None,
    deliver_policy: DeliverPolicy.All,
    filter_subject: subjectFilter,
    headers_only: true,
    inactive_threshold: nanos(60_000),
    mem_storage: true,
    num_replicas: 1,
  });
  const keys = new Set<string>();
  try {
    // Where the listing ends: the newest write under the filter, asked of the stream's leader
    // after the consumer exists (which starts no later). 0: nothing was ever written there.
    let end = await lastSequence(kv.jsm, stream, subjectFilter);
    if (end === 0) return [];
    const consumer = kv.js.consumers.getConsumerFromInfo(info);
    let lastSeq = info.delivered.stream_seq;
    let pending = info.num_pending;
    for (let catchUps = 0; ; ) {
      if (lastSeq >= end || pending === 0) {
        // At the end; or short of it with nothing pending (the newest message expired since, or
        // this consumer's replica is behind the leader): look the end up again.
        if (catchUps++ >= LIST_CATCH_UPS) break;
        const newest = await lastSequence(kv.jsm, stream, subjectFilter);
        if (newest <= lastSeq) break;
        end = newest;
      }
      // A pull is read to its last message (one left early would drop the messages the server
      // already sent it), so it asks for no more than is pending: a pull for more than the stream
      // holds waits out its expiry.
      const batch = await consumer.fetch({ max_messages: Math.min(LIST_BATCH, Math.max(1, pending)), expires: LIST_PULL_EXPIRES_MS });
      let received = 0;
      for await (const m of batch) {
        received++;
        const key = kv.decodeKey(m.subject.substring(kv.prefixLen)).slice(prefix.length);
        const operation = m.headers?.get(KV_OPERATION_HEADER);
        // Stream order: a later delete of a key listed earlier takes it out again.
        if (operation === "DEL" || operation === "PURGE") keys.delete(key);
        else keys.add(key);
        lastSeq = m.seq;
        pending = m.info.pending;
      }
      // Nothing arrived within the expiry: the stream holds nothing more to read.
      if (received === 0 || keys.size >= limit) break;
    }
  } finally {
    await kv.jsm.consumers.delete(stream, info.name).catch(() => {});
  }
  return [...keys].slice(0, limit);
}

const KV_OPERATION_HEADER = "KV-Operation";

/** The stream sequence of the newest message under `subjectFilter`, from the stream's leader; 0 when there is none. */
async function lastSequence(jsm: JetStreamManager, stream: string, subjectFilter: string): Promise<number> {
  return (await jsm.streams.getMessage(stream, { last_by_subj: subjectFilter }))?.seq ?? 0;
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
