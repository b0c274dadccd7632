/**
 * Bytes held for SSE clients that read slower than their stream is produced: per stream, and
 * summed over every stream of the gateway, so that a crowd of slow readers cannot take the
 * memory the others need. A stream over its own bound is dropped; over the gateway's, the
 * streams holding at least the average are (the slowest hold the most), so that a reader
 * that fell behind for a moment is not dropped for what a crowd of others holds.
 */
export class PendingBudget {
  private held = 0;
  /** Streams holding anything. */
  private holders = 0;

  constructor(
    readonly perStreamBytes: number,
    readonly totalBytes: number,
    /** Told about every stream dropped, and which bound it crossed. */
    private readonly onDrop: (bound: "stream" | "total", heldBytes: number) => void = () => {},
  ) {}

  /** Bytes held now, over every stream. */
  get used(): number {
    return this.held;
  }

  /** A stream that held `before` bytes now holds `after`. */
  update(before: number, after: number): void {
    this.held += after - before;
    if (before === 0 && after > 0) this.holders++;
    else if (before > 0 && after === 0) this.holders--;
  }

  /** Whether a stream holding `bytes` is over its bound, or among the largest holders while the gateway is over its own. */
  exceeded(bytes: number): boolean {
    return bytes > this.perStreamBytes || (this.held > this.totalBytes && bytes * this.holders >= this.held);
  }

  /** A stream holding `bytes` was dropped for crossing a bound. */
  dropped(bytes: number): void {
    this.onDrop(bytes > this.perStreamBytes ? "stream" : "total", bytes);
  }
}
