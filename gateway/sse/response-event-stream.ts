import { continuesDelta, FunctionCallArgumentsDelta, OutputTextDelta, RESPONSE_DELTA_EVENTS, RESPONSE_TERMINAL_EVENTS, type OpenAILogprob, type ResponseEvent, type ResponseEventSink } from "../../modules/openai/mod.js";
import { sseEvent, type SseOutput } from "./sse-writer.js";

export interface ResponseEventStreamOptions {
  /** Called when the client is too slow to keep up (the caller stops the generation). */
  onOverflow: () => void;
  /**
   * Events come numbered (a replay of stored events): their numbers are kept, and nothing is
   * merged, so a client can resume from any number it saw.
   */
  numbered?: boolean;
}

/**
 * Frames the events of nearly every token, `response.output_text.delta` and
 * `response.function_call_arguments.delta`, without JSON.stringify of the whole event: the fixed
 * fields of the open part are framed once, and only the delta text is escaped per event. The
 * bytes are those of `sseEvent(type, JSON.stringify({ ...event, sequence_number }))`
 * (test/unit/response-event-stream). Undefined for any other event.
 */
export class DeltaFrames {
  private text = { itemId: undefined as string | undefined, outputIndex: -1, contentIndex: -1, prefix: "" };
  private args = { itemId: undefined as string | undefined, outputIndex: -1, prefix: "" };

  frame(e: ResponseEvent, sequenceNumber: number): string | undefined {
    if (e instanceof OutputTextDelta) {
      // With logprobs (asked for now and then) the event takes the general path.
      if (e.logprobs.length > 0) return undefined;
      const t = this.text;
      if (e.item_id !== t.itemId || e.output_index !== t.outputIndex || e.content_index !== t.contentIndex) {
        t.itemId = e.item_id;
        t.outputIndex = e.output_index;
        t.contentIndex = e.content_index;
        t.prefix = `event: ${e.type}\ndata: {"type":${JSON.stringify(e.type)},"item_id":${JSON.stringify(e.item_id)},"output_index":${JSON.stringify(e.output_index)},"content_index":${JSON.stringify(e.content_index)},"delta":`;
      }
      return t.prefix + JSON.stringify(e.delta) + TEXT_DELTA_SUFFIX + sequenceNumber + "}\n\n";
    }
    if (e instanceof FunctionCallArgumentsDelta) {
      const a = this.args;
      if (e.item_id !== a.itemId || e.output_index !== a.outputIndex) {
        a.itemId = e.item_id;
        a.outputIndex = e.output_index;
        a.prefix = `event: ${e.type}\ndata: {"type":${JSON.stringify(e.type)},"item_id":${JSON.stringify(e.item_id)},"output_index":${JSON.stringify(e.output_index)},"delta":`;
      }
      return a.prefix + JSON.stringify(e.delta) + ARGUMENTS_DELTA_SUFFIX + sequenceNumber + "}\n\n";
    }
    return undefined;
  }
}

const TEXT_DELTA_SUFFIX = `,"logprobs":[],"sequence_number":`;
const ARGUMENTS_DELTA_SUFFIX = `,"sequence_number":`;

/** A queued delta with `next`'s text appended, as a new event (the queued one may be its emitter's object). */
function merged(last: ResponseEvent, next: ResponseEvent): ResponseEvent {
  const delta = (last.delta as string) + (next.delta as string);
  if (last instanceof OutputTextDelta) {
    const more = (next.logprobs as readonly OpenAILogprob[] | undefined) ?? [];
    return new OutputTextDelta(last.item_id, last.output_index, last.content_index, delta, more.length === 0 ? last.logprobs : [...last.logprobs, ...more]);
  }
  if (last instanceof FunctionCallArgumentsDelta) return new FunctionCallArgumentsDelta(last.item_id, last.output_index, delta);
  return { ...last, delta };
}

/**
 * Writes Responses events as SSE (`event: <type>\ndata: <json>\n\n`, each event in one write,
 * no [DONE]), numbering them from 0. While the client is behind, events wait in order and
 * consecutive deltas of the same item merge into one (text appended), so a slow reader gets
 * every byte in fewer, larger events, with sequence numbers still consecutive. The terminal
 * event flushes everything and ends the response.
 *
 * The per-token path (a text or arguments delta, nothing waiting, the client keeping up) writes
 * the delta's frame at once: no queue, no copy, no JSON.stringify of the event (DeltaFrames).
 */
export class ResponseEventStream implements ResponseEventSink {
  private sequence: number;
  private pending: ResponseEvent[] = [];
  private pendingBytes = 0;
  /** The writer was told this stream holds output (so it must be told when it no longer does). */
  private holding = false;
  private ended = false;
  private readonly deltas = new DeltaFrames();

  constructor(private readonly writer: SseOutput, private readonly options: ResponseEventStreamOptions) {
    this.sequence = 0;
    writer.onDrain(() => this.flush());
  }

  event(event: ResponseEvent): void {
    if (this.ended || this.writer.closed) return;
    if (this.pending.length === 0 && !this.options.numbered && this.writer.writable) {
      const frame = this.deltas.frame(event, this.sequence);
      if (frame !== undefined) {
        this.sequence++;
        this.writer.write(frame);
        return;
      }
    }
    const last = this.pending.at(-1);
    if (last && !this.options.numbered && continuesDelta(last, event)) {
      this.pending[this.pending.length - 1] = merged(last, event);
      this.pendingBytes += (event.delta as string).length;
    } else {
      // Queued as given: events are not changed once emitted (a merge makes a new one).
      this.pending.push(event);
      this.pendingBytes += RESPONSE_DELTA_EVENTS.has(event.type) ? 128 + (event.delta as string).length : 512;
    }
    if (RESPONSE_TERMINAL_EVENTS.has(event.type)) {
      this.ended = true;
      this.writer.end(this.frames());
      return;
    }
    if (this.writer.writable) return this.flush();
    this.holding = true;
    this.writer.hold(this.pendingBytes);
    if (this.writer.overLimit) {
      this.ended = true;
      this.pending = [];
      this.options.onOverflow();
      this.writer.drop();
    }
  }

  /** Ends the stream without a terminal event (the generation was stopped). */
  close(): void {
    if (this.ended) return;
    this.ended = true;
    this.writer.end(this.frames());
  }

  private flush(): void {
    if (this.ended || this.writer.closed || this.pending.length === 0) return;
    this.writer.write(this.frames());
  }

  private frames(): string {
    let out = "";
    for (const e of this.pending) {
      if (this.options.numbered) {
        out += sseEvent(e.type, JSON.stringify(e));
        continue;
      }
      out += this.deltas.frame(e, this.sequence) ?? sseEvent(e.type, JSON.stringify({ ...e, sequence_number: this.sequence }));
      this.sequence++;
    }
    this.pending = [];
    this.pendingBytes = 0;
    if (this.holding) {
      this.holding = false;
      this.writer.hold(0);
    }
    return out;
  }
}
