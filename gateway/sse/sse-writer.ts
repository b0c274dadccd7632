import type { HttpExchange } from "../http/exchange.js";

/**
 * Where an event stream writes its frames: what ChatChunkStream and ResponseEventStream need of
 * SseWriter (unit tests record the bytes through it).
 */
export interface SseOutput {
  /** False while the client is behind (the producer holds and coalesces), after the end, or once the client left. */
  readonly writable: boolean;
  /** True after the end or once the client left: nothing more can be written. */
  readonly closed: boolean;
  /** `handler` runs when the client caught up. */
  onDrain(handler: () => void): void;
  /** Writes framed events; returns `writable` after it. */
  write(frames: string): boolean;
  /** Writes the last frames and ends the response. */
  end(finalFrames?: string): void;
}

/**
 * Writes Server-Sent Events through uWS with backpressure: once a write reports that the socket
 * is behind, `writable` turns false and the producer is expected to hold (and coalesce) its
 * output until `onDrain` fires. Nothing is written after the client left.
 */
export class SseWriter implements SseOutput {
  private blocked = false;
  private ended = false;
  private drainHandler: (() => void) | undefined;

  constructor(private readonly ex: HttpExchange) {}

  /** Sends the 200 and SSE headers. Call inside the route before the first event. */
  open(): void {
    this.ex.res.cork(() => {
      this.ex.beginStream("text/event-stream; charset=utf-8");
      // uWS only sends headers with the first body write: flush them now, so clients see the 200 at once.
      this.ex.res.write(": ok\n\n");
    });
    this.ex.res.onWritable(() => {
      this.blocked = false;
      this.drainHandler?.();
      return !this.blocked;
    });
  }

  get writable(): boolean {
    return !this.blocked && !this.ended && !this.ex.aborted;
  }

  get closed(): boolean {
    return this.ended || this.ex.aborted;
  }

  onDrain(handler: () => void): void {
    this.drainHandler = handler;
  }

  /** Writes pre-framed event text ("data: ...\n\n", possibly several). Returns `writable` after it. */
  write(frames: string): boolean {
    if (this.ended || this.ex.aborted) return false;
    this.ex.res.cork(() => {
      if (!this.ex.res.write(frames)) this.blocked = true;
    });
    return !this.blocked;
  }

  end(finalFrames = ""): void {
    if (this.ended || this.ex.aborted) return;
    this.ended = true;
    this.ex.endStream(finalFrames);
  }
}

export const sseData = (json: string): string => `data: ${json}\n\n`;
export const sseEvent = (event: string, json: string): string => `event: ${event}\ndata: ${json}\n\n`;
export const SSE_DONE = "data: [DONE]\n\n";
