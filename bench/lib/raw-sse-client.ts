import { connect, type Socket } from "node:net";
import type { StreamResult } from "./sse-client.js";

// A lean streaming client for high stream counts: one TCP connection per stream, the HTTP/1.1
// request written by hand, and the chunked SSE response scanned for "data: " events without an
// HTTP library. It does the same job as SseLoadClient with a fraction of its CPU, so that the
// load generator disturbs the system it measures less when it shares the machine with it.
//
// Reads bypass Node's stream machinery (`onread`: libuv reads into one buffer shared by every
// connection, handed to a callback that parses it at once) and the bytes are scanned as bytes,
// without decoding them to strings: what each event is judged by is unchanged (an event ends at a
// blank line; its `data: ` payload is `[DONE]`, a chunk with non-empty content, or an error).

const DATA = Buffer.from("data: ");
const DONE = Buffer.from("[DONE]");
const CONTENT = Buffer.from('"content":"');
const EMPTY_CONTENT = Buffer.from('"content":""');
const ERROR = Buffer.from('{"error"');
const BLANK_LINE = Buffer.from("\n\n");
const HEAD_END = Buffer.from("\r\n\r\n");

/** Where every connection's reads land; each read is parsed before the next one happens. */
const readBuffer = Buffer.allocUnsafe(256 * 1024);

/** A stream's result, with the time (performance.now()) at which each gap ended. */
export interface TimedStreamResult extends StreamResult {
  gapEndsAt: number[];
}

function startsWithAt(buf: Buffer, at: number, end: number, prefix: Buffer): boolean {
  if (end - at < prefix.length) return false;
  for (let i = 0; i < prefix.length; i++) if (buf[at + i] !== prefix[i]) return false;
  return true;
}

/** Index of `needle` in buf[from, end), or -1. */
function indexWithin(buf: Buffer, needle: Buffer, from: number, end: number): number {
  const at = buf.indexOf(needle, from);
  return at !== -1 && at + needle.length <= end ? at : -1;
}

export function rawStreamChat(port: number, apiKey: string, body: Record<string, unknown>): Promise<TimedStreamResult> {
  const payload = JSON.stringify({ ...body, stream: true });
  return new Promise((resolve) => {
    const result: TimedStreamResult = { ok: false, status: 0, ttftMs: NaN, gapsMs: [], gapEndsAt: [], deltas: 0, completionTokens: 0 };
    const started = performance.now();
    let last = 0;
    let headerDone = false;
    /** Bytes of an event (or of the head) not yet complete at the end of the last read. */
    let carry: Buffer | undefined;

    /** Judges one event, buf[start, end) without its blank line. */
    const event = (buf: Buffer, start: number, end: number) => {
      const d = indexWithin(buf, DATA, start, end);
      if (d < 0) return;
      const data = d + DATA.length;
      if (end - data === DONE.length && startsWithAt(buf, data, end, DONE)) result.ok = result.status === 200 && !result.error;
      else if (indexWithin(buf, CONTENT, data, end) !== -1 && indexWithin(buf, EMPTY_CONTENT, data, end) === -1) {
        const now = performance.now();
        if (result.deltas === 0) result.ttftMs = now - started;
        else {
          result.gapsMs.push(now - last);
          result.gapEndsAt.push(now);
        }
        last = now;
        result.deltas++;
      } else if (startsWithAt(buf, data, end, ERROR)) result.error = buf.toString("utf8", data, end);
    };

    const parse = (buf: Buffer, end: number) => {
      let at = 0;
      if (!headerDone) {
        const head = indexWithin(buf, HEAD_END, 0, end);
        if (head < 0) return (carry = Buffer.from(buf.subarray(0, end)));
        result.status = Number(buf.toString("latin1", 9, 12));
        at = head + HEAD_END.length;
        headerDone = true;
      }
      // Events end with a blank line; chunk-size lines between them are skipped by looking for "data: ".
      for (;;) {
        const blank = indexWithin(buf, BLANK_LINE, at, end);
        if (blank < 0) break;
        event(buf, at, blank);
        at = blank + BLANK_LINE.length;
      }
      carry = at < end ? Buffer.from(buf.subarray(at, end)) : undefined;
    };

    const socket: Socket = connect({
      port,
      host: "127.0.0.1",
      noDelay: true,
      onread: {
        buffer: readBuffer,
        callback: (nread: number, buf: Uint8Array) => {
          const bytes = buf as Buffer;
          // A view of what was read: searches in it stop at its end, not at the shared buffer's.
          const read = bytes.subarray(0, nread);
          if (carry) {
            const joined = Buffer.concat([carry, read]);
            carry = undefined;
            parse(joined, joined.length);
          } else parse(read, nread);
          return true;
        },
      },
    });
    socket.on("connect", () => {
      socket.write(
        `POST /v1/chat/completions HTTP/1.1\r\nhost: bench\r\nauthorization: Bearer ${apiKey}\r\ncontent-type: application/json\r\n` +
          `content-length: ${Buffer.byteLength(payload)}\r\nconnection: close\r\n\r\n${payload}`,
      );
    });
    const done = () => {
      if (result.status !== 200 && !result.error) result.error = `HTTP ${result.status}`;
      resolve(result);
    };
    socket.on("end", done);
    socket.on("error", (err) => {
      result.error = err.message;
      resolve(result);
    });
  });
}
