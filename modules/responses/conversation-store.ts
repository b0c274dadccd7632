import { buckets, kvToken, kvTokenDecode } from "../../lib/nats/subjects.js";
import { isRevisionConflict, live } from "../../lib/nats/kv-records.js";
import type { NatsConnection } from "@nats-io/transport-node";
import type { KV } from "@nats-io/kv";
import type { Item } from "../openai/mod.js";
import { listKeys, openKv } from "../../lib/nats/jetstream.js";

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

export interface ItemPage {
  data: Item[];
  has_more: boolean;
}

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
    const key = this.key(projectId, conversation.id);
    // Items first: the conversation exists once its head does, with its initial items.
    await Promise.all(items.map((item, i) => this.kv.put(`${key}.it.${seqToken(i)}.${kvToken(item.id)}`, JSON.stringify(item))));
    await this.kv.create(key, JSON.stringify({ conversation, next: items.length } satisfies Head));
  }

  async get(projectId: string, id: string): Promise<ConversationObject | undefined> {
    return live(await this.kv.get(this.key(projectId, id)))?.json<Head>().conversation;
  }

  async updateMetadata(projectId: string, id: string, metadata: Record<string, string>): Promise<ConversationObject | undefined> {
    const key = this.key(projectId, id);
    for (;;) {
      const entry = live(await this.kv.get(key));
      if (!entry) return undefined;
      const head = entry.json<Head>();
      head.conversation.metadata = metadata;
      try {
        await this.kv.update(key, JSON.stringify(head), entry.revision);
        return head.conversation;
      } catch (err) {
        if (!isRevisionConflict(err)) throw err;
      }
    }
  }

  /** Deletes the conversation and its items; false when there was none. */
  async delete(projectId: string, id: string): Promise<boolean> {
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
    const key = this.key(projectId, id);
    const present = new Set((await this.positions(key)).map((p) => p.itemId));
    const fresh = items.filter((item) => !present.has(item.id));
    let first: number;
    for (;;) {
      const entry = live(await this.kv.get(key));
      if (!entry) return undefined;
      const head = entry.json<Head>();
      first = head.next;
      head.next += fresh.length;
      if (fresh.length === 0) break;
      try {
        await this.kv.update(key, JSON.stringify(head), entry.revision);
        break;
      } catch (err) {
        if (!isRevisionConflict(err)) throw err;
      }
    }
    await Promise.all(fresh.map((item, i) => this.kv.put(`${key}.it.${seqToken(first + i)}.${kvToken(item.id)}`, JSON.stringify(item))));
    return fresh;
  }

  /** Every item, oldest first. */
  async items(projectId: string, id: string): Promise<Item[]> {
    const key = this.key(projectId, id);
    const positions = await this.positions(key);
    return this.fetch(positions.map((p) => p.key));
  }

  /** One page of items in `order`, starting after the item `after`. */
  async page(projectId: string, id: string, options: { limit: number; order: "asc" | "desc"; after?: string }): Promise<ItemPage | "after_not_found"> {
    let positions = await this.positions(this.key(projectId, id));
    if (options.order === "desc") positions = positions.reverse();
    let start = 0;
    if (options.after) {
      const at = positions.findIndex((p) => p.itemId === options.after);
      if (at < 0) return "after_not_found";
      start = at + 1;
    }
    const slice = positions.slice(start, start + options.limit);
    return { data: await this.fetch(slice.map((p) => p.key)), has_more: start + options.limit < positions.length };
  }

  async item(projectId: string, id: string, itemId: string): Promise<Item | undefined> {
    const found = await this.findItemKey(projectId, id, itemId);
    if (!found) return undefined;
    return live(await this.kv.get(found))?.json<Item>();
  }

  async deleteItem(projectId: string, id: string, itemId: string): Promise<boolean> {
    const found = await this.findItemKey(projectId, id, itemId);
    if (!found) return false;
    await this.kv.delete(found);
    return true;
  }

  private async findItemKey(projectId: string, id: string, itemId: string): Promise<string | undefined> {
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
    const entries = await Promise.all(keys.map((k) => this.kv.get(k)));
    return entries.flatMap((e) => {
      const entry = live(e);
      return entry ? [entry.json<Item>()] : [];
    });
  }
}
