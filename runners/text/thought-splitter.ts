import { TriggerMatcher } from "./trigger-matcher.js";

/**
 * A model's thought segment, as its chat template marks it (Qwen3: `<think>` ... `</think>`;
 * gpt-oss: `<|channel|>analysis<|message|>` ... `<|end|>`).
 */
export interface ThoughtMarkers {
  /** Text that opens the segment at the start of the reply ("" when the template opens it itself). */
  open: string;
  /** Text that closes it. */
  close: string;
  /** The template opened the segment in the prompt: the reply starts inside it. */
  openAtStart: boolean;
  /**
   * Headers that open the answer, dropped from it, at the start of the reply or right after the
   * thought (gpt-oss: `<|channel|>final<|message|>`, `<|start|>assistant<|channel|>final<|message|>`).
   */
  answerOpen?: readonly string[];
  /** The header a reply writes between its thought and its answer, when the template has one (gpt-oss: `<|start|>assistant<|channel|>final<|message|>`). */
  answerAfterThought?: string;
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
 * whitespace of the reasoning is held until more reasoning shows it was inside. An answer header
 * (`answerOpen`) is dropped the same way; text that could still be one is held until it is known.
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
  /** Nothing of the answer after a thought (or an answer header) sent yet: its leading whitespace and header are dropped. */
  private answerFresh = false;
  /** The answer's start, while it may still be an answer header. */
  private answerHead = "";
  private readonly answerOpen: readonly string[];
  reasoningTokens = 0;

  constructor(private readonly markers: ThoughtMarkers) {
    this.state = markers.openAtStart ? "thought" : "start";
    this.close = new TriggerMatcher([{ text: markers.close, kind: "close" }]);
    this.answerOpen = (markers.answerOpen ?? []).filter((h) => h.length > 0);
  }

  /** Where the reply is: at its start (not yet known whether it opens a thought), in the thought, in the answer. */
  get phase(): State {
    return this.state;
  }

  /** The answer's text goes out as it comes: no thought, whitespace or header is left to drop before it. */
  get answerBegun(): boolean {
    return this.state === "answer" && !this.answerFresh;
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
      case "answer": {
        // The start of a header that never came: answer text after all.
        const answer = this.answerHead.trimStart();
        this.answerHead = "";
        return answer ? { reasoning: "", answer } : NOTHING;
      }
    }
  }

  private atStart(text: string, tokens: number): SplitText {
    this.head += text;
    this.headTokens += tokens;
    let i = 0;
    while (i < this.head.length && isSpace(this.head.charCodeAt(i))) i++;
    const rest = this.head.slice(i);
    const open = this.markers.open;
    if (rest.length === 0 || mayBecome(rest, open) || this.answerOpen.some((h) => mayBecome(rest, h))) return NOTHING; // may still open a thought or the answer
    const head = this.head;
    this.head = "";
    if (open && rest.startsWith(open)) {
      this.state = "thought";
      this.reasoningTokens += this.headTokens;
      return this.inThought(rest.slice(open.length));
    }
    this.state = "answer";
    const header = this.answerOpen.find((h) => rest.startsWith(h));
    if (header === undefined) return { reasoning: "", answer: head };
    this.answerFresh = true;
    return this.inAnswer(rest.slice(header.length));
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
    const head = this.answerHead + text;
    while (i < head.length && isSpace(head.charCodeAt(i))) i++;
    const rest = head.slice(i);
    if (this.answerOpen.some((h) => mayBecome(rest, h))) {
      this.answerHead = rest;
      return NOTHING;
    }
    this.answerHead = "";
    const header = this.answerOpen.find((h) => rest.startsWith(h));
    if (header !== undefined) return this.inAnswer(rest.slice(header.length));
    if (rest) this.answerFresh = false;
    return rest ? { reasoning: "", answer: rest } : NOTHING;
  }
}

/** Whether `text` is a proper beginning of `marker` (more text may complete it). */
const mayBecome = (text: string, marker: string) => marker.length > text.length && marker.startsWith(text);
