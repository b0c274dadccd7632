import { buckets, kvToken } from "../../lib/nats/subjects.js";
import { isRevisionConflict, live } from "../../lib/nats/kv-records.js";
import type { NatsConnection } from "@nats-io/transport-node";
import type { KV } from "@nats-io/kv";
import { randomToken } from "../../lib/ids.js";
import { openKv } from "../../lib/nats/jetstream.js";
import type { Item, ResponseObject } from "../openai/mod.js";
import { CHUNK_CHARS, deleteChunks, readChunks, writeChunks } from "./kv-values.js";

/** What is kept of one response besides the public object. */
export interface StoredResponse {
  response: ResponseObject;
  /** The previous_response_id chain before this response, oldest first: its context is theirs. */
  ancestors: string[];
  /** Background responses: the request to run (its input items are the stored ones). */
  request?: unknown;
  /** Background responses: runs started so far (a worker that died leaves one behind). */
  attempts?: number;
}

/** The response object and the background request, kept together. */
interface Doc {
  response: ResponseObject;
  request?: unknown;
  attempts?: number;
}

/** The KV value at <project>.<id>, updated with compare-and-set. */
interface Head {
  v: 1;
  ancestors: string[];
  /** Number of chunks of the input items' JSON at <key>.in.<i>. */
  inputChunks: number;
  /** The document inline, or in chunks at <key>.d.<gen>.<i> when large. */
  doc?: Doc;
  docChunks?: { gen: string; count: number };
}

export interface Versioned<T> {
  value: T;
  revision: number;
}

/**
 * Stored responses in the JetStream KV bucket `responses`, every key under the owning project:
 * another project's id is simply not found. Input items are written before the head, so a head
 * that exists is complete; heads are updated with compare-and-set (background status changes
 * race with cancels). The bucket's max age expires responses (OpenAI keeps them 30 days).
 */
export class ResponseStore {
  private constructor(private readonly kv: KV) {}

  static async open(nc: NatsConnection, ttlMs: number): Promise<ResponseStore> {
    return new ResponseStore(await openKv(nc, buckets.responses, { history: 1, ttl: ttlMs }));
  }

  private key(projectId: string, id: string): string {
    return `${kvToken(projectId)}.${kvToken(id)}`;
  }

  /** Stores a new response and its input items; returns the head's revision. */
  async create(projectId: string, stored: StoredResponse, input: readonly Item[]): Promise<number> {
    const key = this.key(projectId, stored.response.id);
    const inputChunks = await writeChunks(this.kv, `${key}.in`, JSON.stringify(input));
    const head = await this.head(key, stored, inputChunks);
    return this.kv.create(key, JSON.stringify(head));
  }

  async get(projectId: string, id: string): Promise<Versioned<StoredResponse> | undefined> {
    const key = this.key(projectId, id);
    const entry = live(await this.kv.get(key));
    if (!entry) return undefined;
    const head = entry.json<Head>();
    let doc = head.doc;
    if (!doc && head.docChunks) {
      const json = await readChunks(this.kv, `${key}.d.${head.docChunks.gen}`, head.docChunks.count);
      if (json === undefined) return undefined;
      doc = JSON.parse(json) as Doc;
    }
    if (!doc) return undefined;
    const value: StoredResponse = { response: doc.response, ancestors: head.ancestors };
    if (doc.request !== undefined) value.request = doc.request;
    if (doc.attempts !== undefined) value.attempts = doc.attempts;
    return { value, revision: entry.revision };
  }

  /** Replaces the stored response if it is still at `revision`; undefined when it changed since. */
  async update(projectId: string, stored: StoredResponse, revision: number): Promise<number | undefined> {
    const key = this.key(projectId, stored.response.id);
    const previous = live(await this.kv.get(key))?.json<Head>();
    if (!previous) return undefined;
    const head = await this.head(key, stored, previous.inputChunks);
    try {
      const next = await this.kv.update(key, JSON.stringify(head), revision);
      if (previous.docChunks) await deleteChunks(this.kv, `${key}.d.${previous.docChunks.gen}`, previous.docChunks.count);
      return next;
    } catch (err) {
      if (head.docChunks) await deleteChunks(this.kv, `${key}.d.${head.docChunks.gen}`, head.docChunks.count);
      if (isRevisionConflict(err)) return undefined;
      throw err;
    }
  }

  /** Deletes a response and its items; false when there was none. */
  async delete(projectId: string, id: string): Promise<boolean> {
    const key = this.key(projectId, id);
    const head = live(await this.kv.get(key))?.json<Head>();
    if (!head) return false;
    await this.kv.delete(key);
    await deleteChunks(this.kv, `${key}.in`, head.inputChunks);
    if (head.docChunks) await deleteChunks(this.kv, `${key}.d.${head.docChunks.gen}`, head.docChunks.count);
    return true;
  }

  /** The input items of a stored response, in order. */
  async inputItems(projectId: string, id: string): Promise<Item[] | undefined> {
    const key = this.key(projectId, id);
    const head = live(await this.kv.get(key))?.json<Head>();
    if (!head) return undefined;
    const json = await readChunks(this.kv, `${key}.in`, head.inputChunks);
    return json === undefined ? undefined : (JSON.parse(json) as Item[]);
  }

  /**
   * The context a response continues from: for each response of its chain (oldest first, then
   * itself), its input items then its output items. Responses of the chain deleted since are
   * left out.
   */
  async context(projectId: string, id: string): Promise<{ response: ResponseObject; ancestors: string[]; items: Item[] } | undefined> {
    const last = await this.get(projectId, id);
    if (!last) return undefined;
    const chain = [...last.value.ancestors, id];
    const parts = await Promise.all(
      chain.map(async (rid) => {
        const stored = rid === id ? last : await this.get(projectId, rid);
        if (!stored) return [];
        const input = (await this.inputItems(projectId, rid)) ?? [];
        return [...input, ...stored.value.response.output];
      }),
    );
    return { response: last.value.response, ancestors: last.value.ancestors, items: parts.flat() };
  }

  private async head(key: string, stored: StoredResponse, inputChunks: number): Promise<Head> {
    const doc: Doc = { response: stored.response };
    if (stored.request !== undefined) doc.request = stored.request;
    if (stored.attempts !== undefined) doc.attempts = stored.attempts;
    const json = JSON.stringify(doc);
    if (json.length <= CHUNK_CHARS) return { v: 1, ancestors: stored.ancestors, inputChunks, doc };
    const gen = randomToken(8);
    const count = await writeChunks(this.kv, `${key}.d.${gen}`, json);
    return { v: 1, ancestors: stored.ancestors, inputChunks, docChunks: { gen, count } };
  }
}
