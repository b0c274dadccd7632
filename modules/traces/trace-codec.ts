import type { Trace } from "./trace-record.js";
import { isPlainJsonText } from "../../lib/json-text.js";

// How traces are laid out in a trace stream message. A message holds the traces of one subject,
// in the order they were recorded:
//
//   tributary-traces/2\n
//   <head>\n<request text><response text><prompt text>      (one record per trace)
//   ...
//
// `head` is one line of JSON: the trace without its three texts, each text replaced by its
// UTF-8 size (`text_bytes`); the texts follow as raw UTF-8. A text is thus stored as it is, not
// escaped into a JSON string (the request and the response are JSON themselves: escaped, every
// quote doubled in size and cost the writer a second pass over it), and reads back byte for byte.
// The head is written by hand: JSON.stringify of the same fields took several times as long
// (numbers and strings of a known shape need no generic walk).
//
// Messages written before this layout are a JSON array of whole traces (or one trace): readers
// tell them apart by the first line.

export const TRACE_MESSAGE_MAGIC = "tributary-traces/2\n";
const MAGIC = Buffer.from(TRACE_MESSAGE_MAGIC, "latin1");

/** A number as JSON.stringify writes it (a non-finite one is null). */
const num = (v: number) => (Number.isFinite(v) ? String(v) : "null");

/**
 * A timing as JSON.stringify writes it. Timings are rounded to hundredths of a millisecond: those
 * are written from their integer hundredths, without the floating-point printer (the slowest part
 * of a head). "w.ff" is what String() prints for such a value: the shortest decimal that reads
 * back as it, since no shorter one lies within a double's spacing at these magnitudes.
 */
export function timingText(v: number | null): string {
  if (v === null) return "null";
  const n = Math.round(v * 100);
  if (n / 100 !== v || n < 0 || n > 1e12) return num(v);
  const whole = Math.floor(n / 100);
  const frac = n - whole * 100;
  if (frac === 0) return String(whole);
  return `${whole}.${frac % 10 === 0 ? frac / 10 : frac < 10 ? `0${frac}` : frac}`;
}

/**
 * Writes JSON string literals for one head and remembers whether all of them were plain ASCII:
 * then so is the head, its UTF-8 size is its length and it is copied byte for byte.
 */
class Literals {
  ascii = true;

  str(s: string): string {
    if (isPlainJsonText(s)) return `"${s}"`;
    this.ascii = false;
    return JSON.stringify(s);
  }

  strOrNull(s: string | null): string {
    return s === null ? "null" : this.str(s);
  }

  strings(list: readonly string[]): string {
    let out = "[";
    for (let i = 0; i < list.length; i++) out += (i > 0 ? "," : "") + this.str(list[i]!);
    return out + "]";
  }

  attribute(v: string | number | boolean | readonly string[]): string {
    if (typeof v === "string") return this.str(v);
    if (typeof v === "number") return num(v);
    if (typeof v === "boolean") return v ? "true" : "false";
    return this.strings(v);
  }
}

/** One trace, measured and ready to be written into a message. */
export interface EncodedTrace {
  head: string;
  /** The head is ASCII (copied as latin1: the same bytes, without UTF-8's encoding pass). */
  headAscii: boolean;
  /** The three texts (prompt undefined when the trace has none) and their UTF-8 sizes. */
  request: string;
  response: string;
  prompt: string | undefined;
  requestBytes: number;
  responseBytes: number;
  promptBytes: number;
  /** Bytes the record takes in a message: head, its newline and the texts. */
  size: number;
}

/** The UTF-8 size of a text as stored (measured: `bytes` is the original's size, which a record must not be trusted to match). */
const storedBytes = (t: { text: string }) => (t.text.length === 0 ? 0 : Buffer.byteLength(t.text, "utf8"));

export function encodeTrace(trace: Trace): EncodedTrace {
  const requestBytes = storedBytes(trace.request);
  const responseBytes = storedBytes(trace.response);
  const promptBytes = trace.prompt ? storedBytes(trace.prompt) : 0;
  const tm = trace.timings;
  const u = trace.usage;
  const e = trace.error;
  const q = new Literals();
  const firstToken = timingText(tm.first_token_ms);
  const end = timingText(tm.end_ms);
  let attributes = "";
  for (const key in trace.attributes) attributes += (attributes ? "," : "") + q.str(key) + ":" + q.attribute(trace.attributes[key]!);
  const head =
    `{"object":"trace","id":${q.str(trace.id)},"request_id":${q.str(trace.request_id)},"created_at":${num(trace.created_at)}` +
    `,"organization_id":${q.str(trace.organization_id)},"project_id":${q.str(trace.project_id)},"api_key_id":${q.str(trace.api_key_id)}` +
    `,"endpoint":${q.str(trace.endpoint)},"model":${q.str(trace.model)},"status":${q.str(trace.status)},"http_status":${num(trace.http_status)}` +
    `,"error":${e ? `{"type":${q.str(e.type)},"code":${q.strOrNull(e.code)},"message":${q.str(e.message)}}` : "null"}` +
    `,"stream":${trace.stream},"batch":${trace.batch},"runner_id":${q.strOrNull(trace.runner_id)}` +
    `,"timings":{"received_at":${num(tm.received_at)},"rate_limit_admitted_ms":${timingText(tm.rate_limit_admitted_ms)},"runner_admitted_ms":${timingText(tm.runner_admitted_ms)}` +
    `,"queue_wait_ms":${timingText(tm.queue_wait_ms)},"first_token_ms":${firstToken},"end_ms":${end},"ttft_ms":${tm.ttft_ms === tm.first_token_ms ? firstToken : timingText(tm.ttft_ms)}` +
    `,"total_ms":${tm.total_ms === tm.end_ms ? end : timingText(tm.total_ms)}}` +
    `,"usage":{"input_tokens":${num(u.input_tokens)},"cached_input_tokens":${num(u.cached_input_tokens)},"output_tokens":${num(u.output_tokens)}}` +
    `,"finish_reasons":${q.strings(trace.finish_reasons)}` +
    `,"request":{"text_bytes":${requestBytes},"bytes":${num(trace.request.bytes)},"truncated":${trace.request.truncated}}` +
    `,"response":{"text_bytes":${responseBytes},"bytes":${num(trace.response.bytes)},"truncated":${trace.response.truncated},"chunks":${num(trace.response.chunks)}}` +
    `,"prompt":${trace.prompt ? `{"text_bytes":${promptBytes},"bytes":${num(trace.prompt.bytes)},"truncated":${trace.prompt.truncated}}` : "null"}` +
    `,"attributes":{${attributes}}}`;
  const headBytes = q.ascii ? head.length : Buffer.byteLength(head, "utf8");
  return {
    head,
    headAscii: q.ascii,
    request: trace.request.text,
    response: trace.response.text,
    prompt: trace.prompt?.text,
    requestBytes,
    responseBytes,
    promptBytes,
    size: headBytes + 1 + requestBytes + responseBytes + promptBytes,
  };
}

/** Traces one message holds at most, and its size (the stream's max_msg_size is 1 MiB). */
export const MAX_TRACES_PER_MESSAGE = 64;
export const MAX_MESSAGE_BYTES = 512 * 1024;
/** A new message's first buffer; it doubles as traces are added. */
const INITIAL_CAPACITY = 16 * 1024;

/**
 * One stream message being filled: traces of one subject, written as they are recorded straight
 * into a buffer outside the JavaScript heap (nothing of a recorded trace stays on the heap for
 * the garbage collector to copy while it waits for the flush).
 */
export class TraceMessage {
  private buf: Buffer;
  private used: number;
  count = 0;

  /**
   * The capacity of a new message whose first record takes `size` bytes: as large as the last
   * message of its subject grew (`hint`), so that a steady stream of traces fills its messages
   * without copying them as they grow.
   */
  static initialCapacity(size: number, hint = 0): number {
    return Math.max(INITIAL_CAPACITY, MAGIC.length + size, Math.min(hint, MAX_MESSAGE_BYTES));
  }

  constructor(readonly subject: string, capacity: number) {
    this.buf = Buffer.allocUnsafeSlow(capacity);
    this.used = MAGIC.copy(this.buf, 0);
  }

  /** Bytes held (the buffer's capacity: what the writer's memory bound counts). */
  get capacity(): number {
    return this.buf.length;
  }

  /** Whether a record of `size` bytes joins this message; a first record always does (a large one goes alone). */
  fits(size: number): boolean {
    return this.count === 0 || (this.count < MAX_TRACES_PER_MESSAGE && this.used + size <= MAX_MESSAGE_BYTES);
  }

  /** The capacity `size` more bytes would add. */
  growthFor(size: number): number {
    const need = this.used + size;
    if (need <= this.buf.length) return 0;
    return Math.max(Math.min(this.buf.length * 2, MAX_MESSAGE_BYTES), need) - this.buf.length;
  }

  append(t: EncodedTrace): void {
    const growth = this.growthFor(t.size);
    if (growth > 0) {
      const bigger = Buffer.allocUnsafeSlow(this.buf.length + growth);
      this.buf.copy(bigger, 0, 0, this.used);
      this.buf = bigger;
    }
    let at = this.used;
    at += this.buf.write(t.head, at, t.headAscii ? "latin1" : "utf8");
    this.buf[at++] = 0x0a;
    // A text whose UTF-8 size is its length is ASCII: copied as latin1, the same bytes without the encoder.
    if (t.requestBytes > 0) at += this.buf.write(t.request, at, t.requestBytes, t.requestBytes === t.request.length ? "latin1" : "utf8");
    if (t.responseBytes > 0) at += this.buf.write(t.response, at, t.responseBytes, t.responseBytes === t.response.length ? "latin1" : "utf8");
    if (t.promptBytes > 0) at += this.buf.write(t.prompt!, at, t.promptBytes, t.promptBytes === t.prompt!.length ? "latin1" : "utf8");
    this.used = at;
    this.count++;
  }

  /** Bytes written. */
  get size(): number {
    return this.used;
  }

  payload(): Uint8Array {
    return this.buf.subarray(0, this.used);
  }
}

/**
 * The records of a message in this layout, as plain objects in the trace's shape (for the
 * schema to check), in order; undefined when the message is in the older layout. A record that
 * cannot be read ends the reading: `error` says why, `records` holds the ones before it.
 */
export function readTraceMessage(data: Uint8Array): { records: unknown[]; error?: string } | undefined {
  const buf = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  if (buf.length < MAGIC.length || MAGIC.compare(buf, 0, MAGIC.length) !== 0) return undefined;
  const records: unknown[] = [];
  let at = MAGIC.length;
  while (at < buf.length) {
    const end = buf.indexOf(0x0a, at);
    if (end < 0) return { records, error: `record ${records.length}: no end to its head` };
    let head: Record<string, unknown>;
    try {
      head = JSON.parse(buf.toString("utf8", at, end)) as Record<string, unknown>;
    } catch (err) {
      return { records, error: `record ${records.length}: ${(err as Error).message}` };
    }
    at = end + 1;
    if (typeof head !== "object" || head === null) return { records, error: `record ${records.length}: its head is not an object` };
    for (const name of ["request", "response", "prompt"] as const) {
      const part = head[name] as Record<string, unknown> | null | undefined;
      if (part === null && name === "prompt") continue;
      const n = part?.text_bytes;
      if (typeof n !== "number" || !Number.isSafeInteger(n) || n < 0 || at + n > buf.length) return { records, error: `record ${records.length}: bad ${name}.text_bytes` };
      const { text_bytes: _, ...rest } = part!;
      head[name] = { text: buf.toString("utf8", at, at + n), ...rest };
      at += n;
    }
    records.push(head);
  }
  return { records };
}
