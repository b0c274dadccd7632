import t from "tap";
import { JsonCompletionTracker } from "../../runners/text/json-completion.js";

t.test("finds the end of the top-level object across pushes", async (t) => {
  const j = new JsonCompletionTracker();
  t.equal(j.push('{"a": {"b": ['), -1);
  t.equal(j.push("1, 2]}, "), -1);
  t.equal(j.push('"c": "}"}\n\n'), 9);
  t.ok(j.complete);
});

t.test("braces inside strings and escaped quotes do not count", async (t) => {
  const j = new JsonCompletionTracker();
  t.equal(j.push('{"x": "a \\" } ]"'), -1);
  t.equal(j.push("}"), 1);
});

t.test("arrays at the top level", async (t) => {
  const j = new JsonCompletionTracker();
  t.equal(j.push("[1, [2], {}] tail"), 12);
});
