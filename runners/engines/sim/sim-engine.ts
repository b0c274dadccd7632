import { ErrorCode, FinishReason, Truncation, type ChatMessage, type GenerateRequest } from "../../../proto/gen/tributary/v1/inference.js";
import { MinHeap } from "../../../lib/collections/min-heap.js";
import type { ModelSpec } from "../../../modules/catalog/mod.js";
import { TriggerMatcher } from "../../text/trigger-matcher.js";
import { EngineRequestError, type ChoiceOutcome, type ChoiceSink, type Engine, type PreparedRequest } from "../engine.js";
import { dropOldestTurns } from "../context-fit.js";
import { fitsContext, resolveOutputBudget } from "../output-budget.js";

// A token simulator for load tests of everything around the engine: it emits words at the
// catalog's rate after the configured first-token latency, with no model behind it.
// It is never the default engine and never used to test model behaviour.

const WORDS = ("the river runs past old mills and quiet towns where children play by the water " +
  "while boats drift slowly toward the sea carrying stories from one bank to another").split(" ");
/** Each word as it follows another (a leading space): no concatenation per token. */
const SPACED_WORDS = WORDS.map((w) => ` ${w}`);
const DEFAULT_LENGTH = 32;

interface Ticking {
  due: number;
  /** Set on cancel: the entry is dropped when it surfaces (within one token interval). */
  cancelled: boolean;
  fire(): void;
}

export class SimEngine implements Engine {
  readonly kind = "sim" as const;
  readonly slots: number;
  /**
   * Tokens due, by the millisecond they are due in; and those milliseconds, ordered. A token costs
   * an append to its bucket, not two operations on a heap of every stream (the sim runs thousands).
   */
  private readonly buckets = new Map<number, Ticking[]>();
  private readonly dueMs = new MinHeap<number>((ms) => ms);
  private timer: NodeJS.Timeout | undefined;
  private armedFor = Infinity;
  private readonly intervalMs: number;

  constructor(private readonly spec: ModelSpec) {
    this.slots = spec.slots;
    this.intervalMs = 1000 / spec.sim.tokensPerSecond;
  }

  async load(): Promise<void> {}

  async prepare(request: GenerateRequest): Promise<PreparedRequest> {
    // Roughly four characters a token, like common BPE vocabularies on English text.
    const count = (messages: readonly ChatMessage[]) => Math.max(1, Math.ceil(messages.map((m) => m.content).join("\n").length / 4));
    let promptTokens = request.messages.length > 0 ? count(request.messages) : Math.max(1, Math.ceil(request.prompt.length / 4));
    let droppedMessages = 0;
    const requested = request.sampling?.maxTokens ?? 0;
    if (request.messages.length > 0 && request.truncation === Truncation.TRUNCATION_AUTO && !fitsContext(this.spec, promptTokens, requested)) {
      const fitted = dropOldestTurns(request.messages, (messages) => fitsContext(this.spec, count(messages), requested));
      if (fitted) {
        promptTokens = count(fitted.messages);
        droppedMessages = fitted.dropped;
      }
    }
    // It has no model, so no probabilities to report: refused rather than made up.
    if (request.sampling?.logprobs)
      throw new EngineRequestError(ErrorCode.ERROR_CODE_INVALID_REQUEST, "logprobs are not available from a model served by the sim engine (it has no model)", "logprobs");
    const choices = Math.max(1, request.sampling?.n ?? 1);
    if (choices > this.slots)
      throw new EngineRequestError(ErrorCode.ERROR_CODE_INVALID_REQUEST, `n (${choices}) exceeds this model's ${this.slots} slots`, "n");
    const maxTokens = resolveOutputBudget(this.spec, promptTokens, request.sampling?.maxTokens ?? 0);
    // The sim engine has no chat template: its "rendered" prompt is the messages as role-tagged lines.
    const renderedPrompt = request.wantRenderedPrompt
      ? (request.messages.length > 0 ? request.messages.map((m) => `${m.role}: ${m.content}`).join("\n") : request.prompt)
      : undefined;
    return { request, promptTokens, maxTokens, choices, droppedMessages, renderedPrompt };
  }

  runChoice(prepared: PreparedRequest, choiceIndex: number, _slot: number, sink: ChoiceSink, signal: AbortSignal): Promise<ChoiceOutcome> {
    const explicitMax = (prepared.request.sampling?.maxTokens ?? 0) > 0;
    const target = explicitMax ? prepared.maxTokens : Math.min(DEFAULT_LENGTH, prepared.maxTokens);
    const stopTexts = prepared.request.sampling?.stop ?? [];
    // Without stop sequences every piece goes out as it is (no matcher, nothing allocated per token).
    const stops = stopTexts.length > 0 ? new TriggerMatcher(stopTexts.map((text) => ({ text, kind: "stop" as const }))) : undefined;
    let word = (Number(prepared.request.sampling?.seed ?? 0) + choiceIndex * 7) % WORDS.length;
    let produced = 0;
    return new Promise<ChoiceOutcome>((resolve) => {
      const done = (finishReason: FinishReason) => {
        signal.removeEventListener("abort", onAbort);
        resolve({ finishReason, completionTokens: produced });
      };
      // `cancelled` stands for the signal (set by its abort event), so a token costs no signal check.
      const onAbort = () => {
        ticking.cancelled = true;
        done(FinishReason.FINISH_REASON_CANCELLED);
      };
      const ticking: Ticking = {
        due: performance.now() + this.spec.sim.firstTokenLatencyMs,
        cancelled: false,
        fire: () => {
          produced++;
          const piece = produced === 1 ? WORDS[word]! : SPACED_WORDS[word]!;
          word = word + 1 === WORDS.length ? 0 : word + 1;
          if (!stops) sink.text(piece, 1);
          else {
            const m = stops.push(piece);
            if (m.emit) sink.text(m.emit, 1);
            if (m.hit) return done(FinishReason.FINISH_REASON_STOP);
          }
          if (produced >= target) {
            const rest = stops?.flush();
            if (rest) sink.text(rest, 0);
            return done(explicitMax || produced >= prepared.maxTokens ? FinishReason.FINISH_REASON_LENGTH : FinishReason.FINISH_REASON_STOP);
          }
          ticking.due += this.intervalMs;
          this.schedule(ticking);
        },
      };
      // Aborted before it started (the abort event has been and gone): it ends at once.
      if (signal.aborted) return done(FinishReason.FINISH_REASON_CANCELLED);
      signal.addEventListener("abort", onAbort, { once: true });
      this.schedule(ticking);
    });
  }

  async dispose(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
  }

  private schedule(t: Ticking): void {
    const slot = Math.floor(t.due);
    const bucket = this.buckets.get(slot);
    if (bucket) bucket.push(t);
    else {
      this.buckets.set(slot, [t]);
      this.dueMs.push(slot);
    }
    if (t.due < this.armedFor) this.arm(t.due);
  }

  private arm(due: number): void {
    if (this.timer) clearTimeout(this.timer);
    this.armedFor = due;
    this.timer = setTimeout(() => this.tick(), Math.max(0, due - performance.now()));
  }

  private tick(): void {
    this.timer = undefined;
    this.armedFor = Infinity;
    const now = performance.now();
    // Timers fire at whole milliseconds at best: the tokens of every millisecond begun go now,
    // so a token is at most about a millisecond early or late, never a whole tick late.
    for (let slot = this.dueMs.peek(); slot !== undefined && slot <= now; slot = this.dueMs.peek()) {
      this.dueMs.pop();
      const bucket = this.buckets.get(slot)!;
      this.buckets.delete(slot);
      for (const t of bucket) if (!t.cancelled) t.fire();
    }
    const next = this.dueMs.peek();
    if (next !== undefined) this.arm(next);
  }
}
