import t from "tap";
import { asciiContentFrame } from "../../gateway/sse/content-frame.js";

// A content chunk framed as bytes must be exactly the UTF-8 of the string framing; texts that
// JSON escapes, or that are not ASCII, are left to the string framing.

t.test("plain ASCII frames as the string framing's bytes; anything else is refused", async (t) => {
  const prefix = 'data: {"id":"chatcmpl-é","choices":[{"index":0,"delta":{"content":';
  const suffix = '},"logprobs":null,"finish_reason":null}]}\n\n';
  const prefixBytes = Buffer.from(prefix);
  const suffixBytes = Buffer.from(suffix);
  for (const text of [" the", "x", "~{}[]'`/<>\x7f", "a".repeat(40_000)]) {
    const bytes = asciiContentFrame(prefixBytes, text, suffixBytes);
    t.same(bytes && Buffer.from(bytes), Buffer.from(prefix + JSON.stringify(text) + suffix), `${JSON.stringify(text.slice(0, 20))} (${text.length} chars)`);
  }
  for (const text of ['say "hi"', "back\\slash", "line\n", "tab\t", "\x00", "é", "😀", "\u2028"])
    t.equal(asciiContentFrame(prefixBytes, text, suffixBytes), undefined, printable(text));
});

/** A test name TAP's parser reads as one line (U+2028 in a name breaks the output). */
function printable(text: string): string {
  return JSON.stringify(text).replace(/[^\x20-\x7e]/gu, (c) => `\\u{${c.codePointAt(0)!.toString(16)}}`);
}

t.test("a frame is a view of a reused buffer: the next one overwrites it", async (t) => {
  const first = Buffer.from(asciiContentFrame(Buffer.from("<"), "one", Buffer.from(">"))!);
  const second = asciiContentFrame(Buffer.from("<"), "two", Buffer.from(">"))!;
  t.equal(first.toString(), '<"one">');
  t.equal(Buffer.from(second).toString(), '<"two">');
});

t.test("frames of one size share a view; the buffer grown for a long frame gets views of its own", async (t) => {
  const a = asciiContentFrame(Buffer.from("<"), "abc", Buffer.from(">"))!;
  const b = asciiContentFrame(Buffer.from("<"), "xyz", Buffer.from(">"))!;
  t.equal(a, b, "the same view");
  t.equal(Buffer.from(b).toString(), '<"xyz">');
  const long = "y".repeat(40 * 1024);
  t.equal(Buffer.from(asciiContentFrame(Buffer.from("<"), long, Buffer.from(">"))!).toString(), `<"${long}">`, "longer than the buffer was");
  const c = asciiContentFrame(Buffer.from("<"), "123", Buffer.from(">"))!;
  t.equal(Buffer.from(c).toString(), '<"123">', "a view of the new buffer");
  t.not(c, a);
});
