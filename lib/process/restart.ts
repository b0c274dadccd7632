import * as Clock from "effect/Clock";
import * as Duration from "effect/Duration";
import * as Effect from "effect/Effect";
import * as Schedule from "effect/Schedule";
import type { Exit } from "effect";

// How everything supervised is restarted: the actors of a process (modules/actor-runtime) and the
// processes `tributary start` runs (cli/child-process). One policy, one Effect loop.

export interface RestartPolicy {
  /** Delay before the first restart; doubles on each consecutive failure up to maxBackoffMs. */
  readonly initialBackoffMs: number;
  readonly maxBackoffMs: number;
  /** A run longer than this was healthy: the next restart waits initialBackoffMs again. */
  readonly stableAfterMs: number;
}

export const RESTART_POLICY: RestartPolicy = { initialBackoffMs: 500, maxBackoffMs: 30_000, stableAfterMs: 60_000 };

/** One run of something supervised, ended on its own: how it ended and how long it had run. */
export interface Stopped<A, E> {
  readonly exit: Exit.Exit<A, E>;
  readonly ranForMs: number;
}

/**
 * The delay before the next restart, given the delay before the previous one (undefined: this is
 * the first) and how long the run that just ended lasted.
 */
export function nextBackoffMs(policy: RestartPolicy, previousMs: number | undefined, ranForMs: number): number {
  if (previousMs === undefined || ranForMs > policy.stableAfterMs) return policy.initialBackoffMs;
  return Math.min(previousMs * 2, policy.maxBackoffMs);
}

/** The policy as a Schedule over the runs that ended: exponential, capped, reset by a stable run. */
export function restartSchedule<A, E>(policy: RestartPolicy): Schedule.Schedule<Duration.Duration, Stopped<A, E>> {
  return Schedule.fromStepWithMetadata(
    Effect.sync(() => {
      let previousMs: number | undefined;
      return (meta: Schedule.InputMetadata<Stopped<A, E>>) => {
        previousMs = nextBackoffMs(policy, previousMs, meta.input.ranForMs);
        const delay = Duration.millis(previousMs);
        return Effect.succeed([delay, delay] as [Duration.Duration, Duration.Duration]);
      };
    }),
  );
}

/**
 * Runs `run` until the calling fiber is interrupted: each time it ends on its own (it returned,
 * failed or died), `onStop` hears how and when it runs again, and it runs again after the
 * policy's backoff. Interruption ends the current run through its finalizers and restarts nothing.
 */
export function restartForever<A, E, R>(
  run: Effect.Effect<A, E, R>,
  policy: RestartPolicy,
  onStop: (stopped: Stopped<A, E>, restartIn: Duration.Duration) => void,
): Effect.Effect<never, never, R> {
  const timed = Effect.gen(function* () {
    const started = yield* Clock.currentTimeMillis;
    const exit = yield* Effect.exit(run);
    const stopped: Stopped<A, E> = { exit, ranForMs: (yield* Clock.currentTimeMillis) - started };
    return yield* Effect.fail(stopped);
  });
  const schedule = restartSchedule<A, E>(policy).pipe(Schedule.tap(({ input, output }) => Effect.sync(() => onStop(input, output))));
  // The schedule never ends, so no failure gets out.
  return timed.pipe(Effect.retry(schedule), Effect.orDie);
}
