/**
 * Keeps per-token values (logprobs) with the text they belong to while that text waits in a
 * TriggerMatcher: each value is added at the offset where its token's text starts in the stream,
 * and handed out once the text emitted reaches past that offset. A token whose text is still held
 * back (a possible stop sequence) waits with it; one whose text was cut (the stop sequence itself)
 * is never handed out. A token with no text of its own (part of a character) starts where the
 * next text starts, and goes out with it.
 */
export class TokenOffsets<T> {
  private readonly starts: number[] = [];
  private readonly values: T[] = [];
  private first = 0;

  /** A token whose text starts at `start` (chars of the stream before it). */
  add(start: number, value: T): void {
    this.starts.push(start);
    this.values.push(value);
  }

  /** The values of tokens starting before `emitted` (chars of the stream emitted so far), in order. */
  release(emitted: number): T[] {
    let end = this.first;
    while (end < this.starts.length && this.starts[end]! < emitted) end++;
    return this.take(end);
  }

  /** Every value not handed out yet: the stream ended with all of its text emitted. */
  releaseAll(): T[] {
    return this.take(this.starts.length);
  }

  private take(end: number): T[] {
    if (end === this.first) return [];
    const out = this.values.slice(this.first, end);
    this.first = end;
    if (this.first === this.starts.length) {
      this.starts.length = 0;
      this.values.length = 0;
      this.first = 0;
    }
    return out;
  }
}
