import type { ModelSpec } from "../catalog/mod.js";
import type { BudgetKey } from "../../proto/gen/tributary/v1/ratelimit.js";
import type { Principal } from "../accounts/mod.js";
import { RateLimited } from "../errors/mod.js";
import type { BudgetClient } from "./budget-client.js";
import { goDuration, rateLimitHeaders, retryAfterHeaders } from "./headers.js";
import { BudgetDenied, LocalBudget, DEFAULT_LOCAL_BUDGET_OPTIONS, type LocalBudgetOptions, type Taken } from "./local-budget.js";
import { scopeIdOf, type Admission, type RateLimiter, type RateLimitScope } from "./rate-limiter.js";

const SWEEP_MS = 100;

interface BudgetEntry {
  key: BudgetKey;
  local: LocalBudget;
  /** A lease was granted once: the owner is known to exist (else activation comes first). */
  leased: boolean;
}

/**
 * Rate limits shared by every gateway: each budget (model x scope) is owned by one actor in the
 * actor hosts, and this gateway admits requests from chunks it leases from the owners (see
 * LocalBudget). The budget is a fixed window (one minute by default, aligned to the clock of the
 * owner): x-ratelimit-reset-* say when the current window ends.
 */
export class ClusterRateLimiter implements RateLimiter {
  private readonly budgets = new Map<string, BudgetEntry>();
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly client: BudgetClient,
    private readonly scope: RateLimitScope,
    private readonly options: LocalBudgetOptions = DEFAULT_LOCAL_BUDGET_OPTIONS,
  ) {}

  start(): void {
    this.timer = setInterval(() => this.sweep(), SWEEP_MS);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    for (const b of this.budgets.values()) b.local.returnUnused();
  }

  admit(principal: Principal, spec: ModelSpec, estimatedTokens: number): Admission | Promise<Admission> {
    const limits = { requests: spec.rateLimits.requestsPerMinute, tokens: spec.rateLimits.tokensPerMinute };
    const scopeId = scopeIdOf(principal, this.scope);
    if (estimatedTokens > limits.tokens) throw this.tooLarge(spec, scopeId, limits.tokens, estimatedTokens);
    const budget = this.budget(spec.id, scopeId, limits);
    const fail = (err: unknown): never => {
      throw err instanceof BudgetDenied ? this.denied(err, spec, scopeId) : err;
    };
    let taken: Taken | Promise<Taken>;
    try {
      taken = budget.admit(estimatedTokens, limits);
    } catch (err) {
      return fail(err);
    }
    if (taken instanceof Promise) return taken.then((t) => this.admission(budget, scopeId, spec.id, t), fail);
    return this.admission(budget, scopeId, spec.id, taken);
  }

  private budget(model: string, scopeId: string, limits: { requests: number; tokens: number }): LocalBudget {
    const id = `${model}\u0000${scopeId}`;
    let entry = this.budgets.get(id);
    if (!entry) {
      const key: BudgetKey = { model, scope: this.scope, scopeId };
      const budget = { key, leased: false } as BudgetEntry;
      budget.local = new LocalBudget(
        async (ask) => {
          const grant = await this.client.lease(key, limits, ask, !budget.leased);
          budget.leased = true;
          return grant;
        },
        (window, requests, tokens) => this.client.giveBack(key, window, requests, tokens),
        limits,
        this.options,
      );
      entry = budget;
      this.budgets.set(id, entry);
    }
    return entry.local;
  }

  private admission(budget: LocalBudget, scopeId: string, model: string, taken: Taken): Admission {
    let settled = false;
    return {
      headers: rateLimitHeaders(taken.snapshot),
      settle: (used: number) => {
        if (settled) return;
        settled = true;
        budget.settle(taken.window, taken.tokens, Math.max(0, used));
      },
      hold: () => {
        if (settled) return undefined;
        settled = true;
        return { model, scope: this.scope, scopeId, window: taken.window, tokens: taken.tokens };
      },
    };
  }

  private sweep(): void {
    for (const [id, b] of this.budgets) if (b.local.sweep()) this.budgets.delete(id);
  }

  private where(scopeId: string): string {
    return this.scope === "key" ? `for key ${scopeId}` : `in ${this.scope} ${scopeId}`;
  }

  private denied(d: BudgetDenied, spec: ModelSpec, scopeId: string): RateLimited {
    const s = d.snapshot;
    const requests = d.which === "requests";
    const limit = requests ? s.limitRequests : s.limitTokens;
    const remaining = Math.max(0, Math.floor(requests ? s.remainingRequests : s.remainingTokens));
    const unit = d.windowMs === 60_000
      ? (requests ? "requests per min (RPM)" : "tokens per min (TPM)")
      : `${d.which} per ${goDuration(d.windowMs)} window`;
    const wait = s.resetMs > 0 ? s.resetMs : 1000;
    return new RateLimited({
      message:
        `Rate limit reached for ${spec.id} ${this.where(scopeId)} on ${unit}: Limit ${limit}, Used ${limit - remaining}, Requested ${d.requested}. ` +
        `Please try again in ${goDuration(wait)}.`,
      limit: requests ? "requests" : "tokens",
      retryable: true,
      headers: { ...rateLimitHeaders(s), ...retryAfterHeaders(wait) },
    });
  }

  /** A request whose estimate alone exceeds the limit can never be admitted: retrying is pointless. */
  private tooLarge(spec: ModelSpec, scopeId: string, limit: number, requested: number): RateLimited {
    return new RateLimited({
      message:
        `Request too large for ${spec.id} ${this.where(scopeId)} on tokens per min (TPM): Limit ${limit}, Requested ${requested}. ` +
        `The input or output tokens must be reduced in order to run successfully (lower max_tokens or the length of the messages).`,
      limit: "tokens",
      retryable: false,
      headers: {},
    });
  }
}
