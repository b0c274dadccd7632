import { TriggerMatcher } from "./trigger-matcher.js";

/** A model's thought segment, as its chat template marks it (Qwen3: `<think>` ... `</think>`). */
export interface ThoughtMarkers {
  /** Text that opens the segment at the start of the reply ("" when the template opens it itself). */
  open: string;
  /** Text that closes it. */
  close: string;
  /** The template opened the segment in the prompt: the reply starts inside it. */
  openAtStart: boolean;
}

/** What one piece of streamed text held: reasoning first, then answer, either possibly empty. */
export interface SplitText {
  reasoning: string;
  answer: string;
}

type State = "start" | "thought" | "answer";

const NOTHING: SplitText = Object.freeze({ reasoning: "", answer: "" });
const isSpace = (c: number) => c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;

/**
 * Splits a reply streamed as text into the model's reasoning and its answer, on the thought
 * markers of its template. The reply opens a thought when it starts with the open marker (after
 * whitespace); a reply that starts otherwise is all answer. A marker split across tokens (`</`,
 * `think`, `>`) is held back until it is whole, so it never leaks into either side. As templates
 * render them, whitespace right inside the markers and right after the thought is dropped
 * (`<think>\nreasoning\n</think>\n\nanswer` gives "reasoning" and "answer"); the trailing
 * whitespace of the reasoning is held until more reasoning shows it was inside.
 *
 * `reasoningTokens` counts the tokens pushed while in the thought, the ones that open and close it
 * included (a token held at the start counts once it is known to open the thought).
 */
export class ThoughtSplitter {
  private state: State;
  /** Text seen at the start, while it may still be the open marker. */
  private head = "";
  private headTokens = 0;
  private readonly close: TriggerMatcher<"close">;
  /** Reasoning whitespace not yet known to be inside the thought (it may precede the close marker). */
  private trailing = "";
  /** Nothing of the thought's text sent yet: its leading whitespace is dropped. */
  private thoughtFresh = true;
  /** Nothing of the answer after a thought sent yet: its leading whitespace is dropped. */
  private answerFresh = false;
  reasoningTokens = 0;

  constructor(private readonly markers: ThoughtMarkers) {
    this.state = markers.openAtStart ? "thought" : "start";
    this.close = new TriggerMatcher([{ text: markers.close, kind: "close" }]);
  }

  /** Where the reply is: at its start (not yet known whether it opens a thought), in the thought, in the answer. */
  get phase(): State {
    return this.state;
  }

  /** One token's text. */
  push(text: string, tokens = 1): SplitText {
    switch (this.state) {
      case "start":
        return this.atStart(text, tokens);
      case "thought": {
        this.reasoningTokens += tokens;
        return this.inThought(text);
      }
      case "answer":
        return this.inAnswer(text);
    }
  }

  /** The reply ended: what was held back. A thought never closed keeps its reasoning. */
  flush(): SplitText {
    switch (this.state) {
      case "start": {
        // Whitespace, or the start of a marker that never came: answer text after all.
        const answer = this.head;
        this.head = "";
        return answer ? { reasoning: "", answer } : NOTHING;
      }
      case "thought": {
        const reasoning = this.reasoningText(this.close.flush());
        this.trailing = "";
        return reasoning ? { reasoning, answer: "" } : NOTHING;
      }
      case "answer":
        return NOTHING;
    }
  }

  private atStart(text: string, tokens: number): SplitText {
    this.head += text;
    this.headTokens += tokens;
    let i = 0;
    while (i < this.head.length && isSpace(this.head.charCodeAt(i))) i++;
    const rest = this.head.slice(i);
    const open = this.markers.open;
    if (rest.length === 0 || (open.length > rest.length && open.startsWith(rest))) return NOTHING; // may still open a thought
    const head = this.head;
    this.head = "";
    if (open && rest.startsWith(open)) {
      this.state = "thought";
      this.reasoningTokens += this.headTokens;
      return this.inThought(rest.slice(open.length));
    }
    this.state = "answer";
    return { reasoning: "", answer: head };
  }

  private inThought(text: string): SplitText {
    const m = this.close.push(text);
    const reasoning = this.reasoningText(m.emit, m.hit !== undefined);
    if (!m.hit) return reasoning ? { reasoning, answer: "" } : NOTHING;
    this.state = "answer";
    this.answerFresh = true;
    const answer = this.inAnswer(m.after ?? "").answer;
    return { reasoning, answer };
  }

  /** Reasoning text to send from `text`: leading whitespace of the thought dropped, trailing held (dropped at the close). */
  private reasoningText(text: string, closing = false): string {
    let out = this.trailing + text;
    this.trailing = "";
    if (this.thoughtFresh) {
      let i = 0;
      while (i < out.length && isSpace(out.charCodeAt(i))) i++;
      out = out.slice(i);
      if (out) this.thoughtFresh = false;
    }
    let end = out.length;
    while (end > 0 && isSpace(out.charCodeAt(end - 1))) end--;
    if (!closing) this.trailing = out.slice(end);
    return out.slice(0, end);
  }

  private inAnswer(text: string): SplitText {
    if (!this.answerFresh) return text ? { reasoning: "", answer: text } : NOTHING;
    let i = 0;
    while (i < text.length && isSpace(text.charCodeAt(i))) i++;
    const answer = text.slice(i);
    if (answer) this.answerFresh = false;
    return answer ? { reasoning: "", answer } : NOTHING;
  }
}
