import * as Schema from "effect/Schema";
import type { NatsConnection } from "@nats-io/transport-node";
import { LeaseReturn } from "../../proto/gen/tributary/v1/ratelimit.js";
import { subjects } from "../../lib/nats/subjects.js";

// A token charge that outlives the request that took it: a background response is charged its
// estimate by the gateway that queues it and runs later, in an actor host. The charge travels
// with the response's record, and whichever process ends the run settles it with the budget's
// owner, as the admitting gateway settles a foreground request with its own chunk.

/** An admission's token charge, handed to another process to settle. */
export interface HeldCharge {
  model: string;
  scope: string;
  scopeId: string;
  /** The budget window the charge was taken in: settling counts only in that window. */
  window: number;
  /** Tokens charged (the request's estimate). */
  tokens: number;
}

/** A held charge as stored (inside a background response's record). */
export const HeldChargeSchema = Schema.Struct({
  model: Schema.String,
  scope: Schema.String,
  scopeId: Schema.String,
  window: Schema.Number,
  tokens: Schema.Number,
});

/**
 * Settles `held` with the tokens really used: what the estimate left unused goes back to the
 * budget, what was used beyond it is added, in the window the charge was taken in (nothing
 * changes once that window is over). Sent to the budget's owner on the subject gateways give
 * chunks back on; a message lost on the way (no owner right now) leaves the estimate charged,
 * so the budget can be under-used, never over-used.
 */
export function settleHeldCharge(nc: NatsConnection, held: HeldCharge, usedTokens: number): void {
  const used = Math.max(0, Math.round(usedTokens));
  const refund = Math.max(0, held.tokens - used);
  const overrun = Math.max(0, used - held.tokens);
  if (refund === 0 && overrun === 0) return;
  const budget = { model: held.model, scope: held.scope, scopeId: held.scopeId };
  const bytes = LeaseReturn.encode({ budget, gatewayId: "", window: held.window, requests: 0, tokens: refund, overrunTokens: overrun }).finish();
  nc.publish(subjects.budgetReturn(held.model, held.scope, held.scopeId), bytes);
}
