import t from "tap";
import { PendingBudget } from "../../gateway/sse/pending-budget.js";

t.test("a stream over its own bound is exceeded, one at it is not", async (t) => {
  const budget = new PendingBudget(100, 1000);
  budget.update(0, 100);
  t.notOk(budget.exceeded(100));
  t.ok(budget.exceeded(101));
});

t.test("over the total, only the streams holding at least the average are exceeded", async (t) => {
  const budget = new PendingBudget(1000, 1000);
  budget.update(0, 900); // a reader far behind
  budget.update(0, 150); // one behind for a moment
  t.equal(budget.used, 1050);
  t.ok(budget.exceeded(900), "the largest holder");
  t.notOk(budget.exceeded(150), "not the one that fell behind for a moment");
  budget.update(900, 0); // the largest was dropped
  t.equal(budget.used, 150);
  t.notOk(budget.exceeded(150), "under the total again");
});

t.test("a stream dropped reports the bound it crossed", async (t) => {
  const seen: string[] = [];
  const budget = new PendingBudget(100, 150, (bound) => seen.push(bound));
  budget.dropped(101);
  budget.dropped(80);
  t.same(seen, ["stream", "total"]);
});
