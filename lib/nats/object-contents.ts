import * as Schema from "effect/Schema";
import type { ObjectStore } from "@nats-io/obj";
import type { NatsConnection } from "@nats-io/transport-node";
import { jetStreamHandles, latestPerSubject, nextStoredMessage, openObjectStore, readStored, type JetStreamHandles } from "./jetstream.js";
import { valueSchema } from "./kv-records.js";

// Contents in a JetStream Object Store, streamed in and out chunk by chunk (never whole in
// memory): the machinery shared by every store that keeps bytes there (files, artifacts). The
// Object Store's own put buffers one chunk; its get buffers nothing we control, so reads go
// through a bounded pull consumer instead.
//
// Reads agree with what the writer was acknowledged, also with replicas: an object's record is
// read with a stored-message get (answered by the stream's leader, as the Object Store's `info`
// does), its chunks and the listing of objects up to the newest message the leader holds (see
// readUpToNewest in jetstream.ts: the server places a reading consumer on any replica, and one
// behind the leader would end a read short, or list an object as missing). A chunk read that
// still ends short of the record's size takes the rest from the leader (see read).

const CHUNK_BYTES = 256 * 1024;

export interface StoredObject {
  name: string;
  bytes: number;
  /** Hex SHA-256 of the contents (the Object Store computes it while storing). */
  sha256: string;
  metadata: Record<string, string>;
  /** When the object was completed (ms). */
  mtimeMs: number;
}

/** An object's record as the Object Store writes it (`$O.<bucket>.M.<name>`), the fields read here. */
interface ObjectRecord {
  name: string;
  nuid: string;
  size: number;
  chunks: number;
  digest?: string | undefined;
  mtime: string;
  deleted?: boolean | undefined;
  metadata?: Record<string, string> | null | undefined;
}

const objectRecord = valueSchema<ObjectRecord>()(
  Schema.Struct({
    name: Schema.String,
    nuid: Schema.String,
    size: Schema.Number,
    chunks: Schema.Number,
    digest: Schema.optionalKey(Schema.String),
    mtime: Schema.String,
    deleted: Schema.optionalKey(Schema.Boolean),
    metadata: Schema.optionalKey(Schema.NullOr(Schema.Record(Schema.String, Schema.String))),
  }),
);

export class ObjectContents {
  private constructor(
    readonly bucket: string,
    private readonly store: ObjectStore,
    private readonly handles: JetStreamHandles,
  ) {}

  static async open(nc: NatsConnection, bucket: string): Promise<ObjectContents> {
    const [store, handles] = await Promise.all([openObjectStore(nc, bucket), jetStreamHandles(nc)]);
    return new ObjectContents(bucket, store, handles);
  }

  private get stream(): string {
    return `OBJ_${this.bucket}`;
  }

  /**
   * Streams `source` into the object `name` as it arrives (replacing an object of that name once
   * complete). Past `maxBytes` it throws `tooLarge()`. Any failure (the source throws: client
   * gone, parse error; the limit; JetStream) leaves no chunk of this put behind.
   */
  async put(
    name: string,
    metadata: Record<string, string>,
    source: AsyncIterable<Uint8Array>,
    limit: { maxBytes: number; tooLarge: () => Error },
  ): Promise<StoredObject> {
    let bytes = 0;
    const iterator = source[Symbol.asyncIterator]();
    const stream = new ReadableStream<Uint8Array>({
      async pull(controller) {
        try {
          const { value, done } = await iterator.next();
          if (done) return controller.close();
          bytes += value.length;
          if (bytes > limit.maxBytes) throw limit.tooLarge();
          controller.enqueue(value);
        } catch (err) {
          controller.error(err);
        }
      },
      async cancel() {
        await iterator.return?.();
      },
    });
    // The Object Store purges the chunks of a failed put itself.
    const info = await this.store.put({ name, metadata, options: { max_chunk_size: CHUNK_BYTES } }, stream);
    return described(info);
  }

  async info(name: string): Promise<StoredObject | undefined> {
    const info = await this.store.info(name);
    return !info || info.deleted ? undefined : described(info);
  }

  /** Every live object (names starting with `prefix`, when given). */
  async list(prefix = ""): Promise<StoredObject[]> {
    return (await this.records()).filter((o) => o.name.startsWith(prefix)).map(described);
  }

  /**
   * The records of every live object, read from the stream up to its newest record on the
   * leader (not the Object Store's `list`, which follows the stream until it goes quiet, like
   * KV's key listing, and reads whichever replica its consumer landed on).
   */
  private records(): Promise<ObjectRecord[]> {
    return latestPerSubject(this.handles, this.stream, `$O.${this.bucket}.M.>`, (m) => {
      const record = objectRecord.parseBytes(`${m.subject} (sequence ${m.seq})`, m.data);
      return record.deleted ? undefined : record;
    });
  }

  /**
   * The contents, chunk by chunk, read with a bounded prefetch: the reader's pace (an HTTP
   * client's, an Object Store write's) sets the pace of the reads from JetStream.
   */
  async *read(name: string): AsyncGenerator<Uint8Array> {
    const info = await this.store.info(name);
    if (!info || info.deleted) throw new Error(`the object ${name} is missing`);
    if (info.size === 0) return;
    const subject = `$O.${this.bucket}.C.${info.nuid}`;
    let seen = 0;
    let lastSeq = 0;
    for await (const m of readStored(this.handles, this.stream, subject, { prefetch: 16 })) {
      seen += m.data.length;
      lastSeq = m.seq;
      yield m.data;
    }
    // A consumer's read can end short of what the leader holds: on a replica still replaying the
    // log after a restart, a purge it replays (every Object Store write rolls up its record) moves
    // the consumer past chunks it had not delivered (nats-server before 2.9.12). The object's size
    // says so; the rest comes from the leader, chunk by chunk (stored-message gets).
    let fromLeader = 0;
    while (seen < info.size) {
      const m = await nextStoredMessage(this.handles.jsm, this.stream, subject, lastSeq + 1);
      if (!m) break;
      seen += m.data.length;
      lastSeq = m.seq;
      fromLeader++;
      yield m.data;
    }
    if (seen !== info.size) throw new Error(`object ${name}: read ${seen} of ${info.size} bytes (${fromLeader} chunks from the stream's leader, to sequence ${lastSeq})`);
  }

  /** Deletes an object and its delete marker too: nothing of it stays in the stream. Idempotent. */
  async remove(name: string): Promise<void> {
    await this.store.delete(name).catch(() => {});
    const encoded = Buffer.from(name).toString("base64").replace(/\+/g, "-").replace(/\//g, "_");
    await this.handles.jsm.streams.purge(this.stream, { filter: `$O.${this.bucket}.M.${encoded}` }).catch(() => {});
  }

  /**
   * Purges chunks that no object names (a put interrupted by a process killed mid-upload) and
   * that stopped growing at least `orphanAfterMs` ago. Returns how many chunk sets went.
   */
  async sweepOrphanChunks(now: number, orphanAfterMs: number): Promise<number> {
    const objects = await this.records();
    const referenced = new Set(objects.map((o) => o.nuid));
    const chunkPrefix = `$O.${this.bucket}.C.`;
    // Chunks are orphans only against a complete list of objects. The Object Store's listing
    // can end early when the stream changes leader under it (a NATS node lost): then the chunks
    // of live objects would look orphaned. Fail closed: fewer objects listed than the stream holds
    // object records means no chunk is swept this round.
    const metaSubjects = await this.handles.jsm.streams.info(this.stream, { subjects_filter: `$O.${this.bucket}.M.>` });
    if (objects.length < Object.keys(metaSubjects.state.subjects ?? {}).length) return 0;
    const info = await this.handles.jsm.streams.info(this.stream, { subjects_filter: `${chunkPrefix}>` });
    let swept = 0;
    for (const subject of Object.keys(info.state.subjects ?? {})) {
      const nuid = subject.slice(chunkPrefix.length);
      if (referenced.has(nuid)) continue;
      // An age that cannot be read (a failover) is not old enough: keep the chunks.
      const last = await this.handles.jsm.streams.getMessage(this.stream, { last_by_subj: subject }).catch(() => undefined);
      if (!last || now - last.time.getTime() < orphanAfterMs) continue;
      // Re-check: the upload may have completed since the listing.
      if ((await this.records()).some((o) => o.nuid === nuid)) continue;
      await this.handles.jsm.streams.purge(this.stream, { filter: subject });
      swept++;
    }
    return swept;
  }
}

function described(info: Pick<ObjectRecord, "name" | "size" | "digest" | "metadata" | "mtime">): StoredObject {
  const digest = info.digest?.startsWith("SHA-256=") ? Buffer.from(info.digest.slice(8), "base64url").toString("hex") : "";
  return { name: info.name, bytes: info.size, sha256: digest, metadata: { ...(info.metadata ?? {}) }, mtimeMs: Date.parse(info.mtime) };
}
