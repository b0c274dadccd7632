import type { Outbox } from "../lib/nats/outbox.js";
import {
  ErrorCode,
  RunnerEvent,
  type Error as ProtoError,
  type FinishReason,
  type TokenLogprob,
  type ToolCallDelta,
} from "../proto/gen/tributary/v1/inference.js";
import { varintSize, writeVarint } from "../lib/bytes.js";
import type { Logger } from "../lib/log.js";
import type { RequestObserver } from "./scheduler/scheduler.js";
import { SentEvents } from "./sent-events.js";

/** One choice's output held back until the choice ends (coalesced delivery). */
interface HeldChoice {
  text: string;
  tokens: number;
  toolCalls: ToolCallDelta[];
  /** Set once a delta brought logprobs. */
  logprobs: TokenLogprob[] | undefined;
  reasoning: string;
}

/**
 * Publishes one request's events, numbered from 1, on the reply subject its gateway named, or
 * packed with the gateway's other requests' events on its batch subject when the request names
 * one (GenerateRequest.batch_reply_subject). With `coalesce`, a choice's deltas are merged and
 * sent as one delta when the choice ends.
 */
export class ReplyPublisher implements RequestObserver {
  private seq = 0;
  /** What was sent, for a requester that lost some to ask for again (the runner keeps it a while after the final). */
  readonly sent: SentEvents;
  private readonly held = new Map<number, HeldChoice>();
  private readonly startedAt = performance.now();
  private firstDeltaAt = 0;
  private slotAt = 0;
  /** The request's constant fields (request id, runner id) encoded once: each event is this plus the rest. */
  private readonly head: Uint8Array;

  constructor(
    private readonly outbox: Outbox,
    private readonly subject: string,
    private readonly requestId: string,
    private readonly runnerId: string,
    private readonly log: Logger,
    private readonly onFinished: (completionTokens: number) => void = () => {},
    private readonly coalesce = false,
    /** The gateway's batch subject; empty: one message per event on `subject`. */
    private readonly batchSubject = "",
  ) {
    this.head = RunnerEvent.encode({ requestId, seq: 0, runnerId, event: undefined }).finish();
    this.sent = new SentEvents(this.head);
  }

  delta(choiceIndex: number, text: string, tokens: number, logprobs?: TokenLogprob[]): void {
    const first = this.firstDeltaAt === 0;
    if (first) this.firstDeltaAt = performance.now();
    // The first token is what a client waits for (time to first token): it goes out at once.
    // Coalesced, it still goes alone (with the step's other events, no urgent write), so that the
    // gateway times a non-streamed request's first token as it times a stream's; the rest is held.
    if (!this.coalesce || first) {
      // Logprobs are asked for now and then: those deltas take the generated encoder.
      if (logprobs) return this.send({ $case: "delta", value: { choiceIndex, text, toolCalls: [], tokens, logprobs: { tokens: logprobs } } }, first && !this.coalesce);
      const scratch = textDeltaScratch(text);
      return this.emit(scratch, first && !this.coalesce, encodeTextDeltaInto(scratch, ++this.seq, choiceIndex, text, tokens));
    }
    const held = this.hold(choiceIndex);
    held.text += text;
    held.tokens += tokens;
    if (logprobs) (held.logprobs ??= []).push(...logprobs);
  }

  reasoning(choiceIndex: number, text: string, tokens: number): void {
    const first = this.firstDeltaAt === 0;
    if (first) this.firstDeltaAt = performance.now();
    // A thinking model's first token is reasoning: coalesced, it goes alone too (see `delta`).
    if (!this.coalesce || first) return this.send({ $case: "delta", value: { choiceIndex, text: "", toolCalls: [], tokens, reasoning: text } }, first && !this.coalesce);
    const held = this.hold(choiceIndex);
    held.reasoning += text;
    held.tokens += tokens;
  }

  toolCall(choiceIndex: number, delta: ToolCallDelta): void {
    // A reply that starts with a call: its first fragment is the first token (see `delta`).
    const first = this.firstDeltaAt === 0;
    if (first) this.firstDeltaAt = performance.now();
    if (!this.coalesce || first) return this.send({ $case: "delta", value: { choiceIndex, text: "", toolCalls: [delta], tokens: 0 } });
    const calls = this.hold(choiceIndex).toolCalls;
    // A call's first fragment carries its id and name; later ones only add to the arguments.
    const call = delta.id ? undefined : calls.find((c) => c.index === delta.index);
    if (call) call.arguments += delta.arguments;
    else calls.push({ ...delta });
  }

  choiceEnd(choiceIndex: number, finishReason: FinishReason, completionTokens: number, reasoningTokens = 0): void {
    const held = this.held.get(choiceIndex);
    if (held) {
      this.held.delete(choiceIndex);
      this.send({
        $case: "delta",
        value: { choiceIndex, text: held.text, toolCalls: held.toolCalls, tokens: held.tokens, logprobs: held.logprobs && { tokens: held.logprobs }, reasoning: held.reasoning || undefined },
      });
    }
    this.send({ $case: "choiceEnd", value: { choiceIndex, finishReason, completionTokens, reasoningTokens: reasoningTokens || undefined } });
  }

  choiceReset(choiceIndex: number): void {
    this.held.delete(choiceIndex);
    this.send({ $case: "choiceReset", value: { choiceIndex } });
  }

  private hold(choiceIndex: number): HeldChoice {
    let held = this.held.get(choiceIndex);
    if (!held) this.held.set(choiceIndex, (held = { text: "", tokens: 0, toolCalls: [], logprobs: undefined, reasoning: "" }));
    return held;
  }

  slotStarted(): void {
    if (this.slotAt === 0) this.slotAt = performance.now();
  }

  final(promptTokens: number, completionTokens: number, error?: ProtoError, cachedPromptTokens = 0, reasoningTokens = 0): void {
    const queueWaitMs = Math.round((this.slotAt || performance.now()) - this.startedAt);
    this.send({ $case: "final", value: { usage: { promptTokens, completionTokens, cachedPromptTokens, reasoningTokens: reasoningTokens || undefined }, error, queueWaitMs } });
    this.sent.end();
    this.onFinished(completionTokens);
    if (this.log.enabled("debug"))
      this.log.debug("request finished", {
        requestId: this.requestId,
        promptTokens,
        cachedPromptTokens,
        completionTokens,
        error: error ? ErrorCode[error.code] : undefined,
        firstDeltaMs: this.firstDeltaAt ? Math.round(this.firstDeltaAt - this.startedAt) : undefined,
        ms: Math.round(performance.now() - this.startedAt),
      });
  }

  private send(event: RunnerEvent["event"], urgent = false): void {
    this.emit(RunnerEvent.encode({ requestId: "", seq: ++this.seq, runnerId: "", event }).finish(), urgent);
  }

  /** Sends one event given its fields other than the constant ones (protobuf fields may come in any order). */
  private emit(rest: Uint8Array, urgent: boolean, restLength = rest.length): void {
    this.sent.keep(rest, restLength);
    if (this.batchSubject) return this.outbox.publishPacked(this.batchSubject, this.head, rest, urgent, restLength);
    const bytes = new Uint8Array(this.head.length + restLength);
    bytes.set(this.head);
    bytes.set(restLength === rest.length ? rest : rest.subarray(0, restLength), this.head.length);
    this.outbox.publish(this.subject, bytes, urgent);
  }
}

/** Where text deltas are encoded before the outbox copies them (it grows for a long text). */
let scratch = Buffer.allocUnsafe(16 * 1024);

/** The scratch buffer, large enough for a text delta of `text` (at most 3 bytes a UTF-16 unit, plus 40 for the fields). */
function textDeltaScratch(text: string): Buffer {
  const worst = 40 + 3 * text.length;
  if (worst > scratch.length) scratch = Buffer.allocUnsafe(Math.max(worst, 2 * scratch.length));
  return scratch;
}

/**
 * A RunnerEvent's `seq` and text `delta` fields, encoded by hand: the one message of every token
 * (ts-proto's writer allocates a chunk list and a fork per nested message). Same bytes as
 * `RunnerEvent.encode({ requestId: "", seq, runnerId: "", event: { $case: "delta", value: { choiceIndex, text, toolCalls: [], tokens } } })`.
 */
export function encodeTextDelta(seq: number, choiceIndex: number, text: string, tokens: number): Uint8Array {
  const out = textDeltaScratch(text);
  return Uint8Array.prototype.slice.call(out, 0, encodeTextDeltaInto(out, seq, choiceIndex, text, tokens));
}

/** encodeTextDelta into `out` (large enough: textDeltaScratch); returns the length written. */
function encodeTextDeltaInto(out: Buffer, seq: number, choiceIndex: number, text: string, tokens: number): number {
  // Tokens are short and mostly ASCII: the text's bytes are its characters, copied in a loop
  // without a call into the runtime; a character past ASCII starts over with the general encoder.
  const ascii = encodeFields(out, seq, choiceIndex, text, text.length, tokens, true);
  return ascii >= 0 ? ascii : encodeFields(out, seq, choiceIndex, text, Buffer.byteLength(text, "utf8"), tokens, false);
}

/** Writes the fields with `textBytes` as the text's length; -1 when `asciiOnly` and the text is not. */
function encodeFields(out: Buffer, seq: number, choiceIndex: number, text: string, textBytes: number, tokens: number, asciiOnly: boolean): number {
  // TokenDelta: choice_index (1, varint), text (2, bytes), tokens (4, varint); defaults omitted.
  const deltaLength =
    (choiceIndex !== 0 ? 1 + varintSize(choiceIndex) : 0) + (textBytes !== 0 ? 1 + varintSize(textBytes) + textBytes : 0) + (tokens !== 0 ? 1 + varintSize(tokens) : 0);
  let at = 0;
  if (seq !== 0) {
    out[at++] = 0x10; // seq: field 2, varint
    at = writeVarint(out, at, seq);
  }
  out[at++] = 0x22; // delta: field 4, length-delimited
  at = writeVarint(out, at, deltaLength);
  if (choiceIndex !== 0) {
    out[at++] = 0x08;
    at = writeVarint(out, at, choiceIndex);
  }
  if (textBytes !== 0) {
    out[at++] = 0x12;
    at = writeVarint(out, at, textBytes);
    if (asciiOnly) {
      for (let i = 0; i < text.length; i++) {
        const c = text.charCodeAt(i);
        if (c >= 0x80) return -1;
        out[at++] = c;
      }
    } else at += out.write(text, at, "utf8");
  }
  if (tokens !== 0) {
    out[at++] = 0x20;
    at = writeVarint(out, at, tokens);
  }
  return at;
}
