import type { NatsConnection } from "@nats-io/transport-node";

/** A packed message grows to at most this many bytes before another is started (far below NATS's max_payload). */
const PACK_LIMIT_BYTES = 256 * 1024;

/** Messages queued for one subject in packed form: protobuf frames of a repeated field 1. */
interface Pack {
  frames: Array<{ head: Uint8Array; body: Uint8Array }>;
  bytes: number;
}

/**
 * Publishes in batches: messages queued during one event-loop turn go out together at the next
 * turn, so they share one socket write instead of one each. nats.js flushes on a microtask, and
 * a decode step resumes every sequence's consumer in its own chain of microtasks, which without
 * this costs a write per token. Order is kept (one FIFO per outbox, one per packed subject).
 *
 * Packed subjects go further: what is queued for one within a turn is sent as ONE message, a
 * protobuf message whose field 1 repeats (each queued item is one element), so a turn that
 * produced a token for each of a thousand streams of one gateway costs NATS one message, not a
 * thousand. The receiver decodes it as such a message (RunnerEventBatch for runner events).
 */
export class Outbox {
  private queue: Array<{ subject: string; data: Uint8Array }> = [];
  private readonly packs = new Map<string, Pack>();
  private scheduled = false;

  constructor(private readonly nc: NatsConnection) {}

  /**
   * Queues a message; `urgent` sends it at once (after what is queued, to keep the order) for
   * messages someone is waiting on, such as the first token of a reply.
   */
  publish(subject: string, data: Uint8Array, urgent = false): void {
    this.queue.push({ subject, data });
    this.queued(urgent);
  }

  /**
   * Queues one element of the packed message of `subject`: the element is the concatenation
   * `head` + `body` (two parts, so a sender can keep a constant prefix encoded once).
   */
  publishPacked(subject: string, head: Uint8Array, body: Uint8Array, urgent = false): void {
    let pack = this.packs.get(subject);
    if (!pack) this.packs.set(subject, (pack = { frames: [], bytes: 0 }));
    const length = head.length + body.length;
    pack.frames.push({ head, body });
    pack.bytes += 1 + varintSize(length) + length;
    if (pack.bytes >= PACK_LIMIT_BYTES) this.sendPack(subject, pack);
    this.queued(urgent);
  }

  private queued(urgent: boolean): void {
    if (urgent) return this.flush();
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(this.flush);
  }

  /** Sends everything queued now (before a drain or shutdown). */
  readonly flush = (): void => {
    this.scheduled = false;
    const batch = this.queue;
    this.queue = [];
    for (const m of batch) this.nc.publish(m.subject, m.data);
    for (const [subject, pack] of this.packs) this.sendPack(subject, pack);
    // Requesters come and go (each gateway start is a new one): keep none between turns.
    this.packs.clear();
  };

  private sendPack(subject: string, pack: Pack): void {
    if (pack.frames.length === 0) return;
    const out = new Uint8Array(pack.bytes);
    let at = 0;
    for (const { head, body } of pack.frames) {
      out[at++] = 0x0a; // field 1, length-delimited
      for (let n = head.length + body.length; ; n >>>= 7) {
        if (n < 0x80) {
          out[at++] = n;
          break;
        }
        out[at++] = (n & 0x7f) | 0x80;
      }
      out.set(head, at);
      at += head.length;
      out.set(body, at);
      at += body.length;
    }
    pack.frames = [];
    pack.bytes = 0;
    this.nc.publish(subject, out);
  }
}

function varintSize(n: number): number {
  let size = 1;
  while (n >= 0x80) {
    n >>>= 7;
    size++;
  }
  return size;
}
