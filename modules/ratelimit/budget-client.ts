import { RequestError, TimeoutError, type NatsConnection } from "@nats-io/transport-node";
import { Activation, BudgetKey, LeaseGrant, LeaseGrant_Status, LeaseRequest, LeaseReturn } from "../../proto/gen/tributary/v1/ratelimit.js";
import { subjects } from "../../lib/nats/subjects.js";
import type { Logger } from "../../lib/log.js";
import { errors } from "../errors/mod.js";
import type { Grant, LeaseAsk, Limits } from "./local-budget.js";

export interface BudgetClientOptions {
  gatewayId: string;
  /** How long a request may wait for a budget owner (failover included) before refusing it (Unavailable). */
  waitMs: number;
  /** One lease round trip; past it the owner is presumed gone and the budget re-activated. */
  requestTimeoutMs: number;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function isNoResponders(err: unknown): boolean {
  return err instanceof RequestError && err.isNoResponders();
}

function isTimeout(err: unknown): boolean {
  return err instanceof TimeoutError || (err instanceof RequestError && err.cause instanceof TimeoutError);
}

/**
 * The gateway's end of the budget protocol (proto/tributary/v1/ratelimit.proto). A lease goes to
 * the budget's owner; when there is none (no responders: the owner died or never existed) or it
 * says it is not the owner any more, any actor host is asked to activate the budget, and the lease
 * is asked again, until `waitMs` has passed.
 */
export class BudgetClient {
  /** Round trips so far: leases granted, activations asked for. */
  readonly stats = { leases: 0, activations: 0 };

  constructor(private readonly nc: NatsConnection, private readonly options: BudgetClientOptions, private readonly log: Logger) {}

  /**
   * A chunk of `budget`. `firstLease`: this gateway has not leased from it yet, so its owner (if it
   * has one) is found through activation first. That costs a round trip once, and does not rely
   * on "no responders" alone, which a passive subscriber (an operator's `nats sub`) would hide.
   */
  async lease(budget: BudgetKey, limits: Limits, ask: LeaseAsk, firstLease = false): Promise<Grant> {
    const deadline = performance.now() + this.options.waitMs;
    const subject = subjects.budgetLease(budget.model, budget.scope, budget.scopeId);
    const bytes = LeaseRequest.encode({ budget, gatewayId: this.options.gatewayId, limits, ...ask }).finish();
    if (firstLease) await this.activate(budget, deadline);
    for (let attempt = 0; ; attempt++) {
      try {
        const reply = LeaseGrant.decode((await this.nc.request(subject, bytes, { timeout: this.options.requestTimeoutMs })).data);
        if (reply.status === LeaseGrant_Status.STATUS_GRANTED) {
          this.stats.leases++;
          this.log.debug("budget lease", { budget, requests: reply.requests, tokens: reply.tokens, window: reply.window });
          return toGrant(reply);
        }
      } catch (err) {
        if (!isNoResponders(err) && !isTimeout(err)) throw err;
        if (isTimeout(err)) this.log.warn("budget owner did not answer a lease", { budget, timeoutMs: this.options.requestTimeoutMs });
      }
      const left = deadline - performance.now();
      if (left <= 0) break;
      if (attempt > 0) await sleep(Math.min(25 * attempt, 250, left));
      await this.activate(budget, deadline);
    }
    throw errors.unavailable("Rate limits cannot be checked right now: no owner of this budget answered. Please retry shortly.", 1);
  }

  /** Hands an unused part of a chunk back (best effort: a lost return only leaves budget unused). */
  giveBack(budget: BudgetKey, window: number, requests: number, tokens: number): void {
    const bytes = LeaseReturn.encode({ budget, gatewayId: this.options.gatewayId, window, requests, tokens, overrunTokens: 0 }).finish();
    this.nc.publish(subjects.budgetReturn(budget.model, budget.scope, budget.scopeId), bytes);
  }

  private async activate(budget: BudgetKey, deadline: number): Promise<void> {
    const timeout = Math.max(1, Math.min(this.options.requestTimeoutMs * 2, deadline - performance.now()));
    this.stats.activations++;
    try {
      const reply = Activation.decode((await this.nc.request(subjects.budgetActivate, BudgetKey.encode(budget).finish(), { timeout })).data);
      if (reply.error) this.log.warn("budget activation failed", { budget, error: reply.error });
    } catch (err) {
      if (isNoResponders(err)) {
        this.log.warn("no actor host is serving rate-limit budgets", { budget });
        await sleep(Math.min(250, Math.max(0, deadline - performance.now())));
        return;
      }
      if (!isTimeout(err)) throw err;
    }
  }
}

function toGrant(g: LeaseGrant): Grant {
  return {
    window: g.window,
    windowMs: g.windowMs,
    windowEndsInMs: g.windowEndsInMs,
    requests: g.requests,
    tokens: g.tokens,
    remainingRequests: g.remainingRequests,
    remainingTokens: g.remainingTokens,
    limits: { requests: g.limits?.requests ?? 0, tokens: g.limits?.tokens ?? 0 },
  };
}
