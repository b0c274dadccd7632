/**
 * Lets KV-cache edits in.
 *
 * node-llama-cpp decodes all sequences of a context in a loop that holds the context's lock for
 * as long as any sequence has a token queued, and erasing a sequence's cached tokens needs that
 * same lock. Under continuous load the loop never ends, so a slot being prepared for a new
 * request (dropping the previous request's tokens) would wait until every other generation
 * finished. The gate closes while such an edit waits: running sequences hold their next token
 * for one step, the decode loop runs dry and releases the lock, the edit runs, and decoding
 * resumes with the new sequence joining the batch.
 */
export class DecodeGate {
  private closers = 0;
  private opened: Promise<void> = Promise.resolve();
  private open: () => void = () => {};

  get closed(): boolean {
    return this.closers > 0;
  }

  /** Resolves when decoding may continue. */
  wait(): Promise<void> {
    return this.opened;
  }

  /** Holds decoding while `edit` runs (edits may overlap; the gate opens after the last one). */
  async during<T>(edit: () => Promise<T>): Promise<T> {
    if (this.closers++ === 0) this.opened = new Promise((resolve) => (this.open = resolve));
    try {
      return await edit();
    } finally {
      if (--this.closers === 0) this.open();
    }
  }
}
