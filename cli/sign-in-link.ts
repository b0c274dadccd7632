import type { LogRecord, Logger } from "../lib/log.js";
import { listeningPort } from "./startup-report.js";
import { adminClient, adminStatusName, isAdminCallError } from "../modules/admin-api/mod.js";

// The dashboard one click away: `tributary start` prints a sign-in link for the local
// organization's owner, as a notebook server does. The admin service makes its one-time token
// (modules/accounts/sign-in-links.ts); `tributary admin sign-in-link` asks for another.

/** gRPC codes of an admin service that is not up yet (UNAVAILABLE, DEADLINE_EXCEEDED): asked again. */
const NOT_UP_YET = new Set([14, 4]);

/**
 * Asks the admin service for a fresh link's path, trying again while the actor host is starting
 * (its token file may not be written yet either), for at most `waitMs`. Undefined, after a
 * warning, when there is none to be had: the admin service is off, refused, or did not answer.
 */
export function localSignInPath(options: { adminAddr: string; adminToken: () => string | undefined; log: Logger; waitMs?: number; retryMs?: number }): () => Promise<string | undefined> {
  const { adminAddr, log, waitMs = 15_000, retryMs = 250 } = options;
  return async () => {
    if (adminAddr === "off") return undefined;
    const deadline = Date.now() + waitMs;
    for (;;) {
      const token = options.adminToken();
      if (token) {
        const admin = adminClient(adminAddr, token, 5_000);
        try {
          return (await admin.createSignInLink({})).path;
        } catch (err) {
          if (!isAdminCallError(err)) {
            log.warn("no dashboard sign-in link", { err: String(err) });
            return undefined;
          }
          if (!NOT_UP_YET.has(err.code)) {
            log.warn("no dashboard sign-in link: the admin service refused", { code: adminStatusName(err.code), reason: err.details });
            return undefined;
          }
        } finally {
          admin.close();
        }
      }
      if (Date.now() >= deadline) {
        log.warn("no dashboard sign-in link: the admin service did not answer", { adminAddr, waitedMs: waitMs });
        return undefined;
      }
      await new Promise((resolve) => setTimeout(resolve, retryMs));
    }
  };
}

/**
 * The link `tributary start` prints in its startup report's footer. Each gateway that starts
 * listening gets a fresh one: its "gateway listening" line, which makes the report announce the
 * stack, is passed on only once the link is made (or could not be), so the footer shows it.
 */
export class StartSignInLink {
  private link: string | undefined;

  constructor(private readonly options: { makePath: () => Promise<string | undefined>; origin: (port: number) => string }) {}

  /** A log record of the gateway, passed on to `next` (a "gateway listening" one after the link is made). */
  fromGateway(record: LogRecord, next: (record: LogRecord) => void): void {
    const port = listeningPort(record);
    if (port === undefined) return next(record);
    this.link = undefined;
    void this.options.makePath().then(
      (path) => {
        this.link = path === undefined ? undefined : this.options.origin(port) + path;
        next(record);
      },
      () => next(record),
    );
  }

  /** The footer's line, while there is a link. */
  footerLine(): string | undefined {
    return this.link ? `Dashboard (a sign-in link that works once): ${this.link}` : undefined;
  }
}
