import t from "tap";
import { TokenOffsets } from "../../runners/text/token-offsets.js";
import { TriggerMatcher } from "../../runners/text/trigger-matcher.js";

// Per-token values (logprobs) travel with their token's text through a TriggerMatcher: released
// when the text they start is emitted, held while it is held back, dropped when it is cut.

/** Streams tokens through a stop matcher as the llama engine's text phase does; returns the deltas. */
function run(tokens: string[], stops: string[]) {
  const matcher = new TriggerMatcher(stops.map((text) => ({ text, kind: "stop" as const })));
  const offsets = new TokenOffsets<string>();
  const deltas: Array<[string, string[]]> = [];
  let fed = 0;
  let sent = 0;
  const send = (text: string, values: string[]) => {
    if (text || values.length) deltas.push([text, values]);
  };
  for (const [i, token] of tokens.entries()) {
    offsets.add(fed, `t${i}`);
    fed += token.length;
    const m = matcher.push(token);
    sent += m.emit.length;
    send(m.emit, offsets.release(sent));
    if (m.hit) return { deltas, stopped: true };
  }
  const rest = matcher.flush();
  send(rest, offsets.releaseAll());
  return { deltas, stopped: false };
}

t.test("each token's value goes out with its text", async (t) => {
  t.same(run(["Once", " upon", " a"], []).deltas, [["Once", ["t0"]], [" upon", ["t1"]], [" a", ["t2"]]]);
});

t.test("text held back as a possible stop sequence keeps its tokens' values until it goes out", async (t) => {
  // "The" could start "The end": held; " cat" shows it does not.
  t.same(run(["Once", " The", " cat"], [" The end"]).deltas, [["Once", ["t0"]], [" The cat", ["t1", "t2"]]]);
});

t.test("tokens of a stop sequence are never sent; one straddling the cut goes with the text it starts", async (t) => {
  const { deltas, stopped } = run(["Hi", " th", "ere", " The", " end", " more"], [" The end"]);
  t.ok(stopped);
  t.same(deltas, [["Hi", ["t0"]], [" th", ["t1"]], ["ere", ["t2"]]], "' The' and ' end' are the stop sequence: no value");
  const straddle = run(["ab", "cX", "Yz"], ["XY"]);
  t.same(straddle.deltas, [["ab", ["t0"]], ["c", ["t1"]]], "'cX' starts in the text sent: its value goes with it; 'Yz' is cut");
});

t.test("a token with no text of its own (part of a character) goes out with the character", async (t) => {
  t.same(run(["a", "", "é", "b"], []).deltas, [["a", ["t0"]], ["é", ["t1", "t2"]], ["b", ["t3"]]]);
  t.same(run(["a", ""], []).deltas, [["a", ["t0"]], ["", ["t1"]]], "at the end, every value left goes out");
});
