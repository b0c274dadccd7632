import { createCipheriv, createDecipheriv, createHash, randomBytes } from "node:crypto";
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import * as Schema from "effect/Schema";
import type { KV } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import { listKeys, openKv } from "../../lib/nats/jetstream.js";
import { createRecord, getRecord, live, modifyRecord, valueSchema, type Mutable } from "../../lib/nats/kv-records.js";
import { buckets, kvToken, kvTokenDecode } from "../../lib/nats/subjects.js";
import { prefixAdmission, type Admission } from "../../lib/nats/admission.js";

// Project secrets, envelope-encrypted at rest: each secret has its own data key (AES-256-GCM),
// and that key is stored wrapped (AES-256-GCM) by the master key, which never enters JetStream.
// The wrapped key records the master key's id, so the master key can be rotated: `rewrap` wraps
// every data key again with the current master key. Values are returned only by `reveal`, which
// the sandbox host calls at sandbox start; nothing else hands a value out.

export const SECRET_NAME = /^[A-Z_][A-Z0-9_]{0,127}$/;

export interface MasterKey {
  id: string;
  key: Buffer;
}

/** The current master key and the earlier ones still accepted for unwrapping. */
export interface KeyRing {
  current: MasterKey;
  previous: MasterKey[];
}

function parseKey(text: string, fallbackId: string): MasterKey {
  const colon = text.indexOf(":");
  const [id, b64] = colon > 0 ? [text.slice(0, colon), text.slice(colon + 1)] : [fallbackId, text];
  const key = Buffer.from(b64.trim(), "base64");
  if (key.length !== 32) throw new Error(`secrets master key ${id} must be 32 bytes, base64-encoded (got ${key.length} bytes)`);
  if (!/^[A-Za-z0-9_-]{1,64}$/.test(id)) throw new Error("secrets master key ids are 1-64 characters of A-Z, a-z, 0-9, _ and -");
  return { id, key };
}

/** The key id of a key with no id of its own: a short hash of it. */
const derivedId = (b64: string) => "k" + createHash("sha256").update(b64.trim()).digest("hex").slice(0, 12);

/**
 * The key ring from configuration: TRIBUTARY_SECRETS_KEY, else $TRIBUTARY_HOME/secrets-key
 * (made once, mode 0600); TRIBUTARY_SECRETS_PREVIOUS_KEYS for a rotation in progress.
 */
export function loadKeyRing(configured: string | undefined, previous: string, home: string): KeyRing {
  let text = configured;
  if (!text) {
    const file = join(home, "secrets-key");
    if (!existsSync(file)) {
      mkdirSync(home, { recursive: true });
      try {
        writeFileSync(file, randomBytes(32).toString("base64") + "\n", { mode: 0o600, flag: "wx" });
      } catch (err) {
        // Another process (the gateway and the sandbox host start together) made it first: use theirs.
        if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
      }
    }
    chmodSync(file, 0o600);
    text = readFileSync(file, "utf8").trim();
    // Made by another process a moment ago: its content may not be written yet.
    for (let i = 0; i < 50 && !text; i++) {
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 20);
      text = readFileSync(file, "utf8").trim();
    }
  }
  const current = parseKey(text, derivedId(text.includes(":") ? text.slice(text.indexOf(":") + 1) : text));
  const olds = previous
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean)
    .map((s) => parseKey(s, derivedId(s.includes(":") ? s.slice(s.indexOf(":") + 1) : s)));
  return { current, previous: olds };
}

const StoredSecretSchema = Schema.Struct({
  name: Schema.String,
  version: Schema.Number,
  created_at: Schema.Number,
  updated_at: Schema.Number,
  /** Id of the master key that wrapped `wrapped_key`. */
  key_id: Schema.String,
  /** The data key, AES-256-GCM under the master key: iv(12) | tag(16) | ciphertext, base64. */
  wrapped_key: Schema.String,
  /** The value, AES-256-GCM under the data key: iv(12) | tag(16) | ciphertext, base64. */
  ciphertext: Schema.String,
});
export type StoredSecret = Mutable<typeof StoredSecretSchema.Type>;
const storedSecret = valueSchema<StoredSecret>()(StoredSecretSchema);

/** What the API shows of a secret: never its value. */
export interface SecretObject {
  object: "secret";
  name: string;
  version: number;
  created_at: number;
  updated_at: number;
}

const seal = (key: Buffer, plain: Buffer, aad: string): string => {
  const iv = randomBytes(12);
  const cipher = createCipheriv("aes-256-gcm", key, iv);
  cipher.setAAD(Buffer.from(aad));
  const body = Buffer.concat([cipher.update(plain), cipher.final()]);
  return Buffer.concat([iv, cipher.getAuthTag(), body]).toString("base64");
};

const open = (key: Buffer, sealed: string, aad: string): Buffer => {
  const raw = Buffer.from(sealed, "base64");
  const decipher = createDecipheriv("aes-256-gcm", key, raw.subarray(0, 12));
  decipher.setAAD(Buffer.from(aad));
  decipher.setAuthTag(raw.subarray(12, 28));
  return Buffer.concat([decipher.update(raw.subarray(28)), decipher.final()]);
};

const toObject = (s: StoredSecret): SecretObject => ({ object: "secret", name: s.name, version: s.version, created_at: s.created_at, updated_at: s.updated_at });

export class SecretStore {
  private constructor(readonly kv: KV, private readonly ring: KeyRing) {}

  static async open(nc: NatsConnection, ring: KeyRing): Promise<SecretStore> {
    return new SecretStore(await openKv(nc, buckets.secrets, { history: 1 }), ring);
  }

  private key(project: string, name: string): string {
    return `${kvToken(project)}.${name}`;
  }

  /** Binds a ciphertext to its project and name: a record copied under another key does not open. */
  private aad(project: string, name: string): string {
    return `${project}\u0000${name}`;
  }

  private encrypt(project: string, name: string, value: string): Pick<StoredSecret, "key_id" | "wrapped_key" | "ciphertext"> {
    const dataKey = randomBytes(32);
    const aad = this.aad(project, name);
    return { key_id: this.ring.current.id, wrapped_key: seal(this.ring.current.key, dataKey, aad), ciphertext: seal(dataKey, Buffer.from(value, "utf8"), aad) };
  }

  private masterKey(id: string): MasterKey {
    const key = [this.ring.current, ...this.ring.previous].find((k) => k.id === id);
    if (!key) throw new Error(`secret is wrapped by master key ${id}, which this process does not have`);
    return key;
  }

  /**
   * The project's secret bound: admission through a counter record beside the secrets
   * (<project>.index.admitted: three tokens, outside the listings of <project>.*), so of creates
   * racing for the last place exactly one gets it. Secrets are deleted without telling the
   * counter and a name can be created again, so the bound recounts (lib/nats/admission.ts).
   */
  private bound(project: string, max: number): Admission {
    return prefixAdmission(this.kv, `${kvToken(project)}.`, max, { recount: true });
  }

  /**
   * Creates the secret, unless the name is in use (`exists`: rotate it instead; it takes no place)
   * or the project holds `maxPerProject` secrets (`held`: how many the counter holds).
   */
  async create(project: string, name: string, value: string, maxPerProject: number): Promise<{ created: SecretObject } | { exists: true } | { held: number }> {
    const key = this.key(project, name);
    const exists = async () => live(await this.kv.get(key)) !== undefined;
    if (await exists()) return { exists: true };
    const now = Math.floor(Date.now() / 1000);
    const record: StoredSecret = { name, version: 1, created_at: now, updated_at: now, ...this.encrypt(project, name, value) };
    const result = await this.bound(project, maxPerProject).within(name, () => createRecord(this.kv, key, record), (revision) => revision !== undefined);
    // Refused at the bound: a create of the same name that took the last place is what it always was, a name in use.
    if (!result.admitted) return (await exists()) ? { exists: true } : { held: result.held };
    return result.value === undefined ? { exists: true } : { created: toObject(record) };
  }

  /** A new value under a fresh data key, version + 1; undefined when there is no such secret. */
  async rotate(project: string, name: string, value: string): Promise<SecretObject | undefined> {
    const result = await modifyRecord(this.kv, this.key(project, name), storedSecret, (current) => ({
      ...current,
      version: current.version + 1,
      updated_at: Math.floor(Date.now() / 1000),
      ...this.encrypt(project, name, value),
    }));
    return result ? toObject(result.value) : undefined;
  }

  async get(project: string, name: string): Promise<SecretObject | undefined> {
    const found = await getRecord(this.kv, this.key(project, name), storedSecret);
    return found ? toObject(found.value) : undefined;
  }

  async list(project: string): Promise<SecretObject[]> {
    const keys = await listKeys(this.kv, `${kvToken(project)}.*`);
    const found = await Promise.all(keys.map((k) => getRecord(this.kv, k, storedSecret)));
    return found.flatMap((f) => (f ? [toObject(f.value)] : [])).sort((a, b) => a.name.localeCompare(b.name));
  }

  async delete(project: string, name: string): Promise<boolean> {
    const key = this.key(project, name);
    if (!live(await this.kv.get(key))) return false;
    await this.kv.delete(key);
    return true;
  }

  /** The plaintext values of `names` (sandbox hosts only, at sandbox start); the names missing. */
  async reveal(project: string, names: readonly string[]): Promise<{ values: Record<string, string>; missing: string[] }> {
    const values: Record<string, string> = {};
    const missing: string[] = [];
    for (const name of names) {
      const found = await getRecord(this.kv, this.key(project, name), storedSecret);
      if (!found) {
        missing.push(name);
        continue;
      }
      const s = found.value;
      const aad = this.aad(project, name);
      const dataKey = open(this.masterKey(s.key_id).key, s.wrapped_key, aad);
      values[name] = open(dataKey, s.ciphertext, aad).toString("utf8");
    }
    return { values, missing };
  }

  /**
   * Wraps every data key not under the current master key again with it (values untouched).
   * Run after adding a new TRIBUTARY_SECRETS_KEY with the old one in TRIBUTARY_SECRETS_PREVIOUS_KEYS.
   */
  async rewrap(): Promise<{ rewrapped: number; current: number }> {
    let rewrapped = 0;
    let current = 0;
    for (const key of await listKeys(this.kv, "*.*")) {
      const [projectToken] = key.split(".");
      const result = await modifyRecord(this.kv, key, storedSecret, (s) => {
        if (s.key_id === this.ring.current.id) return undefined;
        const project = kvTokenDecode(projectToken!);
        const aad = this.aad(project, s.name);
        const dataKey = open(this.masterKey(s.key_id).key, s.wrapped_key, aad);
        return { ...s, key_id: this.ring.current.id, wrapped_key: seal(this.ring.current.key, dataKey, aad) };
      });
      if (result?.changed) rewrapped++;
      else if (result) current++;
    }
    return { rewrapped, current };
  }
}
