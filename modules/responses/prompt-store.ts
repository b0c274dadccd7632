import { buckets, kvToken } from "../../lib/nats/subjects.js";
import { isRevisionConflict, live } from "../../lib/nats/kv-records.js";
import type { NatsConnection } from "@nats-io/transport-node";
import type { KV } from "@nats-io/kv";
import { listKeys, openKv } from "../../lib/nats/jetstream.js";

export interface PromptObject {
  id: string;
  object: "prompt";
  name: string;
  description: string | null;
  /** 1 on creation, +1 on each replacement. */
  version: number;
  created_at: number;
  updated_at: number;
  /** Placeholder names the template needs in `inputs`. */
  variables: string[];
  /** The response body it runs. */
  body: Record<string, unknown>;
}

/** Prompt templates in the JetStream KV bucket `prompts`, keyed <project>.<name>. */
export class PromptStore {
  private constructor(private readonly kv: KV) {}

  static async open(nc: NatsConnection): Promise<PromptStore> {
    return new PromptStore(await openKv(nc, buckets.prompts, { history: 1 }));
  }

  private key(projectId: string, name: string): string {
    return `${kvToken(projectId)}.${kvToken(name)}`;
  }

  /** Creates the template, or replaces it with the next version. */
  async put(projectId: string, prompt: Omit<PromptObject, "version" | "created_at" | "updated_at">): Promise<PromptObject> {
    const key = this.key(projectId, prompt.name);
    const now = Math.floor(Date.now() / 1000);
    for (;;) {
      const entry = live(await this.kv.get(key));
      const previous = entry?.json<PromptObject>();
      const next: PromptObject = { ...prompt, version: (previous?.version ?? 0) + 1, created_at: previous?.created_at ?? now, updated_at: now };
      try {
        if (entry) await this.kv.update(key, JSON.stringify(next), entry.revision);
        else await this.kv.create(key, JSON.stringify(next));
        return next;
      } catch (err) {
        if (!isRevisionConflict(err)) throw err;
      }
    }
  }

  async get(projectId: string, name: string): Promise<PromptObject | undefined> {
    return live(await this.kv.get(this.key(projectId, name)))?.json<PromptObject>();
  }

  async list(projectId: string): Promise<PromptObject[]> {
    const keys = await listKeys(this.kv, `${kvToken(projectId)}.*`);
    const entries = await Promise.all(keys.map((k) => this.kv.get(k)));
    return entries.flatMap((e) => (live(e) ? [live(e)!.json<PromptObject>()] : [])).sort((a, b) => a.name.localeCompare(b.name));
  }

  async delete(projectId: string, name: string): Promise<boolean> {
    const key = this.key(projectId, name);
    if (!live(await this.kv.get(key))) return false;
    await this.kv.delete(key);
    return true;
  }
}
