import type { Consumer, JsMsg } from "@nats-io/jetstream";

/**
 * Pulls from a shared JetStream work-queue consumer with at most `concurrency` messages handled
 * at once: it fetches only as many as there are free slots, so what this process cannot start
 * now stays in the stream for the other hosts, and waits for a slot before fetching again. Once
 * stopped, it fetches nothing more and naks what a fetch still delivers (redelivered at once to
 * another host).
 */
export class BoundedPuller {
  private readonly inFlight = new Set<Promise<void>>();
  private slotFreed: (() => void) | undefined;
  private stopping = false;
  private loop: Promise<void> | undefined;

  constructor(
    private readonly consumer: Consumer,
    private readonly concurrency: number,
    private readonly handle: (msg: JsMsg) => Promise<void>,
  ) {}

  /** Starts pulling; `onFailure` gets an error of the fetch loop itself (handlers' errors are theirs). */
  start(onFailure: (err: unknown) => void): void {
    this.loop = this.pull().catch(onFailure);
  }

  /** Stops fetching; resolves once the loop has ended (messages being handled go on). */
  async stop(): Promise<void> {
    this.stopping = true;
    this.slotFreed?.();
    await this.loop;
  }

  /** Resolves when every message being handled now is done. */
  idle(): Promise<void> {
    return Promise.all(this.inFlight).then(() => undefined);
  }

  private async pull(): Promise<void> {
    while (!this.stopping) {
      const free = this.concurrency - this.inFlight.size;
      if (free <= 0) {
        await new Promise<void>((resolve) => (this.slotFreed = resolve));
        continue;
      }
      const batch = await this.consumer.fetch({ max_messages: free, expires: 2_000 });
      for await (const msg of batch) {
        if (this.stopping) {
          msg.nak();
          continue;
        }
        const handled = this.handle(msg).finally(() => {
          this.inFlight.delete(handled);
          this.slotFreed?.();
        });
        this.inFlight.add(handled);
      }
    }
  }
}
