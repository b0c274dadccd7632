import t from "tap";
import { cutText } from "../../modules/responses/mod.js";
import { kvToken, kvTokenDecode } from "../../lib/nats/subjects.js";

t.test("kvToken writes any string as one KV key token, reversibly", async (t) => {
  for (const s of ["proj-local", "proj_1", "a.b", "team/app", "x=y", "Ünïcode ✓", "*>", ""]) {
    const token = kvToken(s);
    t.match(token, /^[-_=A-Za-z0-9]*$/, token);
    t.equal(kvTokenDecode(token), s);
  }
  t.not(kvToken("a/b"), kvToken("a=2Fb"), "escapes cannot collide with literal text");
});

t.test("cutText never splits a surrogate pair", async (t) => {
  const text = "a😀".repeat(10);
  for (const size of [1, 2, 3, 4, 7]) {
    const pieces = cutText(text, size);
    t.equal(pieces.join(""), text);
    for (const p of pieces) t.doesNotThrow(() => encodeURIComponent(p), "each piece is well-formed UTF-16");
  }
  t.same(cutText(""), [""]);
});
