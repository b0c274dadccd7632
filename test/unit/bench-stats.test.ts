import t from "tap";
import { median, percentile } from "../../bench/lib/stats.js";

t.test("median: the middle measured value, the upper of two for an even count", async (t) => {
  t.equal(median([3, 1, 2]), 2);
  t.equal(median([4, 1, 3, 2]), 3, "upper middle, not 2.5");
  t.equal(median([10, 2]), 10, "of two rounds, the higher");
  t.equal(median([66, 66, 49]), 66);
  t.equal(median([5]), 5);
  t.equal(percentile([4, 1, 3, 2], 50), 2, "percentile 50 takes the lower middle");
  t.equal(median([3, 1, 2]), percentile([3, 1, 2], 50), "the same for an odd count");
});

t.test("median: non-finite values are left out; NaN when none is left", async (t) => {
  t.equal(median([NaN, 7, Infinity, 1, 4]), 4);
  t.ok(Number.isNaN(median([])));
  t.ok(Number.isNaN(median([NaN, NaN])));
});

t.test("median leaves its input unsorted", async (t) => {
  const xs = [3, 1, 2];
  median(xs);
  t.same(xs, [3, 1, 2]);
});
