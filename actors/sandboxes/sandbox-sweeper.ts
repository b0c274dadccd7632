import { SandboxHostClient, SandboxHostDirectory, SandboxStore, SandboxSweeper } from "../../modules/sandboxes/mod.js";
import type { Actor, ActorContext } from "../../modules/actor-runtime/mod.js";

/**
 * Ends sandboxes whose host was lost (host_lost), stops those past their deadline that their host
 * did not end, and fails those stuck starting, every `sweepMs` (see SandboxSweeper).
 */
export class SandboxSweeperActor implements Actor {
  readonly name = "sandbox-sweeper";
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<unknown> | undefined;
  private directory: SandboxHostDirectory | undefined;

  constructor(private readonly sweepMs: number, private readonly hostTimeoutMs: number) {}

  async start(ctx: ActorContext): Promise<void> {
    const store = await SandboxStore.open(ctx.nc);
    this.directory = new SandboxHostDirectory(ctx.nc, this.hostTimeoutMs);
    this.directory.start();
    const sweeper = new SandboxSweeper(store, this.directory, new SandboxHostClient(ctx.nc), this.hostTimeoutMs, ctx.log);
    this.timer = setInterval(() => {
      if (!this.running) this.running = sweeper.sweep().catch((err: unknown) => ctx.log.warn("sandbox sweep failed", { err })).finally(() => (this.running = undefined));
    }, this.sweepMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await this.running;
    this.directory?.stop();
  }
}
