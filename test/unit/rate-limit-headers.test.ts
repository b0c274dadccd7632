import t from "tap";
import { goDuration, parseGoDuration, rateLimitHeaders, retryAfterHeaders } from "../../modules/ratelimit/mod.js";

t.test("durations are written like Go's time.Duration", async (t) => {
  const cases: Array<[number, string]> = [
    [0, "0s"],
    [-5, "0s"],
    [20, "20ms"],
    [999, "999ms"],
    [1000, "1s"],
    [17_500, "17.5s"],
    [1_001, "1.001s"],
    [59_999, "59.999s"],
    [60_000, "1m0s"],
    [360_000, "6m0s"],
    [3_723_000, "1h2m3s"],
    [3_600_000, "1h0m0s"],
  ];
  for (const [ms, text] of cases) {
    t.equal(goDuration(ms), text, `${ms} ms`);
    if (ms >= 0) t.equal(parseGoDuration(text), ms, `${text} back`);
  }
  t.equal(parseGoDuration("1.5ms"), 1.5);
  t.throws(() => parseGoDuration("5 minutes"));
  t.throws(() => parseGoDuration(""));
});

t.test("headers: integers, clamped; the reset is 0s while nothing is used", async (t) => {
  const h = rateLimitHeaders({ limitRequests: 250, remainingRequests: 249.7, limitTokens: 100_000, remainingTokens: -3, resetMs: 17_500 });
  t.same(h, {
    "x-ratelimit-limit-requests": "250",
    "x-ratelimit-remaining-requests": "249",
    "x-ratelimit-reset-requests": "17.5s",
    "x-ratelimit-limit-tokens": "100000",
    "x-ratelimit-remaining-tokens": "0",
    "x-ratelimit-reset-tokens": "17.5s",
  });
  const unused = rateLimitHeaders({ limitRequests: 5, remainingRequests: 5, limitTokens: 10, remainingTokens: 10, resetMs: 30_000 });
  t.equal(unused["x-ratelimit-reset-requests"], "0s");
  t.equal(unused["x-ratelimit-reset-tokens"], "0s");
});

t.test("retry-after is whole seconds, at least 1; retry-after-ms is exact", async (t) => {
  t.same(retryAfterHeaders(20), { "retry-after": "1", "retry-after-ms": "20" });
  t.same(retryAfterHeaders(1000), { "retry-after": "1", "retry-after-ms": "1000" });
  t.same(retryAfterHeaders(1001), { "retry-after": "2", "retry-after-ms": "1001" });
  t.same(retryAfterHeaders(0), { "retry-after": "1", "retry-after-ms": "1" });
});
