import { FileStore } from "../../modules/files/mod.js";
import type { Actor, ActorContext } from "../../modules/actor-runtime/mod.js";

/**
 * Deletes expired files (their metadata and contents) and the leftovers of interrupted uploads,
 * every `intervalMs`. Reads already treat an expired file as gone; this reclaims the storage.
 * Several hosts may sweep at once: every deletion is idempotent.
 */
export class FileSweeper implements Actor {
  readonly name = "file-sweeper";
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;

  constructor(private readonly intervalMs: number) {}

  async start(ctx: ActorContext): Promise<void> {
    const store = await FileStore.open(ctx.nc);
    const sweep = async () => {
      try {
        const { expired, orphans, undecodable } = await store.sweep();
        if (expired || orphans) ctx.log.info("file sweep", { expired, orphans });
        if (undecodable.length > 0) ctx.log.error("file records that do not decode were left alone", { keys: undecodable.slice(0, 20), count: undecodable.length });
      } catch (err) {
        ctx.log.warn("file sweep failed", { err });
      }
    };
    this.timer = setInterval(() => {
      if (!this.running) this.running = sweep().finally(() => (this.running = undefined));
    }, this.intervalMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await this.running;
  }
}
