import * as Schema from "effect/Schema";
import { buckets, kvToken, kvTokenDecode } from "../../lib/nats/subjects.js";
import { getRecord, live, modifyRecord, valueSchema } from "../../lib/nats/kv-records.js";
import { pageOf, type Page, type PageQuery } from "../../lib/page.js";
import type { NatsConnection } from "@nats-io/transport-node";
import type { KV } from "@nats-io/kv";
import { storedValues, type Item } from "../openai/mod.js";
import { listKeys, openKv } from "../../lib/nats/jetstream.js";
import { ID_RULE, isWellFormedId } from "../../lib/ids.js";
import { errors } from "../errors/mod.js";

export interface ConversationObject {
  id: string;
  object: "conversation";
  created_at: number;
  metadata: Record<string, string>;
}

/** The conversation's head: its public fields and the next free item position. */
interface Head {
  conversation: ConversationObject;
  next: number;
}

const head = valueSchema<Head>()(
  Schema.Struct({
    conversation: Schema.Struct({
      id: Schema.String,
      object: Schema.Literal("conversation"),
      created_at: Schema.Number,
      metadata: Schema.Record(Schema.String, Schema.String),
    }),
    next: Schema.Number,
  }),
);

const SEQ_WIDTH = 12;
const seqToken = (seq: number) => String(seq).padStart(SEQ_WIDTH, "0");

/**
 * Conversations in the JetStream KV bucket `conversations`. The head <project>.<conv> holds the
 * conversation object and the next item position; each item is its own key
 * <project>.<conv>.it.<position>.<item id>, so items are appended, read, listed by position (the
 * zero-padded position sorts) and deleted one by one, and no value grows with the conversation.
 * Appends reserve their positions with a compare-and-set on the head, so concurrent responses
 * in one conversation never overwrite each other; their items keep the order of reservation.
 */
export class ConversationStore {
  private constructor(private readonly kv: KV) {}

  static async open(nc: NatsConnection): Promise<ConversationStore> {
    return new ConversationStore(await openKv(nc, buckets.conversations, { history: 1 }));
  }

  private key(projectId: string, id: string): string {
    return `${kvToken(projectId)}.${kvToken(id)}`;
  }

  async create(projectId: string, conversation: ConversationObject, items: readonly Item[]): Promise<void> {
    assertItemIds(items);
    const key = this.key(projectId, conversation.id);
    // Items first: the conversation exists once its head does, with its initial items.
    await Promise.all(items.map((item, i) => this.kv.put(`${key}.it.${seqToken(i)}.${kvToken(item.id)}`, JSON.stringify(item))));
    await this.kv.create(key, JSON.stringify({ conversation, next: items.length } satisfies Head));
  }

  async get(projectId: string, id: string): Promise<ConversationObject | undefined> {
    if (!isWellFormedId(id)) return undefined; // no such key can exist: nothing is asked of NATS
    return (await getRecord(this.kv, this.key(projectId, id), head))?.value.conversation;
  }

  async updateMetadata(projectId: string, id: string, metadata: Record<string, string>): Promise<ConversationObject | undefined> {
    if (!isWellFormedId(id)) return undefined;
    const stored = await modifyRecord(this.kv, this.key(projectId, id), head, (current) => {
      current.conversation.metadata = metadata;
      return current;
    });
    return stored?.value.conversation;
  }

  /** Deletes the conversation and its items; false when there was none. */
  async delete(projectId: string, id: string): Promise<boolean> {
    if (!isWellFormedId(id)) return false;
    const key = this.key(projectId, id);
    if (!live(await this.kv.get(key))) return false;
    await this.kv.delete(key);
    const keys = await listKeys(this.kv, `${key}.it.>`);
    await Promise.all(keys.map((k) => this.kv.delete(k)));
    return true;
  }

  /**
   * Appends items at the end, skipping those already in the conversation (an item_reference to
   * one of its own items). False when the conversation no longer exists.
   */
  async append(projectId: string, id: string, items: readonly Item[]): Promise<Item[] | undefined> {
    if (!isWellFormedId(id)) return undefined;
    assertItemIds(items);
    const key = this.key(projectId, id);
    const present = new Set((await this.positions(key)).map((p) => p.itemId));
    const fresh = items.filter((item) => !present.has(item.id));
    // Reserves positions first..first+n-1 by moving `next` on (none to reserve: just check it exists).
    const reserved = await modifyRecord(this.kv, key, head, (current) => (fresh.length === 0 ? undefined : { ...current, next: current.next + fresh.length }));
    if (!reserved) return undefined;
    const first = reserved.value.next - fresh.length;
    await Promise.all(fresh.map((item, i) => this.kv.put(`${key}.it.${seqToken(first + i)}.${kvToken(item.id)}`, JSON.stringify(item))));
    return fresh;
  }

  /** Every item, oldest first. */
  async items(projectId: string, id: string): Promise<Item[]> {
    if (!isWellFormedId(id)) return [];
    const key = this.key(projectId, id);
    const positions = await this.positions(key);
    return this.fetch(positions.map((p) => p.key));
  }

  /**
   * One page of items in `order`, starting after the item `after` (an empty one: from the start);
   * undefined when `after` is no item of the conversation. Only the page's items are read.
   */
  async page(projectId: string, id: string, options: PageQuery): Promise<Page<Item> | undefined> {
    if (!isWellFormedId(id)) return { data: [], has_more: false };
    const positions = await this.positions(this.key(projectId, id));
    const page = pageOf(positions, { ...options, after: options.after || undefined }, (p) => p.itemId);
    return page && { ...page, data: await this.fetch(page.data.map((p) => p.key)) };
  }

  async item(projectId: string, id: string, itemId: string): Promise<Item | undefined> {
    const found = await this.findItemKey(projectId, id, itemId);
    if (!found) return undefined;
    return (await getRecord(this.kv, found, storedValues.item))?.value;
  }

  async deleteItem(projectId: string, id: string, itemId: string): Promise<boolean> {
    const found = await this.findItemKey(projectId, id, itemId);
    if (!found) return false;
    await this.kv.delete(found);
    return true;
  }

  private async findItemKey(projectId: string, id: string, itemId: string): Promise<string | undefined> {
    if (!isWellFormedId(id) || !isWellFormedId(itemId)) return undefined;
    const keys = await listKeys(this.kv, `${this.key(projectId, id)}.it.*.${kvToken(itemId)}`);
    return keys.sort()[0];
  }

  /** The item keys of a conversation in position order. */
  private async positions(key: string): Promise<Array<{ key: string; itemId: string }>> {
    const keys = await listKeys(this.kv, `${key}.it.>`);
    keys.sort();
    return keys.map((k) => ({ key: k, itemId: kvTokenDecode(k.slice(k.lastIndexOf(".") + 1)) }));
  }

  private async fetch(keys: readonly string[]): Promise<Item[]> {
    const items = await Promise.all(keys.map(async (k) => (await getRecord(this.kv, k, storedValues.item))?.value));
    return items.filter((item): item is Item => item !== undefined);
  }
}

/**
 * Item ids become KV key tokens: the request schemas check ids clients send, and this checks
 * again at the store, so no path (a batch line, a stored request) writes a key of another shape.
 */
function assertItemIds(items: readonly Item[]): void {
  items.forEach((item, i) => {
    if (!isWellFormedId(item.id)) throw errors.invalidParam(`items[${i}].id`, `Invalid value for 'items[${i}].id': ${ID_RULE}.`);
  });
}
