/**
 * Bytes held for SSE clients that read slower than their stream is produced: per stream, and
 * summed over every stream of the gateway, so that a crowd of slow readers cannot take the
 * memory the others need. A stream over either bound is dropped (the slowest streams hold the
 * most, so they are the ones that cross it).
 */
export class PendingBudget {
  private held = 0;

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

  adjust(delta: number): void {
    this.held += delta;
  }

  /** Whether a stream holding `bytes` is over its bound or the gateway's. */
  exceeded(bytes: number): boolean {
    return bytes > this.perStreamBytes || this.held > this.totalBytes;
  }

  /** A stream holding `bytes` was dropped for crossing a bound. */
  dropped(bytes: number): void {
    this.onDrop(bytes > this.perStreamBytes ? "stream" : "total", bytes);
  }
}
