import type { HttpExchange } from "../http/exchange.js";
import type { PendingBudget } from "./pending-budget.js";

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
  /** Writes framed events (text, or its UTF-8 bytes: copied before the call returns); returns `writable` after it. */
  write(frames: string | Uint8Array): boolean;
  /** Writes the last frames and ends the response. */
  end(finalFrames?: string): void;
  /** The producer holds `bytes` of unwritten output (coalesced while the client is behind). */
  hold(bytes: number): void;
  /** This stream holds more than it may, or the slow streams together do: it must be dropped. */
  readonly overLimit: boolean;
  /** Ends the stream for a client too slow to keep up, without its held output. */
  drop(): void;
}

/**
 * Writes Server-Sent Events through uWS with backpressure: once a write reports that the socket
 * is behind, `writable` turns false and the producer is expected to hold (and coalesce) its
 * output until `onDrain` fires. Nothing is written after the client left.
 *
 * What a slow client costs is accounted in the gateway's PendingBudget: what the producer holds
 * (it reports it with `hold`) plus what uWS may still buffer (the bytes written since the last
 * write that went out whole). `overLimit` says when the stream must be dropped.
 */
export class SseWriter implements SseOutput {
  private blocked = false;
  private ended = false;
  private drainHandler: (() => void) | undefined;
  private held = 0;
  private unsent = 0;
  private accounted = 0;

  constructor(private readonly ex: HttpExchange, private readonly budget: PendingBudget) {}

  /** Sends the 200 and SSE headers. Call inside the route before the first event. */
  open(): void {
    // uWS only sends headers with the first body write: write a comment now, so clients see the 200 at once.
    if (!this.ex.beginStream("text/event-stream; charset=utf-8", ": ok\n\n")) this.blocked = true;
    this.ex.onWritable(() => {
      this.blocked = false;
      this.drainHandler?.();
      return !this.blocked;
    });
    this.ex.onAbort(() => this.release());
  }

  get writable(): boolean {
    return !this.blocked && !this.ended && this.ex.live;
  }

  get closed(): boolean {
    return this.ended || !this.ex.live;
  }

  onDrain(handler: () => void): void {
    this.drainHandler = handler;
  }

  /** The producer holds `bytes` of unwritten output for this stream. */
  hold(bytes: number): void {
    this.held = bytes;
    this.account();
  }

  /** This stream holds more than it may, or the gateway's slow streams together do. */
  get overLimit(): boolean {
    return this.budget.exceeded(this.held + this.unsent);
  }

  /** Writes pre-framed event text ("data: ...\n\n", possibly several). Returns `writable` after it. */
  write(frames: string | Uint8Array): boolean {
    if (this.closed) return false;
    if (this.ex.write(frames)) this.unsent = 0;
    else {
      this.blocked = true;
      this.unsent += frames.length;
    }
    this.account();
    return !this.blocked;
  }

  end(finalFrames = ""): void {
    if (this.closed) return this.release();
    this.ended = true;
    this.ex.endStream(finalFrames);
    this.release();
  }

  /** Ends the stream for a client too slow to keep up: the connection is dropped, freeing what uWS buffered. */
  drop(): void {
    if (this.closed) return this.release();
    this.budget.dropped(this.held + this.unsent);
    this.ended = true;
    this.ex.close();
    this.release();
  }

  private account(): void {
    const now = this.closed ? 0 : this.held + this.unsent;
    if (now === this.accounted) return; // a client that keeps up: nothing held, nothing to account
    this.budget.update(this.accounted, now);
    this.accounted = now;
  }

  private release(): void {
    this.held = 0;
    this.unsent = 0;
    this.budget.update(this.accounted, 0);
    this.accounted = 0;
  }
}

export const sseData = (json: string): string => `data: ${json}\n\n`;
export const sseEvent = (event: string, json: string): string => `event: ${event}\ndata: ${json}\n\n`;
export const SSE_DONE = "data: [DONE]\n\n";
