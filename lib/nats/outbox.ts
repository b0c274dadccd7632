import type { NatsConnection } from "@nats-io/transport-node";

/**
 * Publishes in batches: messages queued during one event-loop turn go out together at the next
 * turn, so they share one socket write instead of one each. nats.js flushes on a microtask, and
 * a decode step resumes every sequence's consumer in its own chain of microtasks, which without
 * this costs a write per token. Order is kept (one FIFO per outbox).
 */
export class Outbox {
  private queue: Array<{ subject: string; data: Uint8Array }> = [];
  private scheduled = false;

  constructor(private readonly nc: NatsConnection) {}

  /**
   * Queues a message; `urgent` sends it at once (after what is queued, to keep the order) for
   * messages someone is waiting on, such as the first token of a reply.
   */
  publish(subject: string, data: Uint8Array, urgent = false): void {
    this.queue.push({ subject, data });
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
  };
}
