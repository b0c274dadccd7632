import { copyBytes, varintSize, writeVarint } from "../bytes.js";
import type { NatsConnection } from "@nats-io/transport-node";

/** A packed message grows to at most this many bytes before another is started (far below NATS's max_payload). */
const PACK_LIMIT_BYTES = 256 * 1024;

/** Messages queued for one subject in packed form: protobuf frames of a repeated field 1, written as they come. */
interface Pack {
  bytes: Uint8Array;
  length: number;
}

/** A pack's buffer to start with; it doubles as needed (up to about PACK_LIMIT_BYTES plus one element). */
const PACK_START_BYTES = 16 * 1024;

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
  private lastSubject: string | undefined;
  private lastPack: Pack | undefined;
  private readonly spareBytes: Uint8Array[] = [];
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
   * `head` + the first `bodyLength` bytes of `body` (two parts, so a sender can keep a constant
   * prefix encoded once, and encode the rest into a scratch buffer it reuses: both are copied now).
   */
  publishPacked(subject: string, head: Uint8Array, body: Uint8Array, urgent = false, bodyLength = body.length): void {
    // Consecutive elements mostly go to one subject (one gateway): the last pack is looked up first.
    let pack = subject === this.lastSubject ? this.lastPack : this.packs.get(subject);
    if (!pack) this.packs.set(subject, (pack = { bytes: this.spareBytes.pop() ?? new Uint8Array(PACK_START_BYTES), length: 0 }));
    this.lastSubject = subject;
    this.lastPack = pack;
    const length = head.length + bodyLength;
    let at = pack.length;
    const needed = at + 1 + varintSize(length) + length;
    if (needed > pack.bytes.length) {
      const grown = new Uint8Array(Math.max(needed, pack.bytes.length * 2));
      grown.set(pack.bytes.subarray(0, at));
      pack.bytes = grown;
    }
    const out = pack.bytes;
    out[at++] = 0x0a; // field 1, length-delimited
    at = writeVarint(out, at, length);
    out.set(head, at);
    at += head.length;
    copyBytes(out, at, body, bodyLength);
    pack.length = at + bodyLength;
    if (pack.length >= PACK_LIMIT_BYTES) this.sendPack(subject, pack);
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
    for (const [subject, pack] of this.packs) {
      this.sendPack(subject, pack);
      // Buffers are kept for the next turn's packs (a few: one per gateway is the usual need).
      if (this.spareBytes.length < 8 && pack.bytes.length <= 2 * PACK_LIMIT_BYTES) this.spareBytes.push(pack.bytes);
    }
    // Requesters come and go (each gateway start is a new one): keep no pack between turns.
    this.packs.clear();
    this.lastSubject = undefined;
    this.lastPack = undefined;
  };

  private sendPack(subject: string, pack: Pack): void {
    if (pack.length === 0) return;
    // A copy: the connection holds what it is given until its next flush, and the buffer is reused.
    this.nc.publish(subject, pack.bytes.slice(0, pack.length));
    pack.length = 0;
  }
}
