import t from "tap";
import { runSecondsPerBucket, type RunSpan } from "../../modules/usage/mod.js";

// The platform's run time per bucket, from the spans its records give: a span counts only where
// it overlaps a bucket, spans at once add up, kinds stay apart.

t.test("spans are cut at the buckets' edges and summed per kind", async (t) => {
  const starts = [0, 60, 120];
  const spans: RunSpan[] = [
    { kind: "sandbox", start: 30, end: 90 }, // 30 s in the first bucket, 30 in the second
    { kind: "sandbox", start: 70, end: 80 }, // at the same time as the first: adds up
    { kind: "job", start: -100, end: 10 }, // began before the buckets: 10 s counted
    { kind: "app", start: 150, end: 400 }, // runs past the last bucket: 30 s counted
    { kind: "job", start: 200, end: 300 }, // after every bucket: nothing
    { kind: "sandbox", start: 50, end: 50 }, // no length
  ];
  const { buckets, total } = runSecondsPerBucket(spans, starts, 60);
  t.same(buckets, [
    { sandbox: 30, job: 10, app: 0 },
    { sandbox: 40, job: 0, app: 0 },
    { sandbox: 0, job: 0, app: 30 },
  ]);
  t.same(total, { sandbox: 70, job: 10, app: 30 });
});

t.test("no buckets, no spans", async (t) => {
  t.same(runSecondsPerBucket([], [0, 60], 60).total, { sandbox: 0, job: 0, app: 0 });
  t.same(runSecondsPerBucket([{ kind: "app", start: 0, end: 10 }], [], 60).buckets, []);
});
