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

/** When the sortable id (`newSortableId`) after `prefix` was minted (ms), or undefined when it is not one. */
export function sortableIdTime(id: string, prefix: string): number | undefined {
  if (!id.startsWith(prefix) || id.length < prefix.length + 8) return undefined;
  let time = 0;
  for (const c of id.slice(prefix.length, prefix.length + 8)) {
    const digit = ALPHABET.indexOf(c);
    if (digit < 0) return undefined;
    time = time * 62 + digit;
  }
  return time;
}

/**
 * The one shape every id that comes from the network must have before it becomes a KV key, an
 * object name or a subject token (response, conversation and item ids, previous_response_id,
 * ids in batch lines): 1-128 characters of a-z, A-Z, 0-9, '_' and '-'. Ids minted here have it;
 * so do OpenAI's. A longer id once pushed a KV request past nats-server's 4 KiB protocol line
 * and closed the connection every request of the process shares.
 */
export const MAX_ID_LENGTH = 128;
const ID_SHAPE = /^[A-Za-z0-9_-]+$/;

export function isWellFormedId(value: unknown): value is string {
  return typeof value === "string" && value.length >= 1 && value.length <= MAX_ID_LENGTH && ID_SHAPE.test(value);
}

export const ID_RULE = `ids are 1-${MAX_ID_LENGTH} characters of a-z, A-Z, 0-9, '_' and '-'`;

/**
 * Prompt template names: 1-4 segments separated by '/', each 1-64 characters of a-z, A-Z, 0-9,
 * '_', '.' and '-' starting with a letter or digit, not starting with 'resp_' (POST
 * /v1/responses/{name} shares its path with /v1/responses/{id}/cancel). At most 259 characters.
 */
export const TEMPLATE_NAME = /^(?!resp_)[A-Za-z0-9][A-Za-z0-9_.-]{0,63}(\/[A-Za-z0-9][A-Za-z0-9_.-]{0,63}){0,3}$/;
const MAX_TEMPLATE_NAME_LENGTH = 4 * 64 + 3;

export function isWellFormedTemplateName(value: unknown): value is string {
  return typeof value === "string" && value.length <= MAX_TEMPLATE_NAME_LENGTH && TEMPLATE_NAME.test(value);
}

export const TEMPLATE_NAME_RULE = "names are 1-4 segments separated by '/', each 1-64 characters of a-z, A-Z, 0-9, '_', '.' and '-' starting with a letter or digit, and not starting with 'resp_'";
