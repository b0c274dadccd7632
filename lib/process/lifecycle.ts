import type { Logger } from "../log.js";

// How every Tributary process starts and stops: a failure to start is logged and exits 1; the
// first SIGTERM or SIGINT runs the process's drain once, then it exits 0 (1 if the drain threw).

export function exitIfStartFails(log: Logger, what: string, started: Promise<void>): void {
  started.catch((err: unknown) => {
    log.error(`${what} failed to start`, { err });
    process.exit(1);
  });
}

export function onShutdown(log: Logger, drain: (signal: string) => Promise<void>, fields: () => Record<string, unknown> = () => ({})): void {
  let draining = false;
  const stop = (signal: string) => {
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
  process.on("SIGTERM", () => stop("SIGTERM"));
  process.on("SIGINT", () => stop("SIGINT"));
}
