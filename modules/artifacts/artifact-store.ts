import * as Schema from "effect/Schema";
import type { NatsConnection } from "@nats-io/transport-node";
import type { KV } from "@nats-io/kv";
import { newSortableId, randomToken } from "../../lib/ids.js";
import { buckets, kvToken, kvTokenDecode } from "../../lib/nats/subjects.js";
import { listKeys, openKv } from "../../lib/nats/jetstream.js";
import { getRecord, InvalidValue, modifyRecord, pageRecords, removeKey, removeLive, valueSchema } from "../../lib/nats/kv-records.js";
import { nextAfter, type Page, type PageQuery } from "../../lib/page.js";
import { ObjectContents, type StoredObject } from "../../lib/nats/object-contents.js";
import { errors, shown } from "../errors/mod.js";

// Artifacts: archives a project uploads (app bundles, with their manifest text), either in one
// request or in numbered parts. Records (the artifact object) live in a KV bucket keyed by
// project and id; bytes in an Object Store: a single-shot artifact's object is named by its id,
// the parts of an unfinished upload are objects `<id>.part-<n>` until finish streams them, in
// order, into an object `<id>.final-<token>` that the record then names; each received part has
// an index entry `<project>.<id>.<n>` beside the record, so that nothing needs to list the whole
// bucket. A single-shot artifact's record is written only once its bytes are stored, so a broken
// upload leaves no artifact; an unfinished multipart upload expires and the sweeper (actor host)
// deletes its parts.

export type ArtifactStatus = "uploading" | "ready";

/** The artifact object, exactly as clients get it. */
export interface Artifact {
  id: string;
  object: "artifact";
  /** The size: declared while uploading in parts, stored once ready. */
  bytes: number;
  /** Hex SHA-256: declared (or null) while uploading in parts, computed once ready. */
  sha256: string | null;
  status: ArtifactStatus;
  /** Unix seconds. */
  created_at: number;
  /** Unix seconds: when an unfinished upload expires; null once ready. */
  expires_at: number | null;
  filename: string;
  /** The manifest text sent with an app bundle. */
  manifest: string | null;
  /** While uploading in parts: the size of every part but the last. */
  part_size: number | null;
}

interface StoredArtifact {
  artifact: Artifact;
  project: string;
  /**
   * The Object Store object holding a ready artifact's bytes: the artifact id for a single-shot
   * upload; `<id>.final-<token>` for an assembled one (each finish writes its own object, so
   * two racing finishes never overwrite the bytes the winner recorded).
   */
  object?: string;
}

const storedArtifact = valueSchema<StoredArtifact>()(
  Schema.Struct({
    artifact: Schema.Struct({
      id: Schema.String,
      object: Schema.Literal("artifact"),
      bytes: Schema.Number,
      sha256: Schema.NullOr(Schema.String),
      status: Schema.Literals(["uploading", "ready"]),
      created_at: Schema.Number,
      expires_at: Schema.NullOr(Schema.Number),
      filename: Schema.String,
      manifest: Schema.NullOr(Schema.String),
      part_size: Schema.NullOr(Schema.Number),
    }),
    project: Schema.String,
    object: Schema.optional(Schema.String),
  }),
);

/** The bounds of uploads (lib/config.ts artifactsConfig); the gateway validates requests against them too. */
export interface ArtifactLimits {
  maxBytes: number;
  maxSingleUploadBytes: number;
  partBytes: number;
  minPartBytes: number;
  maxPartBytes: number;
  maxParts: number;
  uploadTtlS: number;
  maxOpenUploads: number;
}

/** An uploaded part, as the part route answers it. */
export interface UploadedPart {
  part_number: number;
  bytes: number;
  sha256: string;
}

export interface NewUpload {
  filename: string;
  bytes: number;
  sha256?: string;
  manifest?: string;
}

export interface ArtifactListOptions extends PageQuery {
  status: ArtifactStatus;
}

/** The index entry of an uploaded part, KV key `<project>.<artifact id>.<part number>`. */
const partIndex = valueSchema<UploadedPart>()(Schema.Struct({ part_number: Schema.Number, bytes: Schema.Number, sha256: Schema.String }));

const ID_PREFIX = "artifact-";
const partName = (id: string, part: number) => `${id}.part-${part}`;
const objectOf = (stored: StoredArtifact) => stored.object ?? stored.artifact.id;

export class ArtifactStore {
  private constructor(
    private readonly meta: KV,
    private readonly contents: ObjectContents,
  ) {}

  static async open(nc: NatsConnection): Promise<ArtifactStore> {
    const [meta, contents] = await Promise.all([openKv(nc, buckets.artifacts, { history: 1 }), ObjectContents.open(nc, buckets.artifactContents)]);
    return new ArtifactStore(meta, contents);
  }

  /** The artifact (ready or uploading), or undefined when it does not exist, belongs to another project or expired unfinished. */
  async get(project: string, id: string, now = Date.now()): Promise<Artifact | undefined> {
    return (await this.stored(project, id, now))?.artifact;
  }

  private async stored(project: string, id: string, now = Date.now()): Promise<StoredArtifact | undefined> {
    if (!validArtifactId(id)) return undefined;
    const stored = (await getRecord(this.meta, this.key(project, id), storedArtifact))?.value;
    return !stored || isExpired(stored.artifact, now) ? undefined : stored;
  }

  /**
   * A ready artifact's bytes, chunk by chunk as they are read from JetStream (bounded prefetch:
   * the consumer's pace sets the reads). NotFound when the project has no such ready artifact.
   */
  async *content(project: string, id: string): AsyncGenerator<Uint8Array> {
    const stored = await this.stored(project, id);
    if (!stored || stored.artifact.status !== "ready") throw errors.notFound(`No such artifact: ${shown(id)}`, "id");
    yield* this.contents.read(objectOf(stored));
  }

  /**
   * Single-shot upload: streams `source` into the Object Store as it arrives, then records the
   * artifact. `describe` runs once the bytes are stored (a form may carry fields after the file)
   * and may throw to refuse them. Any failure leaves nothing behind.
   */
  async upload(
    spec: { project: string; maxBytes: number; tooLarge: () => Error; describe(bytes: number): Promise<{ filename: string; manifest: string | null }> },
    source: AsyncIterable<Uint8Array>,
  ): Promise<Artifact> {
    const id = newSortableId(ID_PREFIX);
    let stored: StoredObject;
    try {
      stored = await this.contents.put(id, { project: spec.project }, source, { maxBytes: spec.maxBytes, tooLarge: spec.tooLarge });
    } catch (err) {
      await this.contents.remove(id);
      throw err;
    }
    try {
      const described = await spec.describe(stored.bytes);
      const artifact: Artifact = {
        id,
        object: "artifact",
        bytes: stored.bytes,
        sha256: stored.sha256,
        status: "ready",
        created_at: Math.floor(Date.now() / 1000),
        expires_at: null,
        filename: described.filename,
        manifest: described.manifest,
        part_size: null,
      };
      await this.meta.create(this.key(spec.project, id), JSON.stringify({ artifact, project: spec.project } satisfies StoredArtifact));
      return artifact;
    } catch (err) {
      await this.contents.remove(id);
      throw err;
    }
  }

  /** Lists a project's artifacts of one status by creation (ids sort by creation time). */
  async list(project: string, options: ArtifactListOptions): Promise<Page<Artifact>> {
    const now = Date.now();
    return pageRecords(this.meta, kvToken(project), options, async (id) => {
      const artifact = await this.get(project, id, now);
      return artifact?.status === options.status ? artifact : undefined;
    }, { idPrefix: ID_PREFIX });
  }

  /** Deletes an artifact (ready or uploading): its record, then its bytes and parts. False when there was none. */
  async delete(project: string, id: string): Promise<boolean> {
    const stored = await this.stored(project, id);
    if (!stored || !(await removeLive(this.meta, this.key(project, id)))) return false;
    await this.removeBytes(project, stored);
    return true;
  }

  /** The project's unfinished uploads, counted up to `max` (pages go on past a page's skip bound). */
  private async countUploading(project: string, max: number): Promise<number> {
    let open = 0;
    let after: string | undefined;
    for (;;) {
      const page = await this.list(project, { status: "uploading", limit: max - open, order: "asc", after });
      open += page.data.length;
      if (!page.has_more || open >= max) return open;
      after = nextAfter(page);
    }
  }

  /** Starts a multipart upload (its terms already validated against the limits). */
  async createUpload(project: string, upload: NewUpload, limits: ArtifactLimits, now = Date.now()): Promise<Artifact> {
    const open = await this.countUploading(project, limits.maxOpenUploads);
    if (open >= limits.maxOpenUploads)
      throw errors.invalidParam(null, `This project already has ${open} unfinished uploads (the most is ${limits.maxOpenUploads}): finish or delete one first.`, "too_many_uploads");
    const createdAt = Math.floor(now / 1000);
    const artifact: Artifact = {
      id: newSortableId(ID_PREFIX),
      object: "artifact",
      bytes: upload.bytes,
      sha256: upload.sha256 ?? null,
      status: "uploading",
      created_at: createdAt,
      expires_at: createdAt + limits.uploadTtlS,
      filename: upload.filename,
      manifest: upload.manifest ?? null,
      part_size: partSizeFor(upload.bytes, limits),
    };
    await this.meta.create(this.key(project, artifact.id), JSON.stringify({ artifact, project } satisfies StoredArtifact));
    return artifact;
  }

  /**
   * Streams one part into the Object Store (replacing an earlier part of that number once
   * complete). Parts may arrive in parallel and in any order.
   */
  async putPart(project: string, id: string, partNumber: number, source: AsyncIterable<Uint8Array>, limits: ArtifactLimits): Promise<UploadedPart> {
    await this.openUpload(project, id);
    const name = partName(id, partNumber);
    const tooLarge = () => errors.invalidParam("body", `A part may be at most ${limits.maxPartBytes} bytes.`, "part_too_large");
    const stored = await this.contents.put(name, { project, artifact: id, part: String(partNumber) }, source, { maxBytes: limits.maxPartBytes, tooLarge });
    // The upload may have finished, expired or been deleted while this part arrived: then the
    // part belongs to nothing.
    if (!(await this.get(project, id).then((a) => a?.status === "uploading"))) {
      await this.contents.remove(name);
      throw errors.notFound(`No unfinished upload ${shown(id)}.`, "artifact_id");
    }
    const part: UploadedPart = { part_number: partNumber, bytes: stored.bytes, sha256: stored.sha256 };
    // The index says which parts exist without listing the whole bucket; finish still reads
    // each part's size and checksum from the Object Store (a racing re-send may have won there).
    await this.meta.put(this.partKey(project, id, partNumber), JSON.stringify(part));
    return part;
  }

  /** The parts of an unfinished upload received so far, by part number. */
  async listParts(project: string, id: string): Promise<UploadedPart[]> {
    await this.openUpload(project, id);
    return this.indexedParts(project, id);
  }

  private async indexedParts(project: string, id: string): Promise<UploadedPart[]> {
    const prefix = `${this.key(project, id)}.`;
    const numbers = await listKeys(this.meta, `${prefix}*`, prefix);
    const parts = await Promise.all(numbers.map((n) => getRecord(this.meta, prefix + n, partIndex)));
    return parts.flatMap((p) => (p ? [p.value] : [])).sort((a, b) => a.part_number - b.part_number);
  }

  /** The uploaded parts as the Object Store holds them now, by part number. */
  private async uploadedParts(project: string, id: string): Promise<Map<number, StoredObject>> {
    const uploaded = new Map<number, StoredObject>();
    await Promise.all(
      (await this.indexedParts(project, id)).map(async (p) => {
        const o = await this.contents.info(partName(id, p.part_number));
        if (o) uploaded.set(p.part_number, o);
      }),
    );
    return uploaded;
  }

  /**
   * Assembles the parts, in order, into the artifact (streamed part by part) and verifies it
   * against the declared size and sha256. `listed` is the client's ordered part list, when sent.
   * A refused finish changes nothing: the client may replace parts and finish again. Finishing a
   * ready artifact again returns it.
   */
  async finish(project: string, id: string, listed: Array<{ part_number: number; sha256?: string }> | undefined, limits: ArtifactLimits): Promise<Artifact> {
    const current = await this.get(project, id);
    if (!current) throw errors.notFound(`No such upload: ${shown(id)}`, "artifact_id");
    if (current.status === "ready") return current;
    const uploaded = await this.uploadedParts(project, id);
    const order = assemblyOrder(uploaded, listed, limits);
    const total = order.reduce((sum, o) => sum + o.bytes, 0);
    if (total !== current.bytes)
      throw errors.invalidParam("bytes", `The parts hold ${total} bytes in all, but the upload declared ${current.bytes} bytes.`, "size_mismatch");
    const contents = this.contents;
    async function* assembled(): AsyncGenerator<Uint8Array> {
      for (const part of order) yield* contents.read(part.name);
    }
    const mismatch = () => errors.invalidParam("bytes", `The parts changed while they were assembled (more than the declared ${current.bytes} bytes).`, "size_mismatch");
    const object = `${id}.final-${randomToken(12)}`;
    let stored: StoredObject;
    try {
      stored = await this.contents.put(object, { project, artifact: id }, assembled(), { maxBytes: current.bytes, tooLarge: mismatch });
    } catch (err) {
      await this.contents.remove(object);
      throw err;
    }
    const refuse = async (error: Error) => {
      await this.contents.remove(object);
      throw error;
    };
    if (stored.bytes !== current.bytes) await refuse(mismatch());
    if (current.sha256 !== null && stored.sha256 !== current.sha256)
      await refuse(errors.invalidParam("sha256", `The assembled artifact's sha256 is ${stored.sha256}, but the upload declared ${current.sha256}.`, "checksum_mismatch"));
    const done = await modifyRecord(this.meta, this.key(project, id), storedArtifact, (record) => {
      if (record.artifact.status !== "uploading" || isExpired(record.artifact, Date.now())) return undefined;
      record.artifact = { ...record.artifact, status: "ready", bytes: stored.bytes, sha256: stored.sha256, expires_at: null, part_size: null };
      record.object = object;
      return record;
    });
    if (!done?.changed) {
      // Finished by a concurrent finish (whose own object holds the bytes), or gone meanwhile.
      await this.contents.remove(object);
      const now = await this.get(project, id);
      if (now?.status === "ready") return now;
      throw errors.notFound(`No such upload: ${shown(id)}`, "artifact_id");
    }
    await this.removeParts(project, id);
    return done.value.artifact;
  }

  /**
   * Deletes unfinished uploads past their expiry with their parts, objects no record names (a
   * crash between the bytes and the record, parts of deleted uploads) and chunks of puts that
   * stopped without an object (a gateway killed mid-upload), each once idle for `orphanAfterMs`.
   */
  async sweep(orphanAfterMs: number, now = Date.now()): Promise<{ expired: number; orphans: number; undecodable: string[] }> {
    let expired = 0;
    let orphans = 0;
    const undecodable: string[] = [];
    for (const key of await listKeys(this.meta, "*.*")) {
      let record: StoredArtifact | undefined;
      try {
        record = (await getRecord(this.meta, key, storedArtifact))?.value;
      } catch (err) {
        if (!(err instanceof InvalidValue)) throw err;
        undecodable.push(key);
        continue;
      }
      if (!record || !isExpired(record.artifact, now)) continue;
      await removeKey(this.meta, key);
      await this.removeBytes(kvTokenDecode(key.slice(0, key.indexOf("."))), record);
      expired++;
    }
    // Part index entries outlive their upload only by a crash between the steps above.
    for (const key of await listKeys(this.meta, "*.*.*")) {
      const recordKey = key.slice(0, key.lastIndexOf("."));
      const record = await getRecord(this.meta, recordKey, storedArtifact).catch(() => undefined);
      if (record?.value.artifact.status !== "uploading") await removeKey(this.meta, key);
    }
    for (const o of await this.contents.list()) {
      const project = o.metadata.project;
      if (!project || now - o.mtimeMs < orphanAfterMs) continue;
      const record = await this.stored(project, o.metadata.artifact ?? o.name, now).catch(() => undefined);
      // A part outlives its upload's finish only by a crash; the bytes of an artifact are the one
      // object its record names (a finish that lost a race, or crashed before its record, left others).
      const wanted = o.metadata.part !== undefined ? record?.artifact.status === "uploading" : record?.artifact.status === "ready" && objectOf(record) === o.name;
      if (!wanted) {
        await this.contents.remove(o.name);
        orphans++;
      }
    }
    orphans += await this.contents.sweepOrphanChunks(now, orphanAfterMs);
    return { expired, orphans, undecodable };
  }

  /** The upload, when it is unfinished and unexpired; NotFound or a refusal otherwise. */
  private async openUpload(project: string, id: string): Promise<Artifact> {
    const artifact = await this.get(project, id);
    if (!artifact) throw errors.notFound(`No such upload: ${shown(id)}`, "artifact_id");
    if (artifact.status !== "uploading") throw errors.invalidParam("artifact_id", `The upload ${id} is already finished.`, "upload_finished");
    return artifact;
  }

  /** Removes an artifact's bytes and parts (objects a crash left beside them go to the sweeper). */
  private async removeBytes(project: string, stored: StoredArtifact): Promise<void> {
    await this.contents.remove(objectOf(stored));
    await this.removeParts(project, stored.artifact.id);
  }

  /** Removes the parts of an upload and their index entries. */
  private async removeParts(project: string, id: string): Promise<void> {
    for (const part of await this.indexedParts(project, id)) {
      await this.contents.remove(partName(id, part.part_number));
      await removeKey(this.meta, this.partKey(project, id, part.part_number));
    }
  }

  private key(project: string, id: string): string {
    return `${kvToken(project)}.${id}`;
  }

  private partKey(project: string, id: string, part: number): string {
    return `${this.key(project, id)}.${part}`;
  }
}

/** The part size offered for `bytes`: the configured one, larger when the most parts would not hold it. */
export function partSizeFor(bytes: number, limits: Pick<ArtifactLimits, "partBytes" | "maxParts" | "maxPartBytes">): number {
  return Math.min(limits.maxPartBytes, Math.max(limits.partBytes, Math.ceil(bytes / limits.maxParts)));
}

/**
 * The parts to assemble, in order, or a refusal naming the first problem: a part listed twice,
 * a list out of order, a missing part (listed but not uploaded, or a gap), a listed checksum
 * that differs from the uploaded part's, a part uploaded but left out of the list, and a part
 * other than the last below the minimum part size.
 */
export function assemblyOrder(
  uploaded: ReadonlyMap<number, StoredObject>,
  listed: ReadonlyArray<{ part_number: number; sha256?: string }> | undefined,
  limits: Pick<ArtifactLimits, "minPartBytes">,
): StoredObject[] {
  const order: StoredObject[] = [];
  if (listed) {
    if (listed.length === 0) throw errors.invalidParam("parts", "The part list is empty.", "missing_part");
    const seen = new Set<number>();
    for (let i = 0; i < listed.length; i++) {
      const entry = listed[i]!;
      if (seen.has(entry.part_number))
        throw errors.invalidParam(`parts[${i}].part_number`, `Part ${entry.part_number} is listed twice.`, "duplicate_part");
      seen.add(entry.part_number);
    }
    for (let i = 1; i < listed.length; i++) {
      if (listed[i]!.part_number < listed[i - 1]!.part_number)
        throw errors.invalidParam(
          `parts[${i}].part_number`,
          `The part list is out of order: part ${listed[i]!.part_number} follows part ${listed[i - 1]!.part_number}.`,
          "parts_out_of_order",
        );
    }
    for (let i = 0; i < listed.length; i++) {
      const entry = listed[i]!;
      const param = `parts[${i}].part_number`;
      if (entry.part_number !== i + 1) throw errors.invalidParam(param, `Part ${i + 1} is missing from the list.`, "missing_part");
      const part = uploaded.get(entry.part_number);
      if (!part) throw errors.invalidParam(param, `Part ${entry.part_number} was never uploaded.`, "missing_part");
      if (entry.sha256 !== undefined && entry.sha256 !== part.sha256)
        throw errors.invalidParam(`parts[${i}].sha256`, `Part ${entry.part_number}'s sha256 is ${part.sha256}, not ${entry.sha256}.`, "checksum_mismatch");
      order.push(part);
    }
    const extra = [...uploaded.keys()].filter((n) => n > listed.length).sort((a, b) => a - b)[0];
    if (extra !== undefined) throw errors.invalidParam("parts", `Part ${extra} was uploaded but is not in the list.`, "unlisted_part");
  } else {
    const highest = Math.max(0, ...uploaded.keys());
    if (highest === 0) throw errors.invalidParam("parts", "No part was uploaded.", "missing_part");
    for (let n = 1; n <= highest; n++) {
      const part = uploaded.get(n);
      if (!part) throw errors.invalidParam("parts", `Part ${n} is missing (parts up to ${highest} were uploaded).`, "missing_part");
      order.push(part);
    }
  }
  for (let i = 0; i < order.length - 1; i++) {
    if (order[i]!.bytes < limits.minPartBytes)
      throw errors.invalidParam(
        "parts",
        `Part ${i + 1} is ${order[i]!.bytes} bytes, below the minimum part size of ${limits.minPartBytes} bytes; only the last part may be smaller.`,
        "part_too_small",
      );
  }
  return order;
}

export function isExpired(artifact: Artifact, now: number): boolean {
  return artifact.expires_at !== null && artifact.expires_at * 1000 <= now;
}

export function validArtifactId(id: string): boolean {
  return /^artifact-[A-Za-z0-9]{1,64}$/.test(id);
}
