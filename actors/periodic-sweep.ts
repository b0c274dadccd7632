import type { Actor, ActorContext } from "../modules/actor-runtime/mod.js";

/**
 * An actor that runs a sweep every `intervalMs`, one at a time (a slow sweep skips ticks rather
 * than piling up). Several hosts may sweep at once: each sweep's deletions must be idempotent.
 * A failed sweep is logged and the next tick tries again.
 */
export class PeriodicSweep implements Actor {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;

  constructor(
    readonly name: string,
    private readonly intervalMs: number,
    /** Opens what the sweep needs; returns one round of it. */
    private readonly prepare: (ctx: ActorContext) => Promise<() => Promise<void>>,
  ) {}

  async start(ctx: ActorContext): Promise<void> {
    const round = await this.prepare(ctx);
    const sweep = async () => {
      try {
        await round();
      } catch (err) {
        ctx.log.warn(`${this.name} failed`, { err });
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
