import { randomBytes } from "node:crypto";

// Ids are random base62 strings behind OpenAI's prefixes (chatcmpl-, call_, resp_, ...).
// Random bytes come from a pool refilled in bulk: ids are minted on the request path.
const ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
const POOL_SIZE = 4096;
let pool = randomBytes(POOL_SIZE);
let offset = 0;

export function randomToken(length = 24): string {
  let out = "";
  while (out.length < length) {
    if (offset >= POOL_SIZE) {
      pool = randomBytes(POOL_SIZE);
      offset = 0;
    }
    const byte = pool[offset++]!;
    // 248 = 62 * 4: rejecting the top 8 values keeps the distribution uniform.
    if (byte < 248) out += ALPHABET[byte % 62];
  }
  return out;
}

export function newId(prefix: string, length = 24): string {
  return prefix + randomToken(length);
}

/**
 * An id whose characters after the prefix sort in creation order (8 base62 characters of the
 * millisecond clock, then random ones): listings of files and batches page by id, newest first,
 * without reading every record.
 */
export function newSortableId(prefix: string, length = 24): string {
  let time = Date.now();
  let stamp = "";
  for (let i = 0; i < 8; i++) {
    stamp = ALPHABET[time % 62] + stamp;
    time = Math.floor(time / 62);
  }
  return prefix + stamp + randomToken(length - 8);
}
