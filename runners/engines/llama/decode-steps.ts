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
 *
 * When a request ended in the last step, its slot stands empty and the next request for it
 * (a client that sends its next request when the last one ends, a request queued at the
 * gateway) is a few milliseconds away: without waiting, the next step starts at once without it,
 * and the new request waits that whole step before its prompt is evaluated (its TTFT: ~2.3 steps
 * where llama-server, whose HTTP path turns around between its own steps, took ~1.4). So after
 * such a step the release waits up to LINGER_SHARE of the step's duration (at most
 * LINGER_MAX_MS; not for steps shorter than LINGER_MIN_STEP_MS, where the step costs about
 * what the wait would) and goes at once when a new sequence arrives with its prompt.
 */
export const LINGER_SHARE = 0.1;
export const LINGER_MAX_MS = 10;
export const LINGER_MIN_STEP_MS = 10;

/** How long the release after a step of `stepMs` that vacated a slot waits for a new request. */
export function lingerMs(stepMs: number, maxMs = LINGER_MAX_MS): number {
  return stepMs >= LINGER_MIN_STEP_MS ? Math.min(stepMs * LINGER_SHARE, maxMs) : 0;
}

export class DecodeSteps {
  /** generate() loops past their first token: the sequences that take part in steps. */
  private members = 0;
  /** Steps (one token of one member) queued or decoding. */
  private inFlight = 0;
  private waiting: Array<{ order: number; resolve: () => void }> = [];
  private releaseScheduled = false;
  /** A member left since the last release: its slot may get a new request any moment. */
  private vacated = false;
  private stepStartedAt = 0;
  private lastStepMs = 0;
  private linger: NodeJS.Timeout | undefined;

  /** `now`: the clock steps are timed with (milliseconds); `lingerMaxMs`: the longest wait for a new request (0: none). */
  constructor(
    private readonly now: () => number = () => performance.now(),
    private readonly lingerMaxMs = LINGER_MAX_MS,
  ) {}

  join(): void {
    this.members++;
  }

  leave(): void {
    this.members--;
    this.vacated = true;
    this.maybeRelease();
  }

  /** A new sequence is about to queue its prompt: a release waiting for it goes now. */
  arriving(): void {
    if (!this.linger) return;
    clearTimeout(this.linger);
    this.linger = undefined;
    this.releaseScheduled = false;
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
    if (this.inFlight++ === 0) this.stepStartedAt = this.now();
  }

  /** A member's token came back (or its decode failed). */
  finished(): void {
    if (--this.inFlight === 0) this.lastStepMs = this.now() - this.stepStartedAt;
    this.maybeRelease();
  }

  private maybeRelease(): void {
    if (this.inFlight > 0 || this.waiting.length === 0 || this.releaseScheduled) return;
    this.releaseScheduled = true;
    const wait = this.vacated ? lingerMs(this.lastStepMs, this.lingerMaxMs) : 0;
    this.vacated = false;
    if (wait > 0) {
      this.linger = setTimeout(() => {
        this.linger = undefined;
        this.release();
      }, wait);
      return;
    }
    setImmediate(() => this.release());
  }

  private release(): void {
    this.releaseScheduled = false;
    const released = this.waiting.sort((a, b) => a.order - b.order);
    this.waiting = [];
    for (const { resolve } of released) resolve();
  }
}
