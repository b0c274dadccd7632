import t from "tap";
import { LATENCY_BOUNDS_MS, latencyCount, latencyQuantile, mergeLatency, observeLatency, summarizeLatency } from "../../modules/usage/mod.js";

// Usage rows keep latency as counts per fixed bucket: they add exactly (minute -> hour -> day
// equals observing everything at once), and percentiles come from the counts.

t.test("a value on a bound falls in that bound's bucket; just above it, in the next", async (t) => {
  const at = (ms: number) => {
    const h: number[] = [];
    observeLatency(h, ms);
    return h.length - 1;
  };
  t.equal(at(0), 0);
  t.equal(at(1), 0, "1 ms: the first bucket (<= 1)");
  t.equal(at(1.001), 1);
  t.equal(at(600_000), LATENCY_BOUNDS_MS.length - 1, "the last bound");
  t.equal(at(600_001), LATENCY_BOUNDS_MS.length, "above it: the overflow bucket");
  const h: number[] = [];
  observeLatency(h, -1);
  observeLatency(h, Number.NaN);
  observeLatency(h, Number.POSITIVE_INFINITY);
  t.same(h, [], "nonsense is not counted");
});

t.test("histograms fold exactly: minutes into an hour equal the hour observed at once", async (t) => {
  const values = Array.from({ length: 500 }, (_, i) => ((i * 7919) % 4000) / 3 + 0.5);
  const whole: number[] = [];
  for (const v of values) observeLatency(whole, v);
  const minutes: number[][] = Array.from({ length: 7 }, () => []);
  values.forEach((v, i) => observeLatency(minutes[i % 7]!, v));
  const hour: number[] = [];
  for (const m of minutes) mergeLatency(hour, m);
  t.same(hour, whole);
  t.equal(latencyCount(hour), 500);
  const day: number[] = [];
  mergeLatency(day, hour);
  mergeLatency(day, undefined);
  mergeLatency(day, []);
  t.same(day, whole, "absent histograms (rows from before) add nothing");
});

t.test("percentiles from the counts", async (t) => {
  t.equal(latencyQuantile([], 0.5), null);
  t.same(summarizeLatency(undefined), { count: 0, p50: null, p95: null, p99: null });
  const h: number[] = [];
  for (let i = 0; i < 90; i++) observeLatency(h, 8); // bucket (7, 10]
  for (let i = 0; i < 10; i++) observeLatency(h, 400); // bucket (300, 500]
  const p50 = latencyQuantile(h, 0.5)!;
  t.ok(p50 > 7 && p50 <= 10, `p50 ${p50} in the bucket of 8 ms`);
  const p95 = latencyQuantile(h, 0.95)!;
  t.ok(p95 > 300 && p95 <= 500, `p95 ${p95} in the bucket of 400 ms`);
  t.equal(latencyQuantile(h, 1), 500, "the maximum: the bucket's upper bound");
  const over: number[] = [];
  observeLatency(over, 10 * 60_000 + 1);
  t.equal(latencyQuantile(over, 0.5), 600_000, "beyond the last bound: the last bound");
  const s = summarizeLatency(h);
  t.equal(s.count, 100);
  t.ok(s.p50! <= s.p95! && s.p95! <= s.p99!, "ordered");
});
