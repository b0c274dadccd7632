import type { NativeContext, NativeSampler } from "./addon-context.js";
import { isCandidate, type LogprobProbe } from "./logprob-reads.js";

/** A sequence's input waiting for (or part-way through) decoding. */
interface Job {
  sequenceId: number;
  /** Position of tokens[0] in the sequence. */
  position: number;
  tokens: Uint32Array;
  /** Tokens already decoded (a prompt longer than a batch takes several steps). */
  done: number;
  /** Samples the token after the last input one; undefined: decode only. */
  sampler: NativeSampler | undefined;
  /** Reads the logprobs of that token from the logits it was sampled from; needs `sampler`. */
  probe: LogprobProbe | undefined;
  resolve: (token: number) => void;
  reject: (err: unknown) => void;
}

/**
 * The single owner of a context's batches: every step decodes, as one batch, the input every
 * sequence has queued since the last step (one token for each generating sequence, prompts
 * split by the batch size joining the same step), then samples the next token of each sequence
 * whose input ended in the batch (samples run together on libuv's threads).
 *
 * A step starts on the macrotask after input was queued: the sequences that got their token
 * from the last step have queued their next one by then (their decoders continue through
 * promise jobs only), so all generating sequences decode in one batch, which costs one pass
 * over the weights (llama-server steps its slots the same way). Jobs go into the batch in
 * sequence id order: with a KV cache per sequence, llama.cpp splits a batch into micro-batches
 * of consecutive increasing sequence ids, so a shuffled order costs several matrix passes.
 *
 * KV-cache edits (dropping a slot's old tokens) must not run while a decode is in flight on
 * the shared cache: they run between steps.
 *
 * When a sequence stopped generating in the last step, its slot stands empty and the next
 * request for it (a client that sends its next request when the last one ends, a request queued
 * at the gateway) is a few milliseconds away: a step started at once would run without it, and
 * the new request would wait that whole step before its prompt ran (TTFT at 8 streams on ~500M:
 * 2.0-2.4 steps, where llama-server took ~1.4 of its own). So such a step waits up to
 * LINGER_SHARE of the last step's duration (at most `lingerMaxMs`; never after steps shorter than
 * LINGER_MIN_STEP_MS, which cost about what the wait would), and starts as soon as a new
 * sequence arrives with its prompt. When none comes, the other sequences lose that wait once per
 * ended request.
 *
 * Samples are queued on libuv's pool once the decode is done, from this thread: a round trip
 * between the pool and the JS thread per step. With one pool thread (UV_THREADPOOL_SIZE=1, which
 * `tributary start` gives runners), libuv runs queued work in order on that thread, so
 * `samplesFollowDecode` queues the samples together with the decode: they run right after it on
 * the same worker, and the step costs one wake-up of the JS thread instead of two (at one stream
 * on the tiny model a token is ~0.5 ms, and each wake-up costs tens of microseconds). With more
 * pool threads a sample could run beside the decode, on the logits of the last batch: only one
 * thread may chain.
 */
export const LINGER_SHARE = 0.1;

export const LINGER_MAX_MS = 10;
export const LINGER_MIN_STEP_MS = 10;

/** How long the step after one of `stepMs` in which a sequence stopped waits for a new request. */
export function lingerMs(stepMs: number, maxMs = LINGER_MAX_MS): number {
  return stepMs >= LINGER_MIN_STEP_MS ? Math.min(stepMs * LINGER_SHARE, maxMs) : 0;
}

export interface DecodeStepsOptions {
  /** The longest wait for a new request after a sequence stopped (0: none). */
  lingerMaxMs?: number;
  /** The clock steps are timed with (ms). */
  now?: () => number;
  /** Queue each step's samples with its decode: only with one libuv pool thread (see above). */
  samplesFollowDecode?: boolean;
  /** Chooses each step's decode threads from the cycles of steady steps (ThreadTuner); unset: the context's own threads, always. */
  threads?: StepThreads;
}

/** What DecodeSteps asks of a thread chooser (ThreadTuner). */
export interface StepThreads {
  threadsFor(tokens: number, generating: boolean): number;
  /** The start-to-start time of a step of steady generation: the same sequences as the next step, one token each, no wait between. */
  cycle(tokens: number, threads: number, ms: number): void;
}

export class DecodeSteps {
  private queued: Job[] = [];
  private edits: Array<() => void> = [];
  private stepping = false;
  private scheduled = false;
  private closed = false;
  /** The step in flight, awaited by close(). */
  private current: Promise<void> | undefined;
  /** A sequence stopped generating since the last step started: its slot may get a new request any moment. */
  private vacant = false;
  private lastStepMs = 0;
  private linger: NodeJS.Timeout | undefined;
  private readonly runNow = () => {
    this.linger = undefined;
    this.current = this.run();
  };
  /** A new sequence queued its input since the last step started: nothing to wait for. */
  private arrived = false;
  private readonly step = () => {
    const wait = this.vacant && !this.arrived ? lingerMs(this.lastStepMs, this.lingerMaxMs) : 0;
    if (wait > 0 && !this.closed) this.linger = setTimeout(this.runNow, wait);
    else this.runNow();
  };
  /**
   * A sequence stopped since the last step started: the next start does not end a steady cycle,
   * even when a new request in the same slot continues from its cached prompt with one token (the
   * time between the requests is in that cycle).
   */
  private unsteady = false;
  /** The last step as the thread chooser sees it: its start, threads, and (when it generated) its sequences in order. */
  private lastStep: { started: number; threads: number; generating: Int32Array | undefined } | undefined;
  /** The decode threads last set on the context (0: not set here yet). */
  private threads = 0;

  private readonly lingerMaxMs: number;
  private readonly now: () => number;
  private readonly samplesFollowDecode: boolean;
  private readonly stepThreads: StepThreads | undefined;

  constructor(
    private readonly native: NativeContext,
    private readonly batchSize: number,
    options: DecodeStepsOptions = {},
  ) {
    this.lingerMaxMs = options.lingerMaxMs ?? LINGER_MAX_MS;
    this.now = options.now ?? (() => performance.now());
    this.samplesFollowDecode = options.samplesFollowDecode ?? false;
    this.stepThreads = options.threads;
  }

  /** A sequence stopped generating: the next step may wait a little for a new request (see the class comment). */
  vacated(): void {
    this.vacant = true;
    this.unsteady = true;
  }

  /** A new sequence is about to queue its prompt: a step waiting for one starts now, with it. */
  arriving(): void {
    this.arrived = true;
    if (!this.linger) return;
    clearTimeout(this.linger);
    this.linger = undefined;
    // On the next macrotask: the caller queues its prompt synchronously right after this.
    setImmediate(this.runNow);
  }

  /**
   * Decodes `tokens` at `position..` of the sequence and, with a sampler, samples the next
   * token (-1 when the sampler returned none); with a probe as well, sets the probe's read
   * from the same logits. Rejects when the decode fails.
   */
  decode(sequenceId: number, position: number, tokens: Uint32Array, sampler: NativeSampler | undefined, probe?: LogprobProbe): Promise<number> {
    if (this.closed) return Promise.reject(new Error("the context is closing"));
    return new Promise((resolve, reject) => {
      this.queued.push({ sequenceId, position, tokens, done: 0, sampler, probe, resolve, reject });
      this.schedule();
    });
  }

  /** Runs `edit` when no decode is in flight (now, or right after the current step). */
  edit<T>(edit: () => T): Promise<T> {
    if (!this.stepping) {
      try {
        return Promise.resolve(edit());
      } catch (err) {
        return Promise.reject(err);
      }
    }
    return new Promise((resolve, reject) =>
      this.edits.push(() => {
        try {
          resolve(edit());
        } catch (err) {
          reject(err);
        }
      }),
    );
  }

  /** Rejects queued input and waits for the step in flight: after this the context may be disposed. */
  async close(): Promise<void> {
    this.closed = true;
    if (this.linger) {
      clearTimeout(this.linger);
      this.linger = undefined;
      this.scheduled = false;
    }
    const queued = this.queued;
    this.queued = [];
    for (const job of queued) job.reject(new Error("the context is closing"));
    await this.current;
  }

  private schedule(): void {
    if (this.stepping || this.scheduled) return;
    this.scheduled = true;
    setImmediate(this.step);
  }

  private async run(): Promise<void> {
    this.scheduled = false;
    this.vacant = false;
    this.arrived = false;
    if (this.queued.length === 0 || this.closed) return;
    this.stepping = true;
    const jobs = this.queued.sort((a, b) => a.sequenceId - b.sequenceId);
    this.queued = [];
    // Fill the batch in id order; what does not fit (the rest of a long prompt) waits for the next step.
    let room = this.batchSize;
    const members: Array<{ job: Job; count: number; logitIndex: number }> = [];
    for (const job of jobs) {
      if (room === 0) {
        this.queued.push(job);
        continue;
      }
      const count = Math.min(room, job.tokens.length - job.done);
      members.push({ job, count, logitIndex: -1 });
      room -= count;
    }
    const sampled: Array<Promise<unknown> | undefined> = [];
    let stepStarted = 0;
    try {
      stepStarted = this.now();
      if (this.stepThreads) this.chooseThreads(members, this.batchSize - room, stepStarted);
      this.native.initBatch(this.batchSize - room);
      for (const m of members) {
        const { job, count } = m;
        const last = job.done + count === job.tokens.length;
        const logits = last && job.sampler ? LAST_OF[count] ?? Uint32Array.of(count - 1) : NO_LOGITS;
        const indexes = this.native.addToBatch(job.sequenceId, job.position + job.done, job.tokens.subarray(job.done, job.done + count), logits);
        if (logits !== NO_LOGITS) m.logitIndex = indexes[0]!;
      }
      const decoded = this.native.decodeBatch();
      if (this.samplesFollowDecode) this.sampleMembers(members, sampled);
      await decoded;
    } catch (err) {
      // Samples queued behind a failed decode read no logits of this batch: their results go unused.
      await Promise.allSettled(sampled);
      this.finishStep();
      for (const { job } of members) job.reject(err);
      if (this.queued.length > 0) this.schedule();
      return;
    }
    // The logits of this batch stay valid until the next decode: all samples complete first.
    if (!this.samplesFollowDecode) this.sampleMembers(members, sampled);
    const results = await Promise.allSettled(sampled);
    this.lastStepMs = this.now() - stepStarted;
    this.finishStep();
    members.forEach(({ job, count }, i) => {
      job.done += count;
      const result = results[i]!;
      if (result.status === "rejected") job.reject(result.reason);
      else if (job.done < job.tokens.length) this.queued.push(job);
      else job.resolve(job.sampler ? (result.value as number) : -1);
    });
    if (this.queued.length > 0) this.schedule();
  }

  /** Reports the last step's cycle when it was steady and sets this step's threads. */
  private chooseThreads(members: ReadonlyArray<{ job: Job; count: number }>, tokens: number, started: number): void {
    const chooser = this.stepThreads!;
    const generating = members.every(({ job, count }) => count === 1 && job.tokens.length === 1 && job.sampler !== undefined);
    const ids = generating ? Int32Array.from(members, (m) => m.job.sequenceId) : undefined;
    const last = this.lastStep;
    if (ids && last?.generating && !this.unsteady && sameIds(last.generating, ids)) chooser.cycle(tokens, last.threads, started - last.started);
    this.unsteady = false;
    const threads = chooser.threadsFor(tokens, generating);
    if (threads !== this.threads) {
      this.native.setThreads(threads);
      this.threads = threads;
    }
    this.lastStep = { started, threads, generating: ids };
  }

  /**
   * Queues each member's sample, in member order (`sampled[i]` is member i's token). A member with
   * a probe also has its logprobs read (logprob-reads.ts), queued right after its sample on the
   * same logits; when the token is not among the read's candidates, the whole distribution is read
   * too, still before the step ends (the logits stay valid until the next decode). Its promise
   * resolves with the token once all are done, a read failing as its sample would.
   */
  private sampleMembers(members: ReadonlyArray<{ job: Job; logitIndex: number }>, sampled: Array<Promise<unknown> | undefined>): void {
    for (const m of members) {
      if (m.logitIndex < 0) {
        sampled.push(undefined);
        continue;
      }
      const token = this.native.sampleToken(m.logitIndex, m.job.sampler!);
      const probe = m.job.probe;
      if (!probe) {
        sampled.push(token);
        continue;
      }
      const logitIndex = m.logitIndex;
      const top = this.native.sampleToken(logitIndex, probe.top, true);
      const whole = this.native.sampleToken(logitIndex, probe.whole, false, true);
      sampled.push(
        Promise.all([token, top, whole]).then(async ([t, [, candidates], [, , topProbability]]) => {
          if (!candidates?.length || topProbability === undefined) throw new Error("the addon returned no probabilities");
          const read = { top: candidates, topProbability, whole: undefined as number[] | undefined };
          if (t >= 0 && !isCandidate(candidates, t)) read.whole = (await this.native.sampleToken(logitIndex, probe.whole, true))[1];
          probe.read = read;
          return t;
        }),
      );
    }
  }

  private finishStep(): void {
    this.stepping = false;
    const edits = this.edits;
    this.edits = [];
    for (const edit of edits) edit();
  }
}

function sameIds(a: Int32Array, b: Int32Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

const NO_LOGITS = new Uint32Array(0);
/** Logit index arrays for the last token of a chunk, shared (addToBatch only reads them). */
const LAST_OF: Uint32Array[] = Array.from({ length: 64 }, (_, i) => Uint32Array.of(Math.max(0, i - 1)));
