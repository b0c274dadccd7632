// Protobuf framing written and read by hand on the hot paths (every token's event, in the runner,
// its outbox and the gateway's batch reader): varints and small copies, with no view, object or
// call into the runtime per value.

/** Bytes of a non-negative integer (up to 2^53) as a protobuf varint. */
export function varintSize(n: number): number {
  let size = 1;
  while (n >= 0x80) {
    n = Math.floor(n / 128);
    size++;
  }
  return size;
}

/** Writes `n` (non-negative, up to 2^53) as a varint at out[at]; returns where it ends. */
export function writeVarint(out: Uint8Array, at: number, n: number): number {
  while (n >= 0x80) {
    out[at++] = (n % 128) | 0x80;
    n = Math.floor(n / 128);
  }
  out[at++] = n;
  return at;
}

/** Where the last readVarint ended (a module variable: no object per read). */
export let varintEnd = 0;

/** The varint at bytes[at]: a number (exact up to 2^53), or -1 if it runs past `end` or is longer than 8 bytes. */
export function readVarint(bytes: Uint8Array, at: number, end: number): number {
  let value = 0;
  let scale = 1;
  for (let i = 0; i < 8 && at < end; i++) {
    const b = bytes[at++]!;
    value += (b & 0x7f) * scale;
    if (b < 0x80) {
      varintEnd = at;
      return value;
    }
    scale *= 128;
  }
  return -1;
}

/** Copies the first `length` bytes of `src` to out[at]: by a loop for a token's dozen bytes (it beats a view and `set`), by `set` beyond. */
export function copyBytes(out: Uint8Array, at: number, src: Uint8Array, length: number): void {
  if (length <= 64) for (let i = 0; i < length; i++) out[at + i] = src[i]!;
  else out.set(length === src.length ? src : src.subarray(0, length), at);
}
