import type { HttpResponse } from "uWebSockets.js";

const HIGH_WATER_MARK = 1024 * 1024;

/**
 * Buffers a request body from the moment the route is matched (uWS delivers body chunks only to
 * a handler attached in the same tick), pausing the socket when a megabyte is waiting, so a
 * handler may authenticate first and then read the body whole or as a stream.
 */
export class BodyReader {
  private readonly chunks: Buffer[] = [];
  private queued = 0;
  private total = 0;
  private finished = false;
  private paused = false;
  private failure: Error | undefined;
  private wake: (() => void) | undefined;

  constructor(private readonly res: HttpResponse) {
    res.onData((chunk, isLast) => {
      const copy = Buffer.from(chunk.slice(0));
      this.chunks.push(copy);
      this.queued += copy.length;
      this.total += copy.length;
      if (isLast) this.finished = true;
      if (!this.finished && this.queued >= HIGH_WATER_MARK && !this.paused) {
        this.paused = true;
        res.pause();
      }
      this.notify();
    });
  }

  /** Bytes received so far. */
  get received(): number {
    return this.total;
  }

  /** The client went away: pending reads fail. */
  abort(error: Error): void {
    this.failure = error;
    this.notify();
  }

  /** Yields the body's chunks as they arrive; throws `tooLarge()` past `limit` bytes. */
  async *chunksUpTo(limit: number, tooLarge: () => Error): AsyncGenerator<Buffer> {
    let seen = 0;
    for (;;) {
      if (this.failure) throw this.failure;
      const chunk = this.chunks.shift();
      if (chunk) {
        this.queued -= chunk.length;
        if (this.paused && this.queued < HIGH_WATER_MARK / 2) {
          this.paused = false;
          this.res.resume();
        }
        seen += chunk.length;
        if (seen > limit) throw tooLarge();
        yield chunk;
        continue;
      }
      if (this.finished) return;
      await new Promise<void>((resolve) => (this.wake = resolve));
    }
  }

  async readAll(limit: number, tooLarge: () => Error): Promise<Buffer> {
    const parts: Buffer[] = [];
    let size = 0;
    for await (const chunk of this.chunksUpTo(limit, tooLarge)) {
      parts.push(chunk);
      size += chunk.length;
    }
    return parts.length === 1 ? parts[0]! : Buffer.concat(parts, size);
  }

  private notify(): void {
    const wake = this.wake;
    this.wake = undefined;
    wake?.();
  }
}
