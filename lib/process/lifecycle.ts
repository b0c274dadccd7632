import { lifecycleConfig, readConfig } from "../config.js";
import type { Logger } from "../log.js";

// How every Tributary process starts and stops: a failure to start is logged and exits 1; the
// first SIGTERM or SIGINT runs the process's drain once, then it exits 0 (1 if the drain threw).
// A process whose parent hands it a pipe (`tributary start` does) stops the same way when that
// pipe closes: its parent is gone, however it died, and nothing else would ever stop it.

/**
 * The drain's time once the parent is gone. nats-server ends with the supervisor too, so work in
 * flight cannot finish; the drain gets long enough to close what it holds, not its usual timeout.
 */
export const PARENT_LOST_DRAIN_MS = 5_000;

/** Runs the process's drain once (registered by onShutdown); undefined while the process starts. */
let stop: ((why: string) => void) | undefined;

export function exitIfStartFails(log: Logger, what: string, started: Promise<void>): void {
  started.catch((err: unknown) => {
    log.error(`${what} failed to start`, { err });
    process.exit(1);
  });
}

export function onShutdown(log: Logger, drain: (signal: string) => Promise<void>, fields: () => Record<string, unknown> = () => ({})): void {
  let draining = false;
  stop = (signal: string) => {
    if (draining) return;
    draining = true;
    log.info("draining", { signal, ...fields() });
    drain(signal).then(
      () => {
        log.info("stopped");
        process.exit(0);
      },
      (err: unknown) => {
        log.error("drain failed", { err });
        process.exit(1);
      },
    );
  };
  process.on("SIGTERM", () => stop!("SIGTERM"));
  process.on("SIGINT", () => stop!("SIGINT"));
}

/**
 * Stops this process when its parent is gone (TRIBUTARY_PARENT_PIPE=stdin): stdin is a pipe only
 * the parent holds open, so it reaches its end when the parent exits, a kill -9 included, at once
 * (polling process.ppid would notice late). Call it first thing: a parent lost while this
 * process still starts ends it at once; later, it drains as on SIGTERM, cut short after
 * PARENT_LOST_DRAIN_MS.
 */
export function endWithParent(log: Logger): void {
  if (readConfig(lifecycleConfig).parentPipe !== "stdin") return;
  let lost = false;
  const parentGone = () => {
    if (lost) return;
    lost = true;
    if (!stop) {
      log.warn("parent process gone while starting: exiting");
      process.exit(1);
    }
    setTimeout(() => {
      log.warn("drain cut short: the parent process is gone", { afterMs: PARENT_LOST_DRAIN_MS });
      process.exit(1);
    }, PARENT_LOST_DRAIN_MS).unref();
    stop("parent exited");
  };
  const stdin = process.stdin;
  stdin.once("end", parentGone);
  stdin.once("close", parentGone);
  stdin.once("error", parentGone);
  // Read (and drop) whatever comes, so the end is seen; the watch alone keeps nothing alive.
  stdin.resume();
  (stdin as { unref?: () => void }).unref?.();
}
