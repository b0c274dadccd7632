import { copyBytes, readVarint, varintEnd, writeVarint } from "../lib/bytes.js";
import { RunnerEvent } from "../proto/gen/tributary/v1/inference.js";

/** Encoded bytes of events one resend carries (NATS's default max payload is 1 MiB). */
export const RESEND_MAX_BYTES = 256 * 1024;

/** Room a request's buffer starts with: a few hundred tokens' events before it first grows. */
const START_BYTES = 4 * 1024;

/**
 * One request's events as they were sent, kept for a requester that lost some (core NATS drops
 * messages while a connection moves to another server) to ask for again (ResendQuery). Each
 * event without the request's constant fields (`head`), framed by its length (a varint), back to
 * back in one buffer: one buffer per request and nothing per event, since this runs for every
 * token and the resend it serves is rare (a resend walks the frames to its first event). The
 * runner keeps this, not the request's publisher, a while after the final: thousands of finished
 * streams' publishers (and what they hold) would cost its GC more than the copies do.
 */
export class SentEvents {
  private bytes: Uint8Array | undefined;
  private length = 0;
  /** performance.now() when the final was sent (0: still running). */
  endedAt = 0;

  constructor(private readonly head: Uint8Array) {}

  /** Copies an event's bytes after the head (they may sit in a scratch buffer the next event overwrites). */
  keep(rest: Uint8Array, restLength = rest.length): void {
    let at = this.length;
    const end = at + 5 + restLength;
    let bytes = this.bytes;
    if (!bytes || end > bytes.length) {
      // Allocated on the first event, not with the request: one that is refused keeps none.
      const grown = new Uint8Array(Math.max(end, bytes ? bytes.length * 2 : START_BYTES));
      if (bytes) grown.set(bytes.subarray(0, at));
      this.bytes = bytes = grown;
    }
    at = writeVarint(bytes, at, restLength);
    copyBytes(bytes, at, rest, restLength);
    this.length = at + restLength;
  }

  /** The final was sent: kept from now on without the room the buffer had to grow into. */
  end(now = performance.now()): void {
    this.endedAt = now;
    this.bytes = this.bytes?.slice(0, this.length);
  }

  /**
   * The events from seq `fromSeq` on, as sent, at most `maxBytes` of them (always at least one):
   * a long reply's whole history would not fit one NATS message, and the requester asks again
   * from where it then waits.
   */
  from(fromSeq: number, maxBytes = RESEND_MAX_BYTES): RunnerEvent[] {
    const events: RunnerEvent[] = [];
    const bytes = this.bytes;
    if (!bytes) return events;
    let total = 0;
    let at = 0;
    for (let seq = 1; at < this.length; seq++) {
      const restLength = readVarint(bytes, at, this.length);
      const start = (at = varintEnd);
      at += restLength;
      if (seq < fromSeq) continue;
      total += this.head.length + restLength;
      if (total > maxBytes && events.length > 0) break;
      const encoded = new Uint8Array(this.head.length + restLength);
      encoded.set(this.head);
      encoded.set(bytes.subarray(start, at), this.head.length);
      events.push(RunnerEvent.decode(encoded));
    }
    return events;
  }
}
