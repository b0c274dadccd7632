import { RunnerEvent } from "../proto/gen/tributary/v1/inference.js";

/** Encoded bytes of events one resend carries (NATS's default max payload is 1 MiB). */
export const RESEND_MAX_BYTES = 256 * 1024;

/**
 * One request's events as they were sent, kept for a requester that lost some (core NATS drops
 * messages while a connection moves to another server) to ask for again (ResendQuery). Each
 * event without the request's constant fields (`head`), back to back in one buffer (`ends[n - 1]`
 * is where the event of seq n ends): one buffer per request, not an object per event. The runner
 * keeps this, not the request's publisher, a while after the final: thousands of finished
 * streams' publishers (and what they hold) would cost its GC more than the copies do.
 */
export class SentEvents {
  private bytes = new Uint8Array(512);
  private length = 0;
  private readonly ends: number[] = [];
  /** performance.now() when the final was sent (0: still running). */
  endedAt = 0;

  constructor(private readonly head: Uint8Array) {}

  /** Copies an event's bytes after the head (they may sit in a scratch buffer the next event overwrites). */
  keep(rest: Uint8Array, restLength = rest.length): void {
    const end = this.length + restLength;
    if (end > this.bytes.length) {
      const grown = new Uint8Array(Math.max(end, this.bytes.length * 2));
      grown.set(this.bytes.subarray(0, this.length));
      this.bytes = grown;
    }
    this.bytes.set(restLength === rest.length ? rest : rest.subarray(0, restLength), this.length);
    this.length = end;
    this.ends.push(end);
  }

  /** The final was sent: kept from now on without the room the buffer had to grow into. */
  end(now = performance.now()): void {
    this.endedAt = now;
    this.bytes = this.bytes.slice(0, this.length);
  }

  /**
   * The events from seq `fromSeq` on, as sent, at most `maxBytes` of them (always at least one):
   * a long reply's whole history would not fit one NATS message, and the requester asks again
   * from where it then waits.
   */
  from(fromSeq: number, maxBytes = RESEND_MAX_BYTES): RunnerEvent[] {
    const events: RunnerEvent[] = [];
    let bytes = 0;
    for (let i = Math.max(0, fromSeq - 1); i < this.ends.length; i++) {
      const rest = this.bytes.subarray(i === 0 ? 0 : this.ends[i - 1]!, this.ends[i]!);
      bytes += this.head.length + rest.length;
      if (bytes > maxBytes && events.length > 0) break;
      const encoded = new Uint8Array(this.head.length + rest.length);
      encoded.set(this.head);
      encoded.set(rest, this.head.length);
      events.push(RunnerEvent.decode(encoded));
    }
    return events;
  }
}
