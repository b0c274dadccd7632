import * as Schema from "effect/Schema";
import { buckets, kvToken } from "../../lib/nats/subjects.js";
import { compareAndSet, getRecord, InvalidValue, isRevisionConflict, live, valueSchema, type Modified, type Versioned } from "../../lib/nats/kv-records.js";
import type { NatsConnection } from "@nats-io/transport-node";
import type { KV } from "@nats-io/kv";
import { isWellFormedId, randomToken } from "../../lib/ids.js";
import { openKv } from "../../lib/nats/jetstream.js";
import { isDomainError } from "../errors/mod.js";
import { parseResponseCreateRequest, ResponseObjectSchema, storedValues, type Item, type ResponseCreateRequest, type ResponseObject } from "../openai/mod.js";
import { HeldChargeSchema, type HeldCharge } from "../ratelimit/mod.js";
import { CHUNK_CHARS, deleteChunks, readChunks, writeChunks } from "./kv-values.js";

export type { Versioned };

/** A background response's rate-limit charge while it waits and runs. */
export interface BackgroundCharge {
  /** What the gateway charged when it queued the response (its estimate). */
  held: HeldCharge;
  /** Tokens used by runs that ended before the last one (runner lost, host stopping). */
  spentTokens: number;
  /** A run ended with its host, its usage unknown: the settlement then refunds nothing of the estimate. */
  unmetered: boolean;
}

/** What is kept of one response besides the public object. */
export interface StoredResponse {
  response: ResponseObject;
  /** The previous_response_id chain before this response, oldest first: its context is theirs. */
  ancestors: string[];
  /** Background responses: the request to run (its input items are the stored ones). */
  request?: ResponseCreateRequest;
  /** Background responses: runs started so far (a worker that died leaves one behind). */
  attempts?: number;
  /** Background responses: the rate-limit charge taken when it was queued, until a run settles it. */
  charge?: BackgroundCharge;
  /** Background responses: who queued it, so its runs' traces and usage name the key (never the key itself). */
  owner?: ResponseOwner;
}

/** The organization and API key id a background response was created with. */
export interface ResponseOwner {
  organization_id: string;
  api_key_id: string;
}

/** The response object and the background request, kept together. */
const DocSchema = Schema.Struct({
  response: ResponseObjectSchema,
  /** Checked with the request schema itself (parseResponseCreateRequest) when read. */
  request: Schema.optionalKey(Schema.Unknown),
  attempts: Schema.optionalKey(Schema.Number),
  charge: Schema.optionalKey(Schema.Struct({ held: HeldChargeSchema, spentTokens: Schema.Number, unmetered: Schema.Boolean })),
  // Absent in records queued before it was kept.
  owner: Schema.optionalKey(Schema.Struct({ organization_id: Schema.String, api_key_id: Schema.String })),
});
type Doc = Omit<StoredResponse, "ancestors" | "request"> & { request?: unknown };

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

const docSchema = valueSchema<Doc>()(DocSchema);
const headSchema = valueSchema<Head>()(
  Schema.Struct({
    v: Schema.Literal(1),
    ancestors: Schema.mutable(Schema.Array(Schema.String)),
    inputChunks: Schema.Int,
    doc: Schema.optionalKey(DocSchema),
    docChunks: Schema.optionalKey(Schema.Struct({ gen: Schema.String, count: Schema.Int })),
  }),
);

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

  /** Callers check the id's shape first (isWellFormedId): a lookup of a malformed one is "not found". */
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

  /** The stored response (InvalidValue when what is stored does not decode). */
  async get(projectId: string, id: string): Promise<Versioned<StoredResponse> | undefined> {
    if (!isWellFormedId(id)) return undefined; // no such key can exist: nothing is asked of NATS
    const key = this.key(projectId, id);
    const found = await getRecord(this.kv, key, headSchema);
    if (!found) return undefined;
    const { ancestors, docChunks } = found.value;
    let stored = found.value.doc;
    if (!stored && docChunks) {
      const json = await readChunks(this.kv, `${key}.d.${docChunks.gen}`, docChunks.count);
      if (json === undefined) return undefined;
      stored = docSchema.parse(`${key}.d.${docChunks.gen}`, json);
    }
    if (!stored) return undefined;
    const value: StoredResponse = { response: stored.response, ancestors };
    if (stored.request !== undefined) value.request = requestOf(key, stored.request);
    if (stored.attempts !== undefined) value.attempts = stored.attempts;
    if (stored.charge !== undefined) value.charge = stored.charge;
    if (stored.owner !== undefined) value.owner = stored.owner;
    return { value, revision: found.revision };
  }

  /**
   * Read-modify-write of a stored response with compare-and-set: `change` gets the current value
   * (fresh on each attempt) and returns the next one, or undefined to leave it. Undefined when
   * the response does not exist (or was deleted meanwhile).
   */
  modify(projectId: string, id: string, change: (current: StoredResponse) => StoredResponse | undefined): Promise<Modified<StoredResponse> | undefined> {
    return compareAndSet<StoredResponse>(
      { read: () => this.get(projectId, id), write: (value, revision) => this.update(projectId, value, revision!) },
      (current) => change(current!),
      { where: this.key(projectId, id) },
    );
  }

  /** Replaces the stored response if it is still at `revision`; undefined when it changed since. */
  private async update(projectId: string, stored: StoredResponse, revision: number): Promise<number | undefined> {
    const key = this.key(projectId, stored.response.id);
    const previous = (await getRecord(this.kv, key, headSchema))?.value;
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
    if (!isWellFormedId(id)) return false;
    const key = this.key(projectId, id);
    const entry = live(await this.kv.get(key));
    if (!entry) return false;
    await this.kv.delete(key);
    // The chunks go too when the head decodes; an undecodable one leaves them to the bucket's max age.
    const found = (() => {
      try {
        return headSchema.parse(key, entry.string());
      } catch (err) {
        if (err instanceof InvalidValue) return undefined;
        throw err;
      }
    })();
    if (found) {
      await deleteChunks(this.kv, `${key}.in`, found.inputChunks);
      if (found.docChunks) await deleteChunks(this.kv, `${key}.d.${found.docChunks.gen}`, found.docChunks.count);
    }
    return true;
  }

  /** The input items of a stored response, in order. */
  async inputItems(projectId: string, id: string): Promise<Item[] | undefined> {
    if (!isWellFormedId(id)) return undefined;
    const key = this.key(projectId, id);
    const found = (await getRecord(this.kv, key, headSchema))?.value;
    if (!found) return undefined;
    const json = await readChunks(this.kv, `${key}.in`, found.inputChunks);
    return json === undefined ? undefined : storedValues.items.parse(`${key}.in`, json);
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
    const value: Doc = { response: stored.response };
    if (stored.request !== undefined) value.request = stored.request;
    if (stored.attempts !== undefined) value.attempts = stored.attempts;
    if (stored.charge !== undefined) value.charge = stored.charge;
    if (stored.owner !== undefined) value.owner = stored.owner;
    const json = JSON.stringify(value);
    if (json.length <= CHUNK_CHARS) return { v: 1, ancestors: stored.ancestors, inputChunks, doc: value };
    const gen = randomToken(8);
    const count = await writeChunks(this.kv, `${key}.d.${gen}`, json);
    return { v: 1, ancestors: stored.ancestors, inputChunks, docChunks: { gen, count } };
  }
}

/** A background run's stored request, checked with the request schema it was accepted with. */
function requestOf(key: string, request: unknown): ResponseCreateRequest {
  try {
    return parseResponseCreateRequest(request);
  } catch (err) {
    if (!isDomainError(err) || err._tag !== "InvalidParam") throw err;
    throw new InvalidValue(key, `request.${err.param ?? ""}`, err.message);
  }
}
