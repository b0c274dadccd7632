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
  type MsgRequest,
  type NextMsgRequest,
  type StoredMsg,
  type StreamConfig,
} from "@nats-io/jetstream";
import { Bucket, Kvm, type KV, type KvOptions } from "@nats-io/kv";
import { Objm, type ObjectStore, type ObjectStoreOptions } from "@nats-io/obj";
import { jetStreamConfig, readConfig } from "../config.js";
import { subjectPurgeSparesOtherConsumers } from "./server-version.js";
import { retryJetStreamSetup } from "./setup-retry.js";

// Opening JetStream state the same way everywhere: create-or-bind, with the replica count of
// the deployment (1 on one machine, 3 on a JetStream cluster: TRIBUTARY_JS_REPLICAS). The
// openers below run at start-up and wait out a JetStream outage (retryJetStreamSetup).

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
  return retryJetStreamSetup(`KV bucket ${name}`, () => new Kvm(nc).create(name, { replicas, allow_direct: replicas === 1, ...options }));
}

// Listing KV keys. nats.js's `kv.keys()` follows the bucket with an ordered push consumer and ends
// when a message reports nothing pending, or on the consumer's idle heartbeat: while keys keep
// changing, nothing pending never comes (each write adds one), and a listing that raced writes
// waited for the heartbeat (30 s stalls of GET /v1/batches). This listing reads the stream itself
// (`readUpToNewest`) and ends at a stream sequence it looked up, not at quiet.

/**
 * Times a listing looks up the newest write again to catch up with writes that landed while it
 * ran. A key updated while listed can move past the listing's end (with history 1 the update
 * removes the message the listing was about to read): each look-up extends the listing to the
 * bucket's newest write, so a key moved in one stretch is found in the next, unless it moves
 * again before it is reached in each of them.
 */
const LIST_CATCH_UPS = 4;
/** Messages per pull request of a listing (headers only: a few hundred bytes each). */
const LIST_BATCH = 256;

/**
 * The distinct live keys of a KV bucket under `filter`, without their shared `prefix`, read from
 * the bucket's stream (headers only, in batches of LIST_BATCH). Every key that exists while the
 * listing runs and is not written meanwhile is in it; a key written or deleted meanwhile may or
 * may not be. With `limit`, it stops once it has found at least that many keys (a count checked
 * against a bound needs no more). With `writtenSince` (ms since the epoch, the server's clock), it
 * reads only the stream from then on: the keys whose last write is that recent (a delete before
 * then leaves no trace in it, but neither does the put it deleted).
 *
 * It reads every message under the filter, not only the last per key: on nats-server 2.9 a
 * last-per-subject consumer whose messages were replaced while it read delivered one message
 * several times and skipped later ones. KV buckets here keep history 1 (one message per key)
 * except accounts (5), so this reads little more.
 */
export async function listKeys(kv: KV, filter: string, prefix = "", options: { limit?: number; writtenSince?: number } = {}): Promise<string[]> {
  if (!(kv instanceof Bucket)) throw new Error("listKeys reads the stream of a bucket opened with openKv");
  const limit = options.limit ?? Number.POSITIVE_INFINITY;
  const keys = new Set<string>();
  const since = options.writtenSince;
  const messages = readUpToNewest(kv, kv.stream, kv.fullKeyName(kv.encodeKey(filter)), {
    start: since === undefined ? { deliver_policy: DeliverPolicy.All } : { deliver_policy: DeliverPolicy.StartTime, opt_start_time: new Date(Math.max(0, since)).toISOString() },
    headersOnly: true,
    batch: LIST_BATCH,
    catchUps: LIST_CATCH_UPS,
  });
  for await (const m of messages) {
    const key = kv.decodeKey(m.subject.substring(kv.prefixLen)).slice(prefix.length);
    const operation = m.headers?.get(KV_OPERATION_HEADER);
    // Stream order: a later delete of a key listed earlier takes it out again.
    if (operation === "DEL" || operation === "PURGE") keys.delete(key);
    else keys.add(key);
    if (keys.size >= limit) break;
  }
  return [...keys].slice(0, limit);
}

const KV_OPERATION_HEADER = "KV-Operation";

/** How long a pull waits for messages the consumer's replica does not hold yet. */
const PULL_EXPIRES_MS = 1_000;
/** How long a reading consumer waits for its reader's next pull before the server deletes it. */
const READER_INACTIVE_MS = 5 * 60_000;
/** Empty pulls in a row, short of a newest message the leader holds, before a read gives up. */
const MAX_EMPTY_PULLS = 10;

/** Thrown when a consumer's replica stays behind the stream's leader: a read would be incomplete. */
export class ReplicaBehind extends Error {
  override name = "ReplicaBehind";
  constructor(stream: string, readTo: number, newest: number) {
    super(`stream ${stream}: read to sequence ${readTo}, but the leader holds ${newest}; the consumer's replica did not catch up`);
  }
}

/**
 * The messages under `filter` in `stream` from `start`, in stream order, through an ephemeral
 * pull consumer (memory, one replica, no acks, deleted at the end), up to the newest message
 * under the filter when the read began; then, `catchUps` times at most, on to the newest again
 * (messages written meanwhile). The last pull may bring a few past that.
 *
 * The end is looked up on the stream's leader (a stored-message get, which only the leader
 * answers), not taken from the consumer's pending count: the server places an R1 consumer on any
 * replica, and one behind the leader would count too few and end the read before messages the
 * writer had been acknowledged. Such a consumer is waited for (pulls with a short expiry),
 * and ReplicaBehind ends a read it never catches up with.
 *
 * Each pull asks for no more than is pending (a pull for more than the stream holds waits out its
 * expiry) and at most `batch`, and is read to its last message (one left early would drop the
 * messages the server already sent it): a caller that stops iterating stops the pulls, so at
 * most `batch` messages wait in memory.
 */
async function* readUpToNewest(
  handles: JetStreamHandles,
  stream: string,
  filter: string,
  options: { start: Partial<ConsumerConfig>; headersOnly: boolean; batch: number; catchUps: number },
): AsyncGenerator<JsMsg> {
  const open = (start: Partial<ConsumerConfig>) =>
    handles.jsm.consumers.add(stream, {
      ack_policy: AckPolicy.None,
      ...start,
      filter_subject: filter,
      headers_only: options.headersOnly,
      // No pull is outstanding while the caller holds the last one's messages (a slow download):
      // the consumer must outlive such a pause. It is deleted at the end; this only reclaims the
      // consumers of a process that died mid-read.
      inactive_threshold: nanos(READER_INACTIVE_MS),
      mem_storage: true,
      num_replicas: 1,
    });
  let info = await open(options.start);
  try {
    // Looked up after the consumer exists, which starts no later. 0: nothing was ever stored there.
    let end = await lastSequence(handles.jsm, stream, filter);
    // Where the consumer stands (the sequence before its start), and what it counts to read.
    let readTo = info.delivered.stream_seq;
    let pending = info.num_pending;
    let consumer = handles.js.consumers.getConsumerFromInfo(info);
    let catchUps = 0;
    let emptyPulls = 0;
    let resumes = 0;
    for (;;) {
      if (readTo >= end) {
        if (catchUps++ >= options.catchUps) return;
        const newest = await lastSequence(handles.jsm, stream, filter);
        if (newest <= readTo) return;
        end = newest;
      } else if (pending === 0) {
        // Short of the end with nothing pending: the newest message went since (an expiry, a
        // purge), or this consumer's replica is behind the leader (then the pull waits for it).
        const newest = await lastSequence(handles.jsm, stream, filter);
        if (newest <= readTo) return;
        end = Math.min(end, newest);
      }
      const pull = await consumer.fetch({ max_messages: Math.min(options.batch, Math.max(1, pending)), expires: PULL_EXPIRES_MS });
      let received = 0;
      try {
        for await (const m of pull) {
          received++;
          readTo = m.seq;
          pending = m.info.pending;
          yield m;
        }
      } catch (err) {
        // A pull ends with "heartbeats missed" when the server's idle heartbeats did not arrive
        // in time (a starved event loop or server under load). Messages the server sent for it
        // may be lost, and without acks the consumer has moved past them: read on through a
        // new consumer from the message after the last one read.
        if (!isMissedHeartbeats(err) || ++resumes > MAX_PULL_RESUMES) throw err;
        await handles.jsm.consumers.delete(stream, info.name).catch(() => {});
        info = await open({ deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: readTo + 1 });
        consumer = handles.js.consumers.getConsumerFromInfo(info);
        pending = info.num_pending;
        continue;
      }
      if (received > 0) {
        emptyPulls = 0;
        continue;
      }
      // Nothing within the expiry, short of the end: as above.
      const newest = await lastSequence(handles.jsm, stream, filter);
      if (newest <= readTo) return;
      end = Math.min(end, newest);
      if (++emptyPulls >= MAX_EMPTY_PULLS) throw new ReplicaBehind(stream, readTo, newest);
    }
  } finally {
    await handles.jsm.consumers.delete(stream, info.name).catch(() => {});
  }
}

/** Pulls of one read that may end in missed heartbeats and be resumed before the read fails. */
const MAX_PULL_RESUMES = 5;

function isMissedHeartbeats(err: unknown): boolean {
  return err instanceof Error && /heartbeats missed/i.test(err.message);
}

/** The stream sequence of the newest message under `subjectFilter`, from the stream's leader; 0 when there is none. */
async function lastSequence(jsm: JetStreamManager, stream: string, subjectFilter: string): Promise<number> {
  return (await jsm.streams.getMessage(stream, { last_by_subj: subjectFilter }))?.seq ?? 0;
}

/**
 * The first message under `subject` at or after `seq`, from the stream's leader (a stored-message
 * get; none: undefined). The server takes `next_by_subj` there as for direct gets, which nats.js
 * alone types it for.
 */
export async function nextStoredMessage(jsm: JetStreamManager, stream: string, subject: string, seq: number): Promise<StoredMsg | undefined> {
  const request: NextMsgRequest = { seq, next_by_subj: subject };
  return (await jsm.streams.getMessage(stream, request as unknown as MsgRequest)) ?? undefined;
}

/** Opens the Object Store bucket `name`, creating it when it does not exist yet. */
export async function openObjectStore(nc: NatsConnection, name: string, options: Partial<ObjectStoreOptions> = {}): Promise<ObjectStore> {
  return retryJetStreamSetup(`object store ${name}`, () => new Objm(nc).create(name, { replicas: jetStreamReplicas(), ...options }));
}

/** Creates the stream, or updates it to `config` when it exists (several processes may race here). */
export function ensureStream(jsm: JetStreamManager, config: Partial<StreamConfig> & { name: string; subjects: string[] }): Promise<void> {
  return retryJetStreamSetup(`stream ${config.name}`, () => createOrUpdateStream(jsm, config));
}

async function createOrUpdateStream(jsm: JetStreamManager, config: Partial<StreamConfig> & { name: string; subjects: string[] }): Promise<void> {
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
  await retryJetStreamSetup(`consumer ${config.durable_name} of ${stream}`, () => jsm.consumers.add(stream, { ack_policy: AckPolicy.Explicit, ...config }));
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
  return { js: jetstream(nc), jsm: await openJetStreamManager(nc) };
}

/** The JetStream manager of `nc` (its creation asks the server whether JetStream is there). */
export function openJetStreamManager(nc: NatsConnection): Promise<JetStreamManager> {
  return retryJetStreamSetup("JetStream API", () => jetstreamManager(nc));
}

/**
 * Reads every message stored under `filter` in `stream` (from `startSeq` or `startTime` when
 * given), in stream order, fetching at most `prefetch` messages ahead: a caller that stops
 * iterating (a slow HTTP client, a slow Object Store write) stops the reads, so nothing piles up
 * in memory. Ends after the last message that the stream's leader held when the read began (and
 * the rest of the last pull): also when the consumer runs on a replica behind the leader.
 */
export function readStored(
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
  return readUpToNewest(handles, stream, filter, { start, headersOnly: options.headersOnly ?? false, batch: options.prefetch ?? 64, catchUps: 0 });
}

/**
 * The newest message of each subject under `filter` in `stream` (an Object Store's object
 * records), read up to the newest write as a key listing is (see listKeys), and consistent with
 * the stream's leader. `decode` turns a message into a value, or undefined to leave the subject out
 * (a deleted object): a subject whose newest message decodes to undefined is not listed.
 *
 * Before nats-server 2.9.12 a purge of one subject moved the read past the messages of others
 * (see SUBJECT_PURGE_FIXED_IN), and every Object Store write purges: its record rolls up the
 * record before. There the subjects the stream holds and the read did not see are read after
 * it, one by one.
 */
export async function latestPerSubject<T>(handles: JetStreamHandles, stream: string, filter: string, decode: (m: StoredMessage) => T | undefined): Promise<T[]> {
  // Undefined for a subject seen whose newest message is left out.
  const latest = new Map<string, T | undefined>();
  const messages = readUpToNewest(handles, stream, filter, { start: { deliver_policy: DeliverPolicy.All }, headersOnly: false, batch: LIST_BATCH, catchUps: LIST_CATCH_UPS });
  for await (const m of messages) latest.set(m.subject, decode(m));
  if (!subjectPurgeSparesOtherConsumers(handles.jsm)) {
    const held = (await handles.jsm.streams.info(stream, { subjects_filter: filter })).state.subjects ?? {};
    for (const subject of Object.keys(held)) {
      if (latest.has(subject)) continue;
      // Gone since (removed meanwhile): not listed.
      const m = await handles.jsm.streams.getMessage(stream, { last_by_subj: subject });
      if (m) latest.set(subject, decode(m));
    }
  }
  return [...latest.values()].filter((value): value is T => value !== undefined);
}

/** What `latestPerSubject` decodes: a message as a consumer delivers it or a stored-message get returns it. */
export type StoredMessage = Pick<JsMsg, "subject" | "seq" | "data">;

/**
 * Binds to the KV bucket `name` for reading only: no stream lookup or creation (an identity that
 * may only read the bucket's values with direct gets). A bucket that does not exist yet reads as
 * empty through `getRecord`'s callers, which treat failed reads as absent.
 */
export function bindKvForReading(nc: NatsConnection, name: string): Promise<KV> {
  return retryJetStreamSetup(`KV bucket ${name} (reading)`, () => new Kvm(nc).open(name, { bindOnly: true, allow_direct: true }));
}
