import type { NatsConnection } from "@nats-io/transport-node";
import * as Cause from "effect/Cause";
import * as Deferred from "effect/Deferred";
import * as Duration from "effect/Duration";
import * as Effect from "effect/Effect";
import * as Exit from "effect/Exit";
import * as Fiber from "effect/Fiber";
import type { Logger } from "../../lib/log.js";
import { RESTART_POLICY, restartForever, type RestartPolicy } from "../../lib/process/restart.js";
import type { Actor } from "./actor.js";

/** What a supervised actor reports to whoever runs it. */
export interface SupervisedActor {
  /** The instance running now (or the last one, while a restart waits). */
  readonly current: Actor;
  /** Resolves once the first instance's start has returned or thrown. */
  readonly firstStart: Promise<void>;
}

/**
 * One actor under one-for-one supervision, as an Effect that runs until it is interrupted: an
 * instance is made by `make` and started; when it fails (its start throws, or it calls
 * `ctx.fail`) it is stopped, and a fresh instance replaces it after the policy's backoff.
 * Interruption stops the running instance. The instance is stopped before its replacement is
 * made, so two never hold the same resources (a runner's model, a budget) at once.
 */
export function superviseActor(
  make: () => Actor,
  nc: NatsConnection,
  log: Logger,
  policy: RestartPolicy = RESTART_POLICY,
): { readonly actor: SupervisedActor; readonly run: Effect.Effect<never> } {
  let current = make();
  let unstarted: Actor | undefined = current;
  let started: () => void = () => {};
  const firstStart = new Promise<void>((resolve) => (started = resolve));

  const once = Effect.scoped(
    Effect.gen(function* () {
      const failed = yield* Deferred.make<never, unknown>();
      const actor = yield* Effect.acquireRelease(
        Effect.sync(() => {
          current = unstarted ?? make();
          unstarted = undefined;
          return current;
        }),
        (actor) => Effect.promise(() => actor.stop().catch((err: unknown) => log.error("actor stop failed", { actor: actor.name, err }))),
      );
      const ctx = { nc, log: log.child({ actor: actor.name }), fail: (error: unknown) => void Deferred.doneUnsafe(failed, Exit.fail(error)) };
      yield* Effect.tryPromise({ try: () => actor.start(ctx), catch: (error) => error }).pipe(Effect.ensuring(Effect.sync(started)));
      return yield* Deferred.await(failed);
    }),
  );

  const run = restartForever(once, policy, ({ exit }, restartIn) => {
    const err = Exit.isFailure(exit) ? Cause.squash(exit.cause) : undefined;
    log.child({ actor: current.name }).error("actor failed; restarting", { err, backoffMs: Duration.toMillis(restartIn) });
  });
  return { actor: { get current() { return current; }, firstStart }, run };
}

/**
 * Supervises the actors of a process, one-for-one (see superviseActor): a failed actor is
 * replaced; the others keep running.
 */
export class Supervisor {
  private readonly children: SupervisedActor[] = [];
  private readonly fibers: Fiber.Fiber<never>[] = [];

  constructor(
    private readonly nc: NatsConnection,
    private readonly log: Logger,
    private readonly policy: RestartPolicy = RESTART_POLICY,
  ) {}

  /** Starts the actor `make` builds; resolves once its first start has returned (or failed: it is then restarted). */
  async spawn(make: () => Actor): Promise<Actor> {
    const { actor, run } = superviseActor(make, this.nc, this.log, this.policy);
    this.children.push(actor);
    this.fibers.push(Effect.runFork(run));
    await actor.firstStart;
    return actor.current;
  }

  /** The running instances, in spawn order. */
  get actors(): readonly Actor[] {
    return this.children.map((c) => c.current);
  }

  /** Stops every actor at once (each drains as its `stop` does) and restarts none. */
  async stopAll(): Promise<void> {
    await Effect.runPromise(Fiber.interruptAll(this.fibers));
  }
}
