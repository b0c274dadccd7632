import type { NatsConnection } from "@nats-io/transport-node";
import type { Logger } from "../../lib/log.js";
import type { Actor, ActorContext } from "./actor.js";

export interface RestartPolicy {
  /** First restart delay; doubles on each consecutive failure up to maxBackoffMs. */
  initialBackoffMs: number;
  maxBackoffMs: number;
  /** A run longer than this resets the backoff. */
  stableAfterMs: number;
}

export const DEFAULT_RESTART_POLICY: RestartPolicy = { initialBackoffMs: 500, maxBackoffMs: 30_000, stableAfterMs: 60_000 };

interface Child {
  readonly make: () => Actor;
  actor: Actor;
  backoffMs: number;
  startedAt: number;
  restartTimer: NodeJS.Timeout | undefined;
  generation: number;
}

/**
 * One-for-one supervision: a failed actor is stopped and replaced by a fresh instance (from its
 * factory) after an exponential backoff; the others keep running.
 */
export class Supervisor {
  private readonly children: Child[] = [];
  private stopping = false;

  constructor(
    private readonly nc: NatsConnection,
    private readonly log: Logger,
    private readonly policy: RestartPolicy = DEFAULT_RESTART_POLICY,
  ) {}

  async spawn(make: () => Actor): Promise<Actor> {
    const actor = make();
    const child: Child = { make, actor, backoffMs: this.policy.initialBackoffMs, startedAt: 0, restartTimer: undefined, generation: 0 };
    this.children.push(child);
    await this.startChild(child);
    return actor;
  }

  get actors(): readonly Actor[] {
    return this.children.map((c) => c.actor);
  }

  async stopAll(): Promise<void> {
    this.stopping = true;
    for (const c of this.children) if (c.restartTimer) clearTimeout(c.restartTimer);
    await Promise.all(this.children.map((c) => c.actor.stop().catch((err: unknown) => this.log.error("actor stop failed", { actor: c.actor.name, err }))));
  }

  private context(child: Child, generation: number): ActorContext {
    const log = this.log.child({ actor: child.actor.name });
    return {
      nc: this.nc,
      log,
      fail: (error) => {
        if (generation !== child.generation || this.stopping) return;
        log.error("actor failed; restarting", { err: error, backoffMs: child.backoffMs });
        child.generation++;
        void child.actor.stop().catch(() => {});
        this.scheduleRestart(child);
      },
    };
  }

  private async startChild(child: Child): Promise<void> {
    child.startedAt = Date.now();
    const ctx = this.context(child, child.generation);
    try {
      await child.actor.start(ctx);
    } catch (err) {
      ctx.fail(err);
    }
  }

  private scheduleRestart(child: Child): void {
    if (Date.now() - child.startedAt > this.policy.stableAfterMs) child.backoffMs = this.policy.initialBackoffMs;
    const delay = child.backoffMs;
    child.backoffMs = Math.min(child.backoffMs * 2, this.policy.maxBackoffMs);
    child.restartTimer = setTimeout(() => {
      child.restartTimer = undefined;
      if (this.stopping) return;
      child.actor = child.make();
      void this.startChild(child);
    }, delay);
  }
}
