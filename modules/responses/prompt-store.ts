import * as Schema from "effect/Schema";
import { buckets, kvToken } from "../../lib/nats/subjects.js";
import { isWellFormedTemplateName } from "../../lib/ids.js";
import { getRecord, live, upsertRecord, valueSchema } from "../../lib/nats/kv-records.js";
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

const promptObject = valueSchema<PromptObject>()(
  Schema.Struct({
    id: Schema.String,
    object: Schema.Literal("prompt"),
    name: Schema.String,
    description: Schema.NullOr(Schema.String),
    version: Schema.Number,
    created_at: Schema.Number,
    updated_at: Schema.Number,
    variables: Schema.mutable(Schema.Array(Schema.String)),
    body: Schema.Record(Schema.String, Schema.Unknown),
  }),
);

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
    const now = Math.floor(Date.now() / 1000);
    const stored = await upsertRecord(this.kv, this.key(projectId, prompt.name), promptObject, (previous) => ({
      ...prompt,
      version: (previous?.version ?? 0) + 1,
      created_at: previous?.created_at ?? now,
      updated_at: now,
    }));
    return stored!.value;
  }

  async get(projectId: string, name: string): Promise<PromptObject | undefined> {
    if (!isWellFormedTemplateName(name)) return undefined; // no such key can exist: nothing is asked of NATS
    return (await getRecord(this.kv, this.key(projectId, name), promptObject))?.value;
  }

  async list(projectId: string): Promise<PromptObject[]> {
    const keys = await listKeys(this.kv, `${kvToken(projectId)}.*`);
    const prompts = await Promise.all(keys.map(async (k) => (await getRecord(this.kv, k, promptObject))?.value));
    return prompts.filter((p): p is PromptObject => p !== undefined).sort((a, b) => a.name.localeCompare(b.name));
  }

  async delete(projectId: string, name: string): Promise<boolean> {
    if (!isWellFormedTemplateName(name)) return false;
    const key = this.key(projectId, name);
    if (!live(await this.kv.get(key))) return false;
    await this.kv.delete(key);
    return true;
  }
}
