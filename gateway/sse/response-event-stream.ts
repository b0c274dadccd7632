import { continuesDelta, RESPONSE_DELTA_EVENTS, RESPONSE_TERMINAL_EVENTS, type ResponseEvent, type ResponseEventSink } from "../../modules/openai/mod.js";
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
 * Writes Responses events as SSE (`event: <type>\ndata: <json>\n\n`, each event in one write,
 * no [DONE]), numbering them from 0. While the client is behind, events wait in order and
 * consecutive deltas of the same item merge into one (text appended), so a slow reader gets
 * every byte in fewer, larger events, with sequence numbers still consecutive. The terminal
 * event flushes everything and ends the response.
 */
export class ResponseEventStream implements ResponseEventSink {
  private sequence: number;
  private pending: ResponseEvent[] = [];
  private pendingBytes = 0;
  private ended = false;

  constructor(private readonly writer: SseOutput, private readonly options: ResponseEventStreamOptions) {
    this.sequence = 0;
    writer.onDrain(() => this.flush());
  }

  event(event: ResponseEvent): void {
    if (this.ended || this.writer.closed) return;
    const last = this.pending.at(-1);
    if (last && !this.options.numbered && continuesDelta(last, event)) {
      last.delta = (last.delta as string) + (event.delta as string);
      this.pendingBytes += (event.delta as string).length;
    } else {
      this.pending.push({ ...event });
      this.pendingBytes += RESPONSE_DELTA_EVENTS.has(event.type) ? 128 + (event.delta as string).length : 512;
    }
    if (RESPONSE_TERMINAL_EVENTS.has(event.type)) {
      this.ended = true;
      this.writer.end(this.frames());
      return;
    }
    if (this.writer.writable) return this.flush();
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
    for (const e of this.pending)
      out += sseEvent(e.type, JSON.stringify(this.options.numbered ? e : { ...e, sequence_number: this.sequence++ }));
    this.pending = [];
    this.pendingBytes = 0;
    this.writer.hold(0);
    return out;
  }
}
