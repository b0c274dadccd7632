import type { KV, KvEntry } from "@nats-io/kv";

// Helpers shared by the KV-backed stores of responses, conversations and prompts.

/**
 * One KV key token for an arbitrary string (project ids, template names): KV keys allow
 * [-/_=.A-Za-z0-9] and '.' separates tokens, so everything but [-_A-Za-z0-9] is written =XX
 * (UTF-8 bytes in hex). Injective, so two names never share a key.
 */
export function kvToken(value: string): string {
  let out = "";
  for (const ch of value) {
    if (/[-_A-Za-z0-9]/.test(ch)) out += ch;
    else for (const byte of Buffer.from(ch, "utf8")) out += "=" + byte.toString(16).toUpperCase().padStart(2, "0");
  }
  return out;
}

export function kvTokenDecode(token: string): string {
  const bytes: number[] = [];
  for (let i = 0; i < token.length; i++) {
    if (token[i] === "=") {
      bytes.push(parseInt(token.slice(i + 1, i + 3), 16));
      i += 2;
    } else bytes.push(token.charCodeAt(i));
  }
  return Buffer.from(bytes).toString("utf8");
}

/** The entry's value, or undefined when the key is absent or deleted. */
export function live(entry: KvEntry | null): KvEntry | undefined {
  return entry && entry.operation === "PUT" && entry.length > 0 ? entry : undefined;
}

export function isWrongRevision(err: unknown): boolean {
  const text = String((err as { message?: string })?.message ?? err);
  return /wrong last sequence|key exists|revision/i.test(text);
}

/**
 * Large JSON documents (input items, big responses) are cut into chunks well under NATS's
 * max_payload and stored as <base>.<i>; a small head elsewhere records how many there are.
 */
export const CHUNK_CHARS = 512 * 1024;

/** Cuts `text` into pieces of at most `size` UTF-16 units, never inside a surrogate pair. */
export function cutText(text: string, size = CHUNK_CHARS): string[] {
  const pieces: string[] = [];
  let start = 0;
  while (start < text.length || pieces.length === 0) {
    let end = Math.min(text.length, start + size);
    const last = text.charCodeAt(end - 1);
    if (end < text.length && last >= 0xd800 && last <= 0xdbff) end = end - 1 > start ? end - 1 : end + 1;
    pieces.push(text.slice(start, end));
    start = end;
  }
  return pieces;
}

export async function writeChunks(kv: KV, base: string, json: string): Promise<number> {
  const pieces = cutText(json);
  await Promise.all(pieces.map((piece, i) => kv.put(`${base}.${i}`, piece)));
  return pieces.length;
}

export async function readChunks(kv: KV, base: string, count: number): Promise<string | undefined> {
  const parts = await Promise.all(Array.from({ length: count }, (_, i) => kv.get(`${base}.${i}`)));
  let json = "";
  for (const p of parts) {
    const entry = live(p);
    if (!entry) return undefined;
    json += entry.string();
  }
  return json;
}

export async function deleteChunks(kv: KV, base: string, count: number): Promise<void> {
  await Promise.all(Array.from({ length: count }, (_, i) => kv.delete(`${base}.${i}`)));
}
