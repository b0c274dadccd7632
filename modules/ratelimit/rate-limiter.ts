import type { ModelSpec } from "../catalog/mod.js";
import type { Principal } from "../accounts/mod.js";
import type { HeldCharge } from "./held-charge.js";

/** Whose budget a request draws from: one per model and organization unless configured otherwise. */
export type RateLimitScope = "organization" | "project" | "key";

export function scopeIdOf(principal: Principal, scope: RateLimitScope): string {
  switch (scope) {
    case "organization":
      return principal.organizationId;
    case "project":
      return principal.projectId;
    case "key":
      return principal.keyId;
  }
}

/** One admitted request's hold on its budget. */
export interface Admission {
  /** The x-ratelimit-* headers for the response. */
  readonly headers: Readonly<Record<string, string>>;
  /**
   * Settles the token charge with what the request really used (prompt + completion tokens over
   * all choices): the difference from the estimate goes back to (or is taken from) the budget.
   * 0 refunds the whole estimate (the request failed before generating). Only the first call counts.
   */
  settle(tokensUsed: number): void;
  /**
   * Hands the charge to another process, which settles it with `settleHeldCharge` (a background
   * response, run by an actor host): nothing is settled here any more. Undefined when there is
   * nothing to settle (rate limits off).
   */
  hold(): HeldCharge | undefined;
}

/**
 * The rate limits every route that generates goes through: `admit` takes one request and the
 * estimated tokens from the budget of (principal, model), or throws RateLimited (with its
 * headers), or Unavailable when no budget owner can be reached.
 */
export interface RateLimiter {
  admit(principal: Principal, spec: ModelSpec, estimatedTokens: number): Admission | Promise<Admission>;
  /** Hands unused budget back and stops (gateway shutdown). */
  stop(): Promise<void>;
}

const UNLIMITED: Admission = { headers: {}, settle: () => {}, hold: () => undefined };

/** TRIBUTARY_RATE_LIMITS=off: every request is admitted, no headers. */
export class UnlimitedRateLimiter implements RateLimiter {
  admit(): Admission {
    return UNLIMITED;
  }

  async stop(): Promise<void> {}
}
