import t from "tap";
import { TriggerMatcher } from "../../runners/text/trigger-matcher.js";

t.test("text without triggers passes through", async (t) => {
  const m = new TriggerMatcher([]);
  t.same(m.push("hello"), { emit: "hello" });
});

t.test("a trigger split across pushes is held back, found, and not emitted", async (t) => {
  const m = new TriggerMatcher([{ text: "STOP", kind: "stop" }]);
  t.equal(m.push("abc S").emit, "abc ");
  t.equal(m.pending, "S");
  t.equal(m.push("T").emit, "");
  const r = m.push("OP and more");
  t.equal(r.emit, "");
  t.equal(r.hit?.text, "STOP");
  t.equal(r.after, " and more");
});

t.test("a false start is released once it cannot be a trigger", async (t) => {
  const m = new TriggerMatcher([{ text: "STOP", kind: "stop" }]);
  t.equal(m.push("ST").emit, "");
  t.equal(m.push("ART").emit, "START");
});

t.test("the earliest of several triggers wins", async (t) => {
  const m = new TriggerMatcher([{ text: "world", kind: "a" }, { text: "lo w", kind: "b" }]);
  const r = m.push("hello world");
  t.equal(r.hit?.kind, "b");
  t.equal(r.emit, "hel");
});

t.test("flush returns what was held", async (t) => {
  const m = new TriggerMatcher([{ text: "</end>", kind: "stop" }]);
  t.equal(m.push("x </en").emit, "x ");
  t.equal(m.flush(), "</en");
  t.equal(m.pending, "");
});

t.test("the longest suffix that starts any trigger is held, whichever trigger it starts", async (t) => {
  const m = new TriggerMatcher([{ text: "<|im_end|>", kind: "stop" }, { text: "\n\nUser:", kind: "stop" }]);
  t.equal(m.push("one <|im").emit, "one ");
  t.equal(m.pending, "<|im");
  t.equal(m.push("_x\n\nUs").emit, "<|im_x");
  t.equal(m.pending, "\n\nUs");
  // "a" after "\n\nUs" breaks that prefix, and no shorter suffix starts a trigger.
  t.equal(m.push("a").emit, "\n\nUsa");
  t.equal(m.pending, "");
});
