import type { KV } from "@nats-io/kv";
import { live } from "../../lib/nats/kv-records.js";

// Helpers shared by the KV-backed stores of responses, conversations and prompts.

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
