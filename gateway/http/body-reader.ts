const HIGH_WATER_MARK = 1024 * 1024;

/** What a BodyReader may do to the socket: only while the response is still open (the exchange checks). */
export interface BodyFlowControl {
  pause(): void;
  resume(): void;
}

/**
 * Buffers a request body from the moment the route is matched (uWS delivers body chunks only to
 * a handler attached in the same tick), pausing the socket when a megabyte is waiting, so a
 * handler may authenticate first and then read the body whole or as a stream.
 *
 * Once the exchange answered (or gave up on the body), the rest of the body is discarded as it
 * arrives: uWS keeps delivering it after the response ended, and nothing may then touch the
 * response, not even to pause it.
 */
export class BodyReader {
  private readonly chunks: Buffer[] = [];
  private queued = 0;
  private total = 0;
  private finished = false;
  private discarding = false;
  private pausedFlag = false;
  private failure: Error | undefined;
  private wake: (() => void) | undefined;
  private completeHandler: (() => void) | undefined;

  /** `declaredLength`: the content-length header, undefined for a chunked body. */
  constructor(private readonly flow: BodyFlowControl, readonly declaredLength: number | undefined) {}

  /** Called by uWS for every chunk (the exchange forwards onData here). */
  push(chunk: ArrayBuffer, isLast: boolean): void {
    this.total += chunk.byteLength;
    if (isLast) this.finished = true;
    if (!this.discarding) {
      // uWS neuters the ArrayBuffer when this callback returns: keep a copy.
      const copy = Buffer.from(chunk.slice(0));
      this.chunks.push(copy);
      this.queued += copy.length;
      if (!this.finished && this.queued >= HIGH_WATER_MARK && !this.pausedFlag) {
        this.pausedFlag = true;
        this.flow.pause();
      }
      this.notify();
    }
    if (isLast) this.completeHandler?.();
  }

  /** Bytes received so far. */
  get received(): number {
    return this.total;
  }

  /** The last byte arrived. */
  get complete(): boolean {
    return this.finished;
  }

  /** Reading is paused because the handler has not taken what is buffered. */
  get paused(): boolean {
    return this.pausedFlag;
  }

  /** Bytes still to come: known for a declared length, Infinity for a chunked body. */
  get remaining(): number {
    if (this.finished) return 0;
    return this.declaredLength === undefined ? Infinity : Math.max(0, this.declaredLength - this.total);
  }

  onComplete(handler: () => void): void {
    this.completeHandler = handler;
  }

  /** Pending and future reads fail with `error` (client gone, timeout). */
  abort(error: Error): void {
    this.failure ??= error;
    this.notify();
  }

  /**
   * Nobody will read the rest (the exchange answered): drop what is buffered, let the socket
   * flow again (the caller does this while the response can still be touched), drop whatever
   * arrives from now on, and fail a read still waiting with `error`.
   */
  discard(error: Error): void {
    if (this.discarding) return;
    this.discarding = true;
    this.abort(error);
    this.chunks.length = 0;
    this.queued = 0;
    if (this.pausedFlag) {
      this.pausedFlag = false;
      this.flow.resume();
    }
  }

  /** Yields the body's chunks as they arrive; throws `tooLarge()` past `limit` bytes. */
  async *chunksUpTo(limit: number, tooLarge: () => Error): AsyncGenerator<Buffer> {
    let seen = 0;
    for (;;) {
      if (this.failure) throw this.failure;
      const chunk = this.chunks.shift();
      if (chunk) {
        this.queued -= chunk.length;
        if (this.pausedFlag && this.queued < HIGH_WATER_MARK / 2) {
          this.pausedFlag = false;
          this.flow.resume();
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
