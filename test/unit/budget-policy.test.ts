import t from "tap";
import { applyReturn, decideChunk, freshRecord, remaining, rollWindow, windowEndsInMs } from "../../modules/ratelimit/mod.js";

const limits = { requests: 60, tokens: 10_000 };
const ask = (needRequests: number, needTokens: number, wantRequests = needRequests, wantTokens = needTokens) => ({ needRequests, needTokens, wantRequests, wantTokens });

t.test("a chunk covers the need, grows toward the want, and is capped by a fair share", async (t) => {
  const rec = freshRecord("h", 60_000, 120_000, limits);
  t.same(decideChunk(rec, ask(1, 100), 1), { requests: 1, tokens: 100 }, "no demand history: just the need");
  t.same(decideChunk(rec, ask(1, 100, 50, 8000), 1), { requests: 30, tokens: 5000 }, "half of what is left for a lone gateway");
  t.same(decideChunk(rec, ask(1, 100, 50, 8000), 3), { requests: 10, tokens: 1667 }, "a sixth each for three gateways");
  t.same(decideChunk(rec, ask(40, 9000, 40, 9000), 3), { requests: 40, tokens: 9000 }, "the need is granted even beyond the share");
});

t.test("never more than what is left; a short grant tells the budget is spent", async (t) => {
  const rec = freshRecord("h", 60_000, 0, limits);
  rec.granted_requests = 58;
  rec.granted_tokens = 9_900;
  t.same(remaining(rec), { requests: 2, tokens: 100 });
  t.same(decideChunk(rec, ask(5, 500, 10, 1000), 1), { requests: 2, tokens: 100 });
  rec.granted_requests = 60;
  t.same(decideChunk(rec, ask(1, 1), 1), { requests: 0, tokens: 1 });
});

t.test("windows: a new one starts empty, they never go back, returns count only in their window", async (t) => {
  const rec = freshRecord("h", 1000, 5_500, limits);
  t.equal(rec.window, 5);
  t.equal(windowEndsInMs(rec, 5_500), 500);
  rec.granted_requests = 10;
  rollWindow(rec, 1000, 5_999);
  t.equal(rec.granted_requests, 10, "same window");
  t.ok(applyReturn(rec, 5, { requests: 4, tokens: 0 }));
  t.equal(rec.granted_requests, 6);
  rollWindow(rec, 1000, 6_000);
  t.equal(rec.window, 6);
  t.equal(rec.granted_requests, 0, "new window");
  t.notOk(applyReturn(rec, 5, { requests: 4, tokens: 0 }), "a return from the old window is ignored");
  rec.granted_requests = 3;
  rollWindow(rec, 1000, 4_000);
  t.equal(rec.window, 6, "a clock behind the record does not move it back");
  t.equal(rec.granted_requests, 3);
  rollWindow(rec, 2000, 13_000);
  t.same([rec.window, rec.window_ms, rec.granted_requests], [6, 2000, 0], "a new window length starts afresh");
  t.ok(applyReturn(rec, 6, { requests: 10, tokens: 10 }));
  t.same([rec.granted_requests, rec.granted_tokens], [0, 0], "never below zero");
});
