import type { BudgetSnapshot } from "./headers.js";

// A gateway's share of one budget: the chunk it leased from the budget's owner for the current
// window, from which it admits requests locally. Only when the chunk runs short does a request
// wait for a round trip; requests that arrive meanwhile join that wait, and the next lease asks
// for all of them at once.

export interface Limits {
  requests: number;
  tokens: number;
}

/** What the owner answered to a lease request. */
export interface Grant {
  window: number;
  windowMs: number;
  windowEndsInMs: number;
  requests: number;
  tokens: number;
  remainingRequests: number;
  remainingTokens: number;
  limits: Limits;
}

export interface LeaseAsk {
  needRequests: number;
  needTokens: number;
  wantRequests: number;
  wantTokens: number;
}

/** Grants that arrive already over, in a row, before waiting requests are refused for want of budget. */
const MAX_LAPSED_GRANTS = 3;

/** One admitted request: what it was charged, in which window. */
export interface Taken {
  window: number;
  tokens: number;
  snapshot: BudgetSnapshot;
}

/** The budget cannot admit the request in this window. */
export class BudgetDenied extends Error {
  override name = "BudgetDenied";
  constructor(readonly which: "requests" | "tokens", readonly requested: number, readonly snapshot: BudgetSnapshot, readonly windowMs: number) {
    super(`budget exhausted (${which})`);
  }
}

export interface LocalBudgetOptions {
  /** How long a denial is remembered, sparing the owner a round trip per refused request. */
  denialCacheMs: number;
  /** A chunk left unused this long goes back to the owner, for other gateways to lease. */
  maxIdleReturnMs: number;
}

export const DEFAULT_LOCAL_BUDGET_OPTIONS: LocalBudgetOptions = { denialCacheMs: 200, maxIdleReturnMs: 1000 };

interface Waiter {
  tokens: number;
  resolve(taken: Taken): void;
  reject(err: unknown): void;
}

export class LocalBudget {
  private window = -1;
  /** performance.now() after which the leased chunk is void (its window ended). */
  private expiresAt = 0;
  private windowMs = 60_000;
  /** Leased and not yet used. Tokens go below zero when usage exceeded an estimate (a deficit). */
  private requests = 0;
  private tokens = 0;
  /** Unallocated at the owner when it last answered (for the headers). */
  private ownerRequests: number;
  private ownerTokens: number;
  private limits: Limits;
  private readonly queue: Waiter[] = [];
  private leasing = false;
  private deniedUntil = 0;
  private lastUse = 0;
  // Admissions of the current and previous second: the demand that sizes the next lease.
  private rateSecond = 0;
  private rateRequests = [0, 0];
  private rateTokens = [0, 0];

  constructor(
    private readonly lease: (ask: LeaseAsk) => Promise<Grant>,
    private readonly giveBack: (window: number, requests: number, tokens: number) => void,
    limits: Limits,
    private readonly options: LocalBudgetOptions = DEFAULT_LOCAL_BUDGET_OPTIONS,
    private readonly now: () => number = () => performance.now(),
  ) {
    this.limits = { ...limits };
    this.ownerRequests = limits.requests;
    this.ownerTokens = limits.tokens;
  }

  /** Takes one request and `tokens` from the chunk, leasing more when it is short. */
  admit(tokens: number, limits: Limits): Taken | Promise<Taken> {
    const now = this.now();
    this.expire(now);
    this.limits = { ...limits };
    if (this.queue.length === 0 && this.requests >= 1 && this.tokens >= tokens) return this.take(tokens, now);
    if (now < this.deniedUntil) {
      if (this.requests + this.ownerRequests < 1) throw new BudgetDenied("requests", 1, this.snapshot(now), this.windowMs);
      if (this.tokens + this.ownerTokens < tokens) throw new BudgetDenied("tokens", tokens, this.snapshot(now), this.windowMs);
    }
    return new Promise<Taken>((resolve, reject) => {
      this.queue.push({ tokens, resolve, reject });
      void this.pump();
    });
  }

  /** The request charged `charged` in `window` used `used`: the difference goes back into the chunk. */
  settle(window: number, charged: number, used: number): void {
    if (window !== this.window || this.now() >= this.expiresAt) return; // that window is over
    this.tokens += charged - used;
  }

  /**
   * Gives an idle chunk back to the owner. Returns true when the budget has been idle so long
   * (two windows) that the gateway may forget it.
   */
  sweep(): boolean {
    const now = this.now();
    this.expire(now);
    if (this.queue.length > 0 || this.leasing) return false;
    const idleFor = now - this.lastUse;
    if (idleFor >= Math.min(this.options.maxIdleReturnMs, this.windowMs / 10)) this.returnUnused();
    return idleFor > 2 * this.windowMs && this.window === -1;
  }

  /** Gives back whatever is held (shutdown). */
  returnUnused(): void {
    if (this.window === -1 || this.now() >= this.expiresAt) return;
    const requests = Math.max(0, this.requests);
    const tokens = Math.max(0, this.tokens);
    if (requests === 0 && tokens === 0) return;
    this.requests -= requests;
    this.tokens -= tokens;
    this.ownerRequests += requests;
    this.ownerTokens += tokens;
    this.giveBack(this.window, requests, tokens);
  }

  snapshot(now = this.now()): BudgetSnapshot {
    const valid = this.window !== -1 && now < this.expiresAt;
    return {
      limitRequests: this.limits.requests,
      limitTokens: this.limits.tokens,
      remainingRequests: valid ? Math.max(0, this.requests) + this.ownerRequests : this.limits.requests,
      remainingTokens: valid ? Math.max(0, this.tokens) + this.ownerTokens : this.limits.tokens,
      resetMs: valid ? this.expiresAt - now : 0,
    };
  }

  private expire(now: number): void {
    if (this.window !== -1 && now >= this.expiresAt) {
      // The window ended: what was left of the chunk (and any deficit) ends with it.
      this.window = -1;
      this.requests = 0;
      this.tokens = 0;
      this.ownerRequests = this.limits.requests;
      this.ownerTokens = this.limits.tokens;
      this.deniedUntil = 0;
    }
  }

  private take(tokens: number, now: number): Taken {
    this.requests -= 1;
    this.tokens -= tokens;
    this.lastUse = now;
    const second = Math.floor(now / 1000);
    if (second !== this.rateSecond) {
      // This second's counts become the previous second's (or nothing, after a quiet second).
      const adjacent = second === this.rateSecond + 1;
      this.rateRequests = [adjacent ? this.rateRequests[1]! : 0, 0];
      this.rateTokens = [adjacent ? this.rateTokens[1]! : 0, 0];
      this.rateSecond = second;
    }
    this.rateRequests[1]! += 1;
    this.rateTokens[1]! += tokens;
    return { window: this.window, tokens, snapshot: this.snapshot(now) };
  }

  /** Demand of the last full second (or of this one so far, if larger). */
  private recentDemand(): { requests: number; tokens: number } {
    return { requests: Math.max(this.rateRequests[0]!, this.rateRequests[1]!), tokens: Math.max(this.rateTokens[0]!, this.rateTokens[1]!) };
  }

  private async pump(): Promise<void> {
    if (this.leasing || this.queue.length === 0) return;
    this.leasing = true;
    // Grants that came back already over (their window ended while the lease was on its way),
    // in a row: each is asked for again, in the window that has begun, a few times at most.
    let lapsed = 0;
    try {
      while (this.queue.length > 0) {
        const sentAt = this.now();
        this.expire(sentAt);
        const queuedTokens = this.queue.reduce((sum, w) => sum + w.tokens, 0);
        const needRequests = Math.max(0, this.queue.length - this.requests);
        const needTokens = Math.max(0, queuedTokens - this.tokens);
        const demand = this.recentDemand();
        let grant: Grant;
        try {
          grant = await this.lease({
            needRequests,
            needTokens,
            wantRequests: needRequests + demand.requests,
            wantTokens: needTokens + demand.tokens,
          });
        } catch (err) {
          for (const w of this.queue.splice(0)) w.reject(err);
          return;
        }
        this.apply(grant, sentAt);
        const now = this.now();
        // A chunk of a window that has ended admits nothing: admitting from it would spend the
        // ended window's budget in the new one, beside the new window's own.
        this.expire(now);
        if (this.window === -1 && lapsed++ < MAX_LAPSED_GRANTS) continue;
        const short = this.window === -1 || grant.requests < needRequests || grant.tokens < needTokens;
        const waiting = this.queue.splice(0);
        for (const w of waiting) {
          if (this.requests >= 1 && this.tokens >= w.tokens) w.resolve(this.take(w.tokens, now));
          else if (short) w.reject(new BudgetDenied(this.requests < 1 ? "requests" : "tokens", this.requests < 1 ? 1 : w.tokens, this.snapshot(now), this.windowMs));
          else this.queue.push(w); // arrived after the lease was asked for: ask again
        }
        if (short) this.deniedUntil = Math.min(this.expiresAt, now + this.options.denialCacheMs);
      }
    } finally {
      this.leasing = false;
    }
  }

  private apply(grant: Grant, sentAt: number): void {
    if (grant.window !== this.window) {
      // A new window: the old chunk (and its deficit) belonged to the old one.
      this.requests = 0;
      this.tokens = 0;
      this.deniedUntil = 0;
    }
    this.window = grant.window;
    this.windowMs = grant.windowMs;
    // Measured from when the lease was asked for, so the chunk never outlives the owner's window.
    this.expiresAt = sentAt + grant.windowEndsInMs;
    this.requests += grant.requests;
    this.tokens += grant.tokens;
    this.ownerRequests = grant.remainingRequests;
    this.ownerTokens = grant.remainingTokens;
    this.limits = { ...grant.limits };
  }
}
