import { LlamaGrammarEvaluationState, type LlamaGrammar, type LlamaModel, type SequenceEvaluateOptions, type Token } from "node-llama-cpp";
import { FinishReason, type TokenLogprob } from "../../../proto/gen/tributary/v1/inference.js";
import { newId } from "../../../lib/ids.js";
import { JsonCompletionTracker } from "../../text/json-completion.js";
import { TriggerMatcher } from "../../text/trigger-matcher.js";
import { TokenOffsets } from "../../text/token-offsets.js";
import { ThoughtSplitter } from "../../text/thought-splitter.js";
import type { ChoiceOutcome, ChoiceSink } from "../engine.js";
import type { CallSyntax, ThoughtSegment } from "./chat-prompt.js";
import { IncrementalDetokenizer } from "./incremental-detokenizer.js";
import { ContextFullError, type SlotSequence } from "./slot-sequence.js";
import type { TokenBytes } from "./token-bytes.js";
import { tokenLogprob } from "./logprob-reads.js";

/** Everything needed to decode the choices of one request, computed once at admission. */
export interface DecodePlan {
  prompt: Token[];
  maxTokens: number;
  /** Text after which generation stops (user stop strings, template and grammar triggers). */
  stopTexts: string[];
  /** Special tokens after which generation stops (end-of-turn markers of the template). */
  stopTokens: ReadonlySet<Token>;
  sampling: SequenceEvaluateOptions;
  /** Base seed; choice i samples with seed + i. */
  seed: number;
  /** Whether a cached prompt prefix may be reused (not for seeded requests: reproducibility). */
  reuseCache: boolean;
  penalties: { frequency: number; presence: number } | undefined;
  /**
   * Constrains the answer (response_format json_object / json_schema): the whole reply, or, when
   * the reply starts inside the thought, what follows the thought (GrammarCache.afterThought).
   */
  responseGrammar: LlamaGrammar | undefined;
  tools: ToolPlan | undefined;
  /** Each answer token's log probability, with this many alternatives (0-20); undefined: none. */
  logprobs: { top: number } | undefined;
  /** The template's thought segment: reasoning is split from the answer on it; undefined: none. */
  thought: ThoughtSegment | undefined;
}

export interface ToolPlan {
  mode: "auto" | "required" | "function";
  /** Set in "function" mode. */
  functionName: string | undefined;
  /** Grammar of each tool's arguments. */
  argumentGrammars: ReadonlyMap<string, LlamaGrammar>;
  /** Grammar that picks one of the tool names. */
  nameGrammar: LlamaGrammar;
  syntax: CallSyntax;
  parallel: boolean;
  /** Calls allowed per choice (max_tool_calls, capped by MAX_CALLS_PER_CHOICE). */
  maxCalls: number;
}

export const MAX_CALLS_PER_CHOICE = 16;
const PENALTY_WINDOW = 256;
/** Tokens the model may spend after a call to show whether another call follows. */
const CONTINUATION_LOOKAHEAD = 8;

type Kind = "stop" | "call" | "result";

class Finished extends Error {
  constructor(readonly reason: FinishReason) {
    super("finished");
  }
}

/**
 * Decodes one choice in one slot. Plain replies stream as text; tool calls are produced in two
 * grammar-constrained phases (the function name, then arguments valid for its schema) in the
 * template's own call syntax, and stream as tool-call deltas.
 */
export class ChoiceDecoder {
  private produced = 0;
  private readonly generated: Token[] = [];
  private readonly options: SequenceEvaluateOptions;
  private cachedPromptTokens = 0;
  private callIndex = 0;
  private unreportedTokens = 0;
  /** The answer tokens' logprobs not sent yet, by where their text starts in the answer (plan.logprobs). */
  private readonly pendingLogprobs: TokenOffsets<TokenLogprob> | undefined;
  /** Characters of answer text sent so far. */
  private textSent = 0;
  private readonly bytesOf: (token: number) => Uint8Array;
  /** The text phase's reasoning splitter (its count of reasoning tokens goes in the outcome). */
  private thought: ThoughtSplitter | undefined;

  constructor(
    private readonly model: LlamaModel,
    private readonly slot: SlotSequence,
    private readonly plan: DecodePlan,
    choiceIndex: number,
    private readonly sink: ChoiceSink,
    private readonly signal: AbortSignal,
    private readonly tokenBytes: TokenBytes,
  ) {
    this.pendingLogprobs = plan.logprobs ? new TokenOffsets<TokenLogprob>() : undefined;
    this.bytesOf = (token) => tokenBytes.of(token);
    const penalties = plan.penalties;
    this.options = {
      ...plan.sampling,
      seed: (plan.seed + choiceIndex) >>> 0,
      repeatPenalty: penalties
        ? {
            punishTokens: () => this.generated.slice(-PENALTY_WINDOW),
            maxPunishTokens: PENALTY_WINDOW,
            penalty: 1,
            frequencyPenalty: penalties.frequency,
            presencePenalty: penalties.presence,
          }
        : undefined,
    };
  }

  async run(): Promise<ChoiceOutcome> {
    try {
      const input = await this.slot.reset(this.plan.prompt, this.plan.reuseCache);
      this.cachedPromptTokens = this.plan.prompt.length - input.length;
      const tools = this.plan.tools;
      if (tools && tools.mode !== "auto") {
        await this.callLoop(tools, this.tokenize(tools.syntax.prefix), tools.functionName);
        return this.outcome(FinishReason.FINISH_REASON_TOOL_CALLS);
      }
      return this.outcome(await this.textPhase(input, tools));
    } catch (err) {
      if (err instanceof Finished) return this.outcome(err.reason);
      if (err instanceof ContextFullError) return this.outcome(FinishReason.FINISH_REASON_LENGTH);
      throw err;
    }
  }

  private outcome(finishReason: FinishReason): ChoiceOutcome {
    return {
      finishReason: this.signal.aborted ? FinishReason.FINISH_REASON_CANCELLED : finishReason,
      completionTokens: this.produced,
      cachedPromptTokens: this.cachedPromptTokens,
      reasoningTokens: this.thought?.reasoningTokens ?? 0,
    };
  }

  /** Counts a generated token and enforces the budget and cancellation. */
  private count(token: Token): void {
    if (this.signal.aborted) throw new Finished(FinishReason.FINISH_REASON_CANCELLED);
    this.produced++;
    this.unreportedTokens++;
    this.generated.push(token);
  }

  private get budgetLeft(): boolean {
    return this.produced < this.plan.maxTokens;
  }

  /** Sends answer text, with the logprobs of the tokens it starts (all that are left when `last`). */
  private emitText(text: string, last = false): void {
    const pending = this.pendingLogprobs;
    this.textSent += text.length;
    const logprobs = pending ? (last ? pending.releaseAll() : pending.release(this.textSent)) : undefined;
    if (!text && !logprobs?.length) return;
    this.sink.text(text, this.unreportedTokens, logprobs);
    this.unreportedTokens = 0;
  }


  private tokenize(text: import("node-llama-cpp").LlamaText | string): Token[] {
    return typeof text === "string" ? this.model.tokenize(text, false) : text.tokenize(this.model.tokenizer);
  }

  /**
   * The reply as text: reasoning (the template's thought segment, when it has one) and answer
   * apart, stop sequences in both, a tool call's prefix in the answer switching to callLoop. A
   * response grammar constrains the answer: from the first token, or, when the reply starts inside
   * the thought (the template or the engine opened it in the prompt), from the token after the
   * thought closes, so that the model reasons freely first.
   */
  private async textPhase(input: Token[], tools: ToolPlan | undefined): Promise<FinishReason> {
    const stops: Array<{ text: string; kind: Kind }> = this.plan.stopTexts.map((text) => ({ text, kind: "stop" }));
    const triggers = [...stops];
    if (tools) for (const text of tools.syntax.prefixes) triggers.push({ text, kind: "call" });
    const matcher = new TriggerMatcher<Kind>(triggers);
    const thought = this.plan.thought ? new ThoughtSplitter(this.plan.thought.markers) : undefined;
    const reasoningStops = thought ? new TriggerMatcher<Kind>(stops) : undefined;
    const detok = new IncrementalDetokenizer(this.model, this.plan.prompt, this.plan.thought?.shownTokens);
    const grammar = this.plan.responseGrammar;
    const json = grammar ? new JsonCompletionTracker() : undefined;
    const promptLength = this.plan.prompt.length;
    let content = "";
    const logprobs = this.plan.logprobs;
    /** Characters of answer text given to the matcher so far. */
    let textIn = 0;
    /** Logprobs of tokens at the start of the reply, while it is not known whether they open a thought. */
    let startLogprobs: TokenLogprob[] = [];
    /** The reply as generated before its answer (the thought segment, and the whitespace or header after it). */
    let beforeAnswer = "";
    let answerStarted = thought === undefined;
    this.thought = thought;

    /** The grammar waits for the thought to close (the reply starts inside it). */
    let grammarWaits = grammar !== undefined && thought?.phase === "thought";
    let options = grammar && !grammarWaits ? this.constrainedBy(grammar) : this.options;
    let feed = input;
    for (;;) {
      /** The thought closed under a waiting grammar: the answer is generated anew, under it. */
      let answerUnderGrammar = false;
      for await (const token of this.slot.generate(feed, options, logprobs !== undefined)) {
        this.count(token);
        if (this.plan.stopTokens.has(token)) break;
        const raw = detok.push(token);
        const logprob = logprobs ? tokenLogprob(token, this.slot.lastLogprobs!, logprobs.top, this.bytesOf) : undefined;
        let text = raw;
        if (thought) {
          const phase = thought.phase;
          const parts = thought.push(raw);
          if (!answerStarted) {
            // The first answer text ends the reply so far (the splitter holds nothing after it).
            beforeAnswer += raw;
            answerStarted = parts.answer.length > 0;
            if (answerStarted) beforeAnswer = beforeAnswer.slice(0, Math.max(0, beforeAnswer.length - parts.answer.length));
          }
          if (parts.reasoning) {
            const r = reasoningStops!.push(parts.reasoning);
            this.emitReasoning(r.emit);
            if (r.hit) return FinishReason.FINISH_REASON_STOP;
          }
          if (grammarWaits && thought.phase === "answer") {
            // The context as it stands ends with the close marker (and maybe whitespace), the
            // grammar's start. A token that carried answer text past the marker was sampled
            // without the grammar: the context is rewritten to end at the marker instead. A
            // template whose answer follows a header of its own (gpt-oss's next message, in the
            // final channel) gets it written here: the grammar holds for the answer after it.
            if (parts.answer) {
              await this.slot.truncate(promptLength);
              feed = this.model.tokenize(beforeAnswer.trimEnd(), true);
            } else feed = [];
            const header = this.plan.thought!.markers.answerAfterThought;
            if (header) feed = [...feed, ...this.model.tokenize(header, true)];
            answerUnderGrammar = true;
            break;
          }
          text = parts.answer;
          // Only answer tokens have logprobs (reasoning tokens have none, as with OpenAI's models),
          // nor do the ones of an answer header or of whitespace dropped before the answer.
          if (logprob && phase === "start") {
            if (thought.phase === "start") startLogprobs.push(logprob);
            else if (thought.answerBegun) for (const l of [...startLogprobs, logprob]) this.pendingLogprobs!.add(textIn, l);
            if (thought.phase !== "start") startLogprobs = [];
          } else if (logprob && phase === "answer" && thought.answerBegun) this.pendingLogprobs!.add(textIn, logprob);
        } else if (logprob) this.pendingLogprobs!.add(textIn, logprob);
        if (json) {
          // A value under the grammar may follow whitespace (after a thought): the answer starts at the value.
          if (textIn === 0) text = text.trimStart();
          const end = json.push(text);
          if (end >= 0) text = text.slice(0, end);
        }
        textIn += text.length;
        const m = matcher.push(text);
        this.emitText(m.emit);
        content += m.emit;
        if (m.hit?.kind === "stop") return FinishReason.FINISH_REASON_STOP;
        if (m.hit?.kind === "call" && tools) {
          // Rewrite the context as the reasoning, the content and the call prefix in its written form
          // (the thought as generated: its markers are special tokens), then decode the call under grammars.
          await this.slot.truncate(promptLength);
          const prefix = this.tokenize(tools.syntax.writtenFor.get(m.hit.text) ?? tools.syntax.prefix);
          const before = beforeAnswer ? this.model.tokenize(beforeAnswer, true) : [];
          await this.callLoop(tools, [...before, ...(content ? this.tokenize(content) : []), ...prefix], undefined);
          return FinishReason.FINISH_REASON_TOOL_CALLS;
        }
        if (json?.complete) return FinishReason.FINISH_REASON_STOP;
        if (!this.budgetLeft) {
          this.endText("", matcher, reasoningStops, startLogprobs, textIn);
          return FinishReason.FINISH_REASON_LENGTH;
        }
      }
      if (!answerUnderGrammar) break;
      grammarWaits = false;
      options = this.constrainedBy(grammar!);
      if (!this.budgetLeft) {
        this.endText("", matcher, reasoningStops, startLogprobs, textIn);
        return FinishReason.FINISH_REASON_LENGTH;
      }
    }
    this.endText(detok.flush(), matcher, reasoningStops, startLogprobs, textIn);
    return FinishReason.FINISH_REASON_STOP;
  }

  /** Sampling options that keep to `grammar` (a fresh evaluation state: it starts at the grammar's root). */
  private constrainedBy(grammar: LlamaGrammar): SequenceEvaluateOptions {
    return { ...this.options, grammarEvaluationState: new LlamaGrammarEvaluationState({ model: this.model, grammar }) };
  }

  /**
   * The reply ended (on its own or out of budget): `rest` (text the detokenizer held) and what the
   * splitter and the matchers held back go out; a reply that never got past its start (whitespace,
   * a marker's beginning) is answer after all, with its tokens' logprobs.
   */
  private endText(rest: string, matcher: TriggerMatcher<Kind>, reasoningStops: TriggerMatcher<Kind> | undefined, startLogprobs: TokenLogprob[], textIn: number): void {
    const thought = this.thought;
    let answer = rest;
    if (thought) {
      const last = thought.push(rest, 0);
      const end = thought.flush();
      const reasoning = last.reasoning + end.reasoning;
      this.emitReasoning(reasoningStops!.push(reasoning).emit + reasoningStops!.flush());
      answer = last.answer + end.answer;
      if (end.answer) for (const l of startLogprobs) this.pendingLogprobs?.add(textIn, l);
    }
    this.emitText(matcher.push(answer).emit + matcher.flush(), true);
  }

  /** Sends reasoning text (the tokens counted since the last send go with it). */
  private emitReasoning(text: string): void {
    if (!text) return;
    this.sink.reasoning(text, this.unreportedTokens);
    this.unreportedTokens = 0;
  }

  /**
   * Decodes calls; `input` ends with the call prefix. After each call, when parallel calls are
   * allowed, the model gets a short look at whether it starts another one.
   */
  private async callLoop(tools: ToolPlan, input: Token[], forcedName: string | undefined): Promise<void> {
    for (;;) {
      let name = forcedName;
      if (name === undefined) {
        name = await this.generateName(tools, input);
        input = [];
      } else {
        input = [...input, ...this.tokenize(name)];
      }
      input = [...input, ...this.tokenize(tools.syntax.paramsPrefix)];
      await this.generateArguments(tools, name, input);
      this.callIndex++;
      if (!tools.parallel || this.callIndex >= tools.maxCalls || !this.budgetLeft) return;
      const next = await this.lookForAnotherCall(tools);
      if (!next) return;
      input = next;
      forcedName = undefined;
    }
  }

  private async generateName(tools: ToolPlan, input: Token[]): Promise<string> {
    const detok = new IncrementalDetokenizer(this.model, input);
    let name = "";
    for await (const token of this.slot.generate(input, this.constrainedBy(tools.nameGrammar))) {
      this.count(token);
      name += detok.push(token);
      if (!this.budgetLeft) throw new Finished(FinishReason.FINISH_REASON_LENGTH);
    }
    name = (name + detok.flush()).trim();
    if (!tools.argumentGrammars.has(name)) throw new Error(`the name grammar produced an unknown function "${name}"`);
    return name;
  }

  private async generateArguments(tools: ToolPlan, name: string, input: Token[]): Promise<void> {
    const grammar = tools.argumentGrammars.get(name)!;
    const index = this.callIndex;
    this.sink.toolCall({ index, id: newId("call_"), name, arguments: "" });
    const detok = new IncrementalDetokenizer(this.model, input);
    const json = new JsonCompletionTracker();
    for await (const token of this.slot.generate(input, this.constrainedBy(grammar))) {
      this.count(token);
      let text = detok.push(token);
      const end = json.push(text);
      if (end >= 0) text = text.slice(0, end);
      if (text) this.sink.toolCall({ index, id: "", name: "", arguments: text });
      if (json.complete) return;
      if (!this.budgetLeft) throw new Finished(FinishReason.FINISH_REASON_LENGTH);
    }
  }

  /** Returns the input that starts the next call, or undefined when the model is done calling. */
  private async lookForAnotherCall(tools: ToolPlan): Promise<Token[] | undefined> {
    const before = this.slot.length;
    const suffix = this.tokenize(tools.syntax.suffix);
    const triggers: Array<{ text: string; kind: Kind }> = tools.syntax.prefixes.map((text) => ({ text, kind: "call" }));
    if (tools.syntax.resultPrefix) triggers.push({ text: tools.syntax.resultPrefix, kind: "result" });
    const matcher = new TriggerMatcher<Kind>(triggers);
    const detok = new IncrementalDetokenizer(this.model, suffix, this.plan.thought?.shownTokens);
    let seen = 0;
    for await (const token of this.slot.generate(suffix, this.options)) {
      this.count(token);
      if (this.plan.stopTokens.has(token)) return undefined;
      const m = matcher.push(detok.push(token));
      if (m.hit?.kind === "call") {
        await this.slot.truncate(before);
        return [...suffix, ...this.tokenize(tools.syntax.writtenFor.get(m.hit.text) ?? tools.syntax.prefix)];
      }
      if (m.hit || m.emit.trim().length > 0 || ++seen >= CONTINUATION_LOOKAHEAD || !this.budgetLeft) return undefined;
    }
    return undefined;
  }
}
