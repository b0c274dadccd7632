/**
 * The content chunk of a token framed as bytes: the stream's constant prefix and suffix, encoded
 * once, around the token's text as a JSON string. uWS copies a byte view as it is, where a string
 * would first be flattened and converted to UTF-8 in a buffer it allocates for the call.
 */

/** Where frames are built; each is written (and copied by uWS) before the next one is built. */
let scratch = Buffer.allocUnsafe(16 * 1024);

/** Frames up to this size are handed over through a view kept per size (a stream's frames take a few sizes). */
const VIEWED_BYTES = 4 * 1024;
/**
 * `views[n]` is scratch's first n bytes. uWS takes a view, not a length beside a buffer, and a new
 * view per frame (an object of a hundred bytes or so) was most of what a token allocated here.
 */
let views = newViews();

function newViews(): Array<Uint8Array | undefined> {
  return new Array<Uint8Array | undefined>(VIEWED_BYTES + 1);
}

/**
 * `prefix` + JSON.stringify(text) + `suffix` as UTF-8 bytes (a view of a buffer that the next
 * call overwrites), or undefined when the text is not plain printable ASCII (an escape, a quote,
 * a character past ASCII): the caller frames those as a string.
 */
export function asciiContentFrame(prefix: Uint8Array, text: string, suffix: Uint8Array): Uint8Array | undefined {
  const size = prefix.length + text.length + 2 + suffix.length;
  if (size > scratch.length) {
    if (size > 1024 * 1024) return undefined;
    scratch = Buffer.allocUnsafe(Math.max(size, 2 * scratch.length));
    views = newViews();
  }
  const out = scratch;
  out.set(prefix, 0);
  let at = prefix.length;
  out[at++] = 0x22; // "
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    // JSON.stringify escapes control characters, the quote and the backslash; anything past ASCII is UTF-8's.
    if (c < 0x20 || c === 0x22 || c === 0x5c || c >= 0x80) return undefined;
    out[at++] = c;
  }
  out[at++] = 0x22;
  out.set(suffix, at);
  const length = at + suffix.length;
  if (length > VIEWED_BYTES) return out.subarray(0, length);
  return (views[length] ??= new Uint8Array(out.buffer, out.byteOffset, length));
}
