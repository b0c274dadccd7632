import type { Logger } from "../lib/log.js";

/**
 * The gateway's last resort, installed once it serves. Its state is per request (a request's
 * failure is that request's 500 or dropped stream; every uWS callback is already guarded), so an
 * error that still escapes to the process is a bug in one request's path: it is logged, with
 * its stack, and the gateway keeps serving every other stream rather than drop them all.
 * Errors before it serves still end the process (`exitIfStartFails`), and so do fatal ones Node
 * does not hand to JavaScript (out of memory).
 */
export function keepServingOnUncaughtErrors(log: Logger): void {
  let count = 0;
  process.on("uncaughtException", (err, origin) => {
    count++;
    log.error("uncaught error: the gateway keeps serving", { origin, count, err });
  });
  process.on("unhandledRejection", (reason) => {
    count++;
    log.error("unhandled rejection: the gateway keeps serving", { count, err: reason });
  });
}
