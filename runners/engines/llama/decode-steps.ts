/**
 * Keeps the generating sequences of a context in one decode batch per step.
 *
 * node-llama-cpp decodes queued tokens in a loop that starts the next batch as soon as the last
 * one's tokens are sampled, with whatever is queued at that moment. Each sequence queues its next
 * token only after its sampled token has travelled through a chain of promises (the evaluate
 * generator, our decoder), and the samples of one batch complete at different times on libuv's
 * threads: so the loop starts the next batch with the sequences that happened to be back, and
 * the rest follow in a second one. Measured on the random ~100M model with 8 streams: batches of
 * 4 and 7 instead of 8, ~2 weight passes per step, 30% more CPU per token than llama-server
 * (which steps all slots in one batch).
 *
 * Here a sequence that wants its next token waits until no generation step is in flight, and
 * the waiting sequences are released together on the next macrotask: by then node-llama-cpp's
 * loop has found its queue empty and stopped, and the released sequences queue their tokens in
 * one turn, which node-llama-cpp dispatches as one batch. A sequence whose decoder is busy
 * elsewhere (awaiting a KV edit) is not waited for: it joins a later step. With at most one
 * sequence generating, nothing waits (the single-stream path keeps its latency).
 */
export class DecodeSteps {
  /** generate() loops past their first token: the sequences that take part in steps. */
  private members = 0;
  /** Steps (one token of one member) queued or decoding. */
  private inFlight = 0;
  private waiting: Array<{ order: number; resolve: () => void }> = [];
  private releaseScheduled = false;

  join(): void {
    this.members++;
  }

  leave(): void {
    this.members--;
    this.maybeRelease();
  }

  /**
   * Resolves when this member may queue its next token. `order` is the member's sequence id:
   * members are released in its order, so that they queue their tokens in it. With a KV cache
   * per sequence, llama.cpp splits a batch into micro-batches of consecutive increasing sequence
   * ids (llama_batch_allocr::split_equal, sequential), so a batch of 8 sequences queued in a
   * shuffled order ran as 3-5 matrix passes (with the single-column kernel for most of them),
   * in id order as one.
   */
  ready(order: number): Promise<void> | undefined {
    if (this.members <= 1 && this.inFlight === 0 && this.waiting.length === 0) return undefined;
    return new Promise((resolve) => {
      this.waiting.push({ order, resolve });
      this.maybeRelease();
    });
  }

  /** A member's token was queued. */
  started(): void {
    this.inFlight++;
  }

  /** A member's token came back (or its decode failed). */
  finished(): void {
    this.inFlight--;
    this.maybeRelease();
  }

  private maybeRelease(): void {
    if (this.inFlight > 0 || this.waiting.length === 0 || this.releaseScheduled) return;
    this.releaseScheduled = true;
    setImmediate(() => {
      this.releaseScheduled = false;
      const released = this.waiting.sort((a, b) => a.order - b.order);
      this.waiting = [];
      for (const { resolve } of released) resolve();
    });
  }
}
