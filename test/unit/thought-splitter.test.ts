import t from "tap";
import { ThoughtSplitter, type ThoughtMarkers } from "../../runners/text/thought-splitter.js";

// A reply streamed token by token, split into reasoning and answer on the template's thought
// markers, whatever the tokens: markers split across tokens never leak into either side, and
// the whitespace templates put inside the markers goes, as their own parsers drop it.

const QWEN: ThoughtMarkers = { open: "<think>", close: "</think>", openAtStart: false };

/** Pushes `tokens` one at a time; what came out on each side, in order, and every step's output. */
function split(tokens: readonly string[], markers = QWEN) {
  const s = new ThoughtSplitter(markers);
  let reasoning = "";
  let answer = "";
  const steps: Array<{ reasoning: string; answer: string }> = [];
  for (const token of tokens) {
    const out = s.push(token);
    steps.push(out);
    reasoning += out.reasoning;
    answer += out.answer;
  }
  const end = s.flush();
  reasoning += end.reasoning;
  answer += end.answer;
  return { reasoning, answer, steps, reasoningTokens: s.reasoningTokens };
}

const REPLY = "<think>\nLet me think.\n</think>\n\nHello there!";

t.test("Qwen3's shape: reasoning and answer apart, the template's whitespace gone", async (t) => {
  const r = split(["<think>", "\nLet", " me", " think", ".\n", "</think>", "\n\n", "Hello", " there", "!"]);
  t.same([r.reasoning, r.answer], ["Let me think.", "Hello there!"]);
  t.equal(r.reasoningTokens, 6, "the tokens from <think> through </think>");
  t.same(r.steps[5], { reasoning: "", answer: "" }, "nothing comes out of the closing token itself");
});

t.test("whatever the tokens (every split of the reply in two and three, and one character at a time): the same two texts", async (t) => {
  const chunkings: string[][] = [[REPLY], [...REPLY]];
  for (let i = 1; i < REPLY.length; i++) {
    chunkings.push([REPLY.slice(0, i), REPLY.slice(i)]);
    for (let j = i + 1; j < REPLY.length; j += 3) chunkings.push([REPLY.slice(0, i), REPLY.slice(i, j), REPLY.slice(j)]);
  }
  let bad = 0;
  for (const tokens of chunkings) {
    const r = split(tokens);
    if (r.reasoning !== "Let me think." || r.answer !== "Hello there!") {
      bad++;
      t.fail(`${JSON.stringify(tokens)} gave ${JSON.stringify([r.reasoning, r.answer])}`);
    }
    if (r.steps.some((s) => s.reasoning.includes("<") || s.answer.includes("<") || s.answer.includes("think"))) {
      bad++;
      t.fail(`${JSON.stringify(tokens)}: a marker leaked`);
    }
  }
  t.equal(bad, 0, `${chunkings.length} chunkings`);
});

t.test("`</think>` split across tokens is held until whole, then dropped", async (t) => {
  const r = split(["<think>", "\nHmm", ", ok.\n", "</", "think", ">\n\n", "Sure", "!"]);
  t.same([r.reasoning, r.answer], ["Hmm, ok.", "Sure!"]);
  t.same(r.steps.map((s) => s.reasoning), ["", "Hmm", ", ok.", "", "", "", "", ""], "the reasoning streams; '</' and 'think' wait, then go");
  t.same(r.steps.map((s) => s.answer), ["", "", "", "", "", "", "Sure", "!"]);
  t.equal(r.reasoningTokens, 6);
  const falseAlarm = split(["<think>", "a </", "b> c", "</think>", "d"]);
  t.same([falseAlarm.reasoning, falseAlarm.answer], ["a </b> c", "d"], "a held '</' that is not the marker goes out as reasoning");
});

t.test("a reply without a thought is all answer, its whitespace kept", async (t) => {
  t.same(split(["Hello", " world"]), { reasoning: "", answer: "Hello world", steps: [{ reasoning: "", answer: "Hello" }, { reasoning: "", answer: " world" }], reasoningTokens: 0 });
  t.same([split(["\n\n", "Hi"]).answer, split(["\n\n", "Hi"]).reasoning], ["\n\nHi", ""]);
  t.same(split(["<", "b>bold"]).answer, "<b>bold", "a '<' that does not open a thought");
  t.same(split(["<thi"]).answer, "<thi", "the reply ends inside what could have been the marker: answer after all");
  t.same(split(["  "]), { reasoning: "", answer: "  ", steps: [{ reasoning: "", answer: "" }], reasoningTokens: 0 });
});

t.test("reasoning whitespace is held until more reasoning shows it was inside", async (t) => {
  const r = split(["<think>", "a\n", "\n", "b", "\n", "</think>", "c"]);
  t.same([r.reasoning, r.answer], ["a\n\nb", "c"]);
  t.same(r.steps.map((s) => s.reasoning), ["", "a", "", "\n\nb", "", "", ""]);
});

t.test("a thought the reply never closes (out of budget) keeps its reasoning, and counts its tokens", async (t) => {
  const r = split(["<think>", "\nStill", " thinking", " </thi"]);
  t.same([r.reasoning, r.answer], ["Still thinking </thi", ""]);
  t.equal(r.reasoningTokens, 4);
});

t.test("a template that opens the thought itself: the reply starts inside it", async (t) => {
  const r = split(["Because", " so.", "\n</think>", "\n\nYes"], { open: "", close: "</think>", openAtStart: true });
  t.same([r.reasoning, r.answer], ["Because so.", "Yes"]);
  t.equal(r.reasoningTokens, 3);
  const none = split(["Just", " this"], { open: "", close: "</think>", openAtStart: true });
  t.same([none.reasoning, none.answer], ["Just this", ""], "never closed: all reasoning");
});

t.test("tokens held at the start count as reasoning once they open the thought", async (t) => {
  const r = split(["\n", "<th", "ink>", "x", "</think>", "y"]);
  t.same([r.reasoning, r.answer], ["x", "y"]);
  t.equal(r.reasoningTokens, 5);
});

// gpt-oss (harmony): the analysis channel's message is the thought, the final channel's the answer.
const HARMONY: ThoughtMarkers = {
  open: "<|channel|>analysis<|message|>",
  close: "<|end|>",
  openAtStart: false,
  answerOpen: ["<|channel|>final<|message|>", "<|start|>assistant<|channel|>final<|message|>"],
};
const HARMONY_REPLY = "<|channel|>analysis<|message|>Let me think.<|end|><|start|>assistant<|channel|>final<|message|>Hello there!";

t.test("harmony: the analysis message is the reasoning, the final one the answer, whatever the tokens", async (t) => {
  const chunkings: string[][] = [[HARMONY_REPLY], [...HARMONY_REPLY]];
  for (let i = 1; i < HARMONY_REPLY.length; i++) chunkings.push([HARMONY_REPLY.slice(0, i), HARMONY_REPLY.slice(i)]);
  let bad = 0;
  for (const tokens of chunkings) {
    const r = split(tokens, HARMONY);
    const leaked = r.steps.some((s) => /<\||\|>/.test(s.reasoning + s.answer));
    if (r.reasoning !== "Let me think." || r.answer !== "Hello there!" || leaked) {
      bad++;
      t.fail(`${JSON.stringify(tokens)} gave ${JSON.stringify([r.reasoning, r.answer])}${leaked ? ", a marker leaked" : ""}`);
    }
  }
  t.equal(bad, 0, `${chunkings.length} chunkings`);
  const r = split(["<|channel|>", "analysis", "<|message|>", "Let", " me", " think", ".", "<|end|>", "<|start|>", "assistant", "<|channel|>", "final", "<|message|>", "Hello", "!"], HARMONY);
  t.equal(r.reasoningTokens, 8, "the analysis message's tokens, its header through <|end|>");
  t.same(r.steps.map((s) => s.answer), ["", "", "", "", "", "", "", "", "", "", "", "", "", "Hello", "!"], "the final header is held, then dropped");
});

t.test("harmony: a reply that is the final message at once is all answer, its header dropped", async (t) => {
  const r = split(["<|channel|>", "final", "<|message|>", "Direct", " answer."], HARMONY);
  t.same([r.reasoning, r.answer, r.reasoningTokens], ["", "Direct answer.", 0]);
  t.same(split(["Plain", " text"], HARMONY).answer, "Plain text", "no header: answer as it came");
});

t.test("harmony: another message after the analysis (a call in the commentary channel) goes out whole as answer text, for the call matcher", async (t) => {
  const r = split(["<|channel|>analysis<|message|>", "I should call it.", "<|end|>", "<|start|>assistant<|channel|>", "commentary", " to=functions.f"], HARMONY);
  t.same([r.reasoning, r.answer], ["I should call it.", "<|start|>assistant<|channel|>commentary to=functions.f"]);
  t.same(split(["<|channel|>analysis<|message|>x<|end|>", "<|start|>assist"], HARMONY).answer, "<|start|>assist", "a header cut short by the end of the reply: answer after all");
});
