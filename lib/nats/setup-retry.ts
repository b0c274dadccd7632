import { createLogger, type Logger } from "../log.js";
import { nextBackoffMs, type RestartPolicy } from "../process/restart.js";
import { isTransientForSetup } from "./outage.js";

// Start-up's JetStream requests (create or bind a bucket, a stream, a consumer) wait out an
// outage instead of failing the process: on a JetStream cluster that has no quorum yet, or whose
// nodes are too busy to answer within the client's timeout, a process that exited would only be
// restarted into the same wait, and one that never starts reports no readiness meanwhile. Every
// helper of jetstream.ts that start-up calls goes through here, so all processes share one retry.

export interface SetupRetryPolicy extends Pick<RestartPolicy, "initialBackoffMs" | "maxBackoffMs"> {
  /** Past this since the first attempt, the last error is thrown (the process exits and is restarted). */
  readonly giveUpAfterMs: number;
}

export const SETUP_RETRY: SetupRetryPolicy = { initialBackoffMs: 250, maxBackoffMs: 5_000, giveUpAfterMs: 10 * 60_000 };

/** What one retry loop waits with and reads the time from (tests pass their own). */
export interface RetryClock {
  now(): number;
  sleep(ms: number): Promise<void>;
}

const realClock: RetryClock = { now: () => performance.now(), sleep: (ms) => new Promise((resolve) => setTimeout(resolve, ms)) };

/**
 * The wait before attempt `attempt + 1` (attempt 0 is the first try), or undefined to give up:
 * the restart policy's doubling (lib/process/restart.ts), capped, until giveUpAfterMs has passed.
 */
export function setupRetryDelayMs(policy: SetupRetryPolicy, previousMs: number | undefined, elapsedMs: number): number | undefined {
  const delay = nextBackoffMs({ ...policy, stableAfterMs: Number.POSITIVE_INFINITY }, previousMs, 0);
  return elapsedMs + delay > policy.giveUpAfterMs ? undefined : delay;
}

let defaultLog: Logger | undefined;
const setupLog = () => (defaultLog ??= createLogger("jetstream-setup", { pid: process.pid }));

/**
 * Runs `attempt` until it succeeds, retrying an outage (isTransientForSetup) with backoff and a
 * warning each time; any other error, or an outage past the policy's limit, is thrown.
 */
export async function retryJetStreamSetup<T>(
  what: string,
  attempt: () => Promise<T>,
  options: { policy?: SetupRetryPolicy; clock?: RetryClock; log?: Logger } = {},
): Promise<T> {
  const policy = options.policy ?? SETUP_RETRY;
  const clock = options.clock ?? realClock;
  const started = clock.now();
  let delay: number | undefined;
  for (let tries = 1; ; tries++) {
    try {
      const result = await attempt();
      if (tries > 1) (options.log ?? setupLog()).info("JetStream set-up done after retries", { what, tries });
      return result;
    } catch (err) {
      if (!isTransientForSetup(err)) throw err;
      delay = setupRetryDelayMs(policy, delay, clock.now() - started);
      if (delay === undefined) throw err;
      (options.log ?? setupLog()).warn("JetStream set-up failed; retrying", { what, tries, retryInMs: delay, err: errorText(err) });
      await clock.sleep(delay);
    }
  }
}

function errorText(err: unknown): string {
  const e = err as { name?: unknown; message?: unknown };
  return `${String(e?.name ?? "Error")}: ${String(e?.message ?? err)}`;
}
