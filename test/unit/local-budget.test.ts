import t from "tap";
import { BudgetDenied, LocalBudget, type Grant, type LeaseAsk } from "../../modules/ratelimit/mod.js";

// The gateway's side of a budget, against a scripted owner: which admissions need a lease, how
// waiting requests share one, what a short grant means, and settlement.

const limits = { requests: 10, tokens: 1000 };

function harness(grants: Array<(ask: LeaseAsk) => Partial<Grant>>) {
  let now = 1_000_000;
  const asks: LeaseAsk[] = [];
  const returned: Array<[number, number, number]> = [];
  let release: (() => void) | undefined;
  let hold = false;
  const budget = new LocalBudget(
    async (ask) => {
      asks.push(ask);
      if (hold) await new Promise<void>((r) => (release = r));
      const next = grants.shift();
      if (!next) throw new Error("unexpected lease");
      return { window: 7, windowMs: 60_000, windowEndsInMs: 30_000, requests: 0, tokens: 0, remainingRequests: 0, remainingTokens: 0, limits, ...next(ask) };
    },
    (window, requests, tokens) => returned.push([window, requests, tokens]),
    limits,
    { denialCacheMs: 200, maxIdleReturnMs: 1000 },
    () => now,
  );
  return {
    budget,
    asks,
    returned,
    advance: (ms: number) => (now += ms),
    hold: () => (hold = true),
    release: () => {
      hold = false;
      release?.();
    },
  };
}

t.test("admits from the leased chunk without asking again", async (t) => {
  const h = harness([() => ({ requests: 3, tokens: 300, remainingRequests: 7, remainingTokens: 700 })]);
  const first = await h.budget.admit(50, limits);
  t.equal(h.asks.length, 1);
  t.same(h.asks[0], { needRequests: 1, needTokens: 50, wantRequests: 1, wantTokens: 50 });
  t.same(first.snapshot, { limitRequests: 10, limitTokens: 1000, remainingRequests: 9, remainingTokens: 950, resetMs: 30_000 });
  const second = h.budget.admit(50, limits);
  t.notOk(second instanceof Promise, "answered synchronously from the chunk");
  t.equal(h.asks.length, 1);
});

t.test("requests waiting for a lease are asked for together", async (t) => {
  const h = harness([() => ({ requests: 1, tokens: 10 }), (ask) => ({ requests: ask.needRequests, tokens: ask.needTokens, remainingRequests: 5, remainingTokens: 500 })]);
  h.hold();
  const a = h.budget.admit(10, limits);
  const b = h.budget.admit(20, limits);
  const c = h.budget.admit(30, limits);
  h.release();
  await Promise.all([a, b, c]);
  t.equal(h.asks.length, 2);
  t.same(h.asks[1], { needRequests: 2, needTokens: 50, wantRequests: 3, wantTokens: 60 }, "b and c in one lease; the demand seen so far added");
});

t.test("a short grant means the budget is spent: 429s, remembered briefly", async (t) => {
  const h = harness([() => ({ requests: 1, tokens: 100 }), () => ({ requests: 0, tokens: 0, remainingRequests: 0, remainingTokens: 900 })]);
  await h.budget.admit(100, limits);
  const err = await Promise.resolve(h.budget.admit(10, limits)).catch((e: unknown) => e);
  t.ok(err instanceof BudgetDenied);
  t.equal((err as BudgetDenied).which, "requests");
  t.equal((err as BudgetDenied).snapshot.remainingRequests, 0);
  t.throws(() => h.budget.admit(10, limits), BudgetDenied, "denied locally, without a lease");
  t.equal(h.asks.length, 2);
});

t.test("tokens short: the requests that do not fit are refused as tokens", async (t) => {
  const h = harness([
    () => ({ requests: 5, tokens: 150, remainingRequests: 5, remainingTokens: 40 }),
    (ask) => {
      t.equal(ask.needTokens, 50, "asks only for what is missing");
      return { requests: 0, tokens: 40, remainingRequests: 5, remainingTokens: 0 };
    },
  ]);
  const a = await h.budget.admit(100, limits);
  t.ok(a);
  // 50 tokens left here, 40 at the owner: 100 more do not fit anywhere.
  const err = await Promise.resolve(h.budget.admit(100, limits)).catch((e: unknown) => e);
  t.equal((err as BudgetDenied).which, "tokens");
  t.equal((err as BudgetDenied).requested, 100);
  t.ok(h.budget.admit(80, limits), "a smaller request still fits in what was granted");
});

t.test("settlement returns what a request did not use, within its window only", async (t) => {
  const h = harness([() => ({ requests: 5, tokens: 500 }), () => ({ window: 8, requests: 5, tokens: 500 })]);
  const taken = await h.budget.admit(400, limits);
  h.budget.settle(taken.window, taken.tokens, 30);
  const again = h.budget.admit(300, limits);
  t.notOk(again instanceof Promise, "the refund made room locally (100 + 370 left)");
  t.equal(h.asks.length, 1);
  h.advance(31_000); // the window is over
  h.budget.settle(taken.window, 300, 0);
  t.equal(h.budget.snapshot().remainingTokens, limits.tokens, "a new window, not yet leased");
  await h.budget.admit(10, limits);
  t.equal(h.asks.length, 2);
  t.equal(h.budget.snapshot().remainingTokens, 490, "the refund for the old window was dropped");
});

t.test("an idle chunk goes back to the owner", async (t) => {
  const h = harness([() => ({ requests: 5, tokens: 500, remainingRequests: 0, remainingTokens: 0 })]);
  await h.budget.admit(100, limits);
  h.advance(500);
  h.budget.sweep();
  t.same(h.returned, [], "not idle yet");
  h.advance(600);
  h.budget.sweep();
  t.same(h.returned, [[7, 4, 400]]);
  t.equal(h.budget.snapshot().remainingRequests, 4, "still counted as available (at the owner)");
});

t.test("a grant whose window ended on its way admits nothing: the requests are asked for again in the new window", async (t) => {
  // The owner answered a chunk of window 7 as its window ended (or one decided before the roll).
  const h = harness([() => ({ window: 7, requests: 5, tokens: 500, windowEndsInMs: 0 }), () => ({ window: 8, requests: 5, tokens: 500, windowEndsInMs: 2_000 })]);
  const taken = await h.budget.admit(10, limits);
  t.equal(h.asks.length, 2, "asked again");
  t.equal(taken.window, 8, "admitted in the window that began, from its own chunk");
  t.equal(taken.snapshot.remainingRequests, 4, "window 7's five requests were never counted here");
});

t.test("grants that keep arriving over: refused after a few tries rather than asked for forever", async (t) => {
  const over = () => ({ window: 7, requests: 5, tokens: 500, windowEndsInMs: 0 });
  const h = harness([over, over, over, over]);
  await t.rejects(Promise.resolve(h.budget.admit(10, limits)), BudgetDenied);
  t.equal(h.asks.length, 4, "the first lease and three more");
});
