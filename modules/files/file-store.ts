import * as Schema from "effect/Schema";
import type { NatsConnection } from "@nats-io/transport-node";
import type { KV } from "@nats-io/kv";
import { newSortableId } from "../../lib/ids.js";
import { buckets, kvToken } from "../../lib/nats/subjects.js";
import { listKeys, openKv } from "../../lib/nats/jetstream.js";
import { ObjectContents, type StoredObject } from "../../lib/nats/object-contents.js";
import { getRecord, InvalidValue, modifyRecord, pageRecords, removeKey, removeLive, valueSchema } from "../../lib/nats/kv-records.js";
import type { Page, PageQuery } from "../../lib/page.js";

// Files: contents in a JetStream Object Store (streamed in and out in chunks, never whole in
// memory), metadata (the OpenAI file object) in a KV bucket keyed by project and file id. The
// metadata is written only once the contents are complete, so a file is either fully there or
// not at all; a reader of another project never finds it.

export const FILE_PURPOSES = ["assistants", "batch", "fine-tune", "vision", "user_data", "evals"] as const;
/** Purposes of files the platform writes itself (clients cannot upload them). */
export const SYSTEM_PURPOSES = ["batch_output", "assistants_output", "fine-tune-results"] as const;
export type FilePurpose = (typeof FILE_PURPOSES)[number] | (typeof SYSTEM_PURPOSES)[number];

/** The OpenAI file object, exactly as clients get it. */
export interface FileObject {
  id: string;
  object: "file";
  bytes: number;
  created_at: number;
  filename: string;
  purpose: FilePurpose;
  status: "processed";
  expires_at: number | null;
  status_details: null;
}

interface StoredFile {
  file: FileObject;
  project: string;
}

const NullOrTime = Schema.NullOr(Schema.Number);
const storedFile = valueSchema<StoredFile>()(
  Schema.Struct({
    file: Schema.Struct({
      id: Schema.String,
      object: Schema.Literal("file"),
      bytes: Schema.Number,
      created_at: Schema.Number,
      filename: Schema.String,
      purpose: Schema.Literals([...FILE_PURPOSES, ...SYSTEM_PURPOSES]),
      status: Schema.Literal("processed"),
      expires_at: NullOrTime,
      status_details: Schema.Null,
    }),
    project: Schema.String,
  }),
);

/** Thrown by `upload` when the contents exceed the limit given (the partial object is gone). */
export class FileTooLargeError extends Error {
  override name = "FileTooLargeError";
  constructor(readonly limit: number) {
    super(`the file exceeds ${limit} bytes`);
  }
}

/** Chunks of an upload that stopped this long ago, with no object naming them, are orphans. */
const ORPHAN_AFTER_MS = 15 * 60_000;

export interface UploadSpec {
  project: string;
  /** A fixed id (files the platform writes, so a retried write replaces its earlier attempt); random when absent. */
  id?: string;
  /** Refuse (and discard) contents beyond this many bytes. */
  maxBytes: number;
  /**
   * Called once the contents are stored, with their size: names the file (a multipart form may
   * carry `purpose` after the file part). Throwing discards the contents.
   */
  describe(bytes: number): Promise<FileDescription> | FileDescription;
}

export interface FileDescription {
  filename: string;
  purpose: FilePurpose;
  /** Unix seconds; null for no expiry. */
  expiresAt: number | null;
  createdAt?: number;
}

export interface ListOptions extends PageQuery {
  purpose?: string | undefined;
}

export class FileStore {
  private constructor(
    private readonly meta: KV,
    private readonly contents: ObjectContents,
  ) {}

  static async open(nc: NatsConnection): Promise<FileStore> {
    const [meta, contents] = await Promise.all([openKv(nc, buckets.files, { history: 1 }), ObjectContents.open(nc, buckets.fileContents)]);
    return new FileStore(meta, contents);
  }

  /**
   * Streams `source` into the Object Store as it arrives, then records the metadata. Any failure
   * (the source throws: client gone, parse error; the limit; JetStream) leaves nothing behind.
   */
  async upload(spec: UploadSpec, source: AsyncIterable<Uint8Array>): Promise<FileObject> {
    const id = spec.id ?? newSortableId("file-");
    let info: StoredObject;
    try {
      info = await this.contents.put(id, { project: spec.project }, source, { maxBytes: spec.maxBytes, tooLarge: () => new FileTooLargeError(spec.maxBytes) });
    } catch (err) {
      // The Object Store purges the chunks of a failed put itself; make sure no metadata exists either.
      await this.deleteContents(id);
      throw err;
    }
    try {
      const described = await spec.describe(info.bytes);
      const file: FileObject = {
        id,
        object: "file",
        bytes: info.bytes,
        created_at: described.createdAt ?? Math.floor(Date.now() / 1000),
        filename: described.filename,
        purpose: described.purpose,
        status: "processed",
        expires_at: described.expiresAt,
        status_details: null,
      };
      await this.meta.create(this.key(spec.project, id), JSON.stringify({ file, project: spec.project } satisfies StoredFile));
      return file;
    } catch (err) {
      await this.deleteContents(id);
      throw err;
    }
  }

  /** The file, or undefined when it does not exist, belongs to another project, or has expired. */
  async get(project: string, id: string, now = Date.now()): Promise<FileObject | undefined> {
    if (!validId(id)) return undefined;
    const file = (await getRecord(this.meta, this.key(project, id), storedFile))?.value.file;
    return !file || isExpired(file, now) ? undefined : file;
  }

  /** Sets (or clears, with null) the expiry of a file; returns the updated object. */
  async setExpiry(project: string, id: string, expiresAt: number | null): Promise<FileObject | undefined> {
    if (!validId(id)) return undefined;
    const stored = await modifyRecord(this.meta, this.key(project, id), storedFile, (current) => {
      if (isExpired(current.file, Date.now())) return undefined;
      current.file.expires_at = expiresAt;
      return current;
    });
    return stored?.changed ? stored.value.file : undefined;
  }

  /** Lists a project's live files by creation (ids sort by creation time). */
  async list(project: string, options: ListOptions): Promise<Page<FileObject>> {
    const now = Date.now();
    return pageRecords(this.meta, kvToken(project), options, async (id) => {
      const file = await this.get(project, id, now);
      return !file || (options.purpose && file.purpose !== options.purpose) ? undefined : file;
    }, { idPrefix: "file-" });
  }

  /** Deletes a file's metadata, then its contents. False when there was no such file. */
  async delete(project: string, id: string): Promise<boolean> {
    if (!validId(id)) return false;
    if (!(await removeLive(this.meta, this.key(project, id)))) return false;
    await this.deleteContents(id);
    return true;
  }

  /**
   * The contents, chunk by chunk, read with a bounded prefetch: the reader's pace (an HTTP
   * client's, say) sets the pace of the reads from JetStream.
   */
  content(id: string): AsyncGenerator<Uint8Array> {
    return this.contents.read(id);
  }

  /** The contents split into lines (without their line ends), for JSONL readers. */
  async *lines(id: string): AsyncGenerator<string> {
    const decoder = new TextDecoder("utf-8");
    let rest = "";
    for await (const chunk of this.content(id)) {
      const text = rest + decoder.decode(chunk, { stream: true });
      const parts = text.split("\n");
      rest = parts.pop()!;
      for (const p of parts) yield p.endsWith("\r") ? p.slice(0, -1) : p;
    }
    rest += decoder.decode();
    if (rest.length > 0) yield rest.endsWith("\r") ? rest.slice(0, -1) : rest;
  }

  /**
   * Deletes expired files, objects whose metadata never got written (a crash between the two
   * writes) and chunks of uploads that stopped without an object (a gateway killed mid-upload).
   */
  async sweep(now = Date.now()): Promise<{ expired: number; orphans: number; undecodable: string[] }> {
    let expired = 0;
    let orphans = 0;
    const undecodable: string[] = [];
    for (const key of await listKeys(this.meta, ">")) {
      let file: FileObject | undefined;
      try {
        file = (await getRecord(this.meta, key, storedFile))?.value.file;
      } catch (err) {
        // Left alone (its expiry is unknown) and reported; the other files are swept.
        if (!(err instanceof InvalidValue)) throw err;
        undecodable.push(key);
        continue;
      }
      if (!file || !isExpired(file, now)) continue;
      await removeKey(this.meta, key);
      await this.deleteContents(file.id);
      expired++;
    }
    for (const o of await this.contents.list()) {
      const project = o.metadata.project;
      if (!project || now - o.mtimeMs < ORPHAN_AFTER_MS) continue;
      const entry = await this.meta.get(this.key(project, o.name));
      if (!entry || entry.operation !== "PUT") {
        await this.deleteContents(o.name);
        orphans++;
      }
    }
    orphans += await this.contents.sweepOrphanChunks(now, ORPHAN_AFTER_MS);
    return { expired, orphans, undecodable };
  }

  /** Deletes an object and its delete marker too: nothing of the file stays in the stream. */
  private async deleteContents(id: string): Promise<void> {
    await this.contents.remove(id);
  }

  private key(project: string, id: string): string {
    return `${kvToken(project)}.${id}`;
  }
}

export function isExpired(file: FileObject, now: number): boolean {
  return file.expires_at !== null && file.expires_at * 1000 <= now;
}

function validId(id: string): boolean {
  return /^file-[A-Za-z0-9]{1,64}$/.test(id);
}
