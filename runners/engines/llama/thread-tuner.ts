import type { DecodeThreadsStatus } from "../engine.js";

/**
 * Picks, while serving, how many CPU threads decode a step, by the step's width.
 *
 * How many threads decode a step fastest depends on the machine and on the step's width, not on
 * the model alone: on one 2-CPU VM a ~500M model generated 1.6x faster on 2 threads than on 1, on
 * another 1.04x, and there a ~100M model ran 0.67x at one stream but 1.13-1.19x at 8 (each thread
 * meets the others at a barrier after every graph node: a one-token step is little work per
 * barrier where crossing between the VM's CPUs is slow). Timing a few steps at startup proved too
 * noisy for differences of 10-30% (bench/results/vs-llama-server-calibrated*.md, in git history), so the tuner
 * measures the steps it serves: each width class keeps its own thread count, and now and then a
 * short probe runs a few steps on a neighbouring count. A probe is compared with the steps just
 * before it (so a context growing longer, or a busier machine, moves both sides alike), and the
 * count changes only when two probes in a row find the neighbour faster by SWITCH_GAIN. A probe
 * that finds the neighbour clearly slower doubles the wait before the next one, so in a steady
 * state probes cost a small fraction of a percent.
 *
 * What is timed is a step's cycle (from its start to the next step's start), not its decode
 * alone: spinning decode threads also slow the JavaScript work between steps, which throughput
 * pays for. DecodeSteps reports only cycles of steady generation (the same sequences, one token
 * each, no wait in between).
 */

/** A neighbour's median cycle must be at most 1 / SWITCH_GAIN of the current count's, twice in a row. */
export const SWITCH_GAIN = 1.03;
/** A probe slower by CLEARLY_SLOWER or more doubles the wait before the next probe of that width class. */
export const CLEARLY_SLOWER = 1.1;
/** Cycles on the current count a probe is compared with (the most recent ones). */
export const BASELINE_CYCLES = 8;
/** Steps a probe runs on the neighbouring count. */
export const PROBE_STEPS = 4;
export const FIRST_PROBE_AFTER = 12;
export const MAX_PROBE_INTERVAL = 1024;

/** Thread counts worth trying below `threads`: powers of two, then `threads` itself (ascending). */
export function threadCandidates(threads: number): number[] {
  const candidates: number[] = [];
  for (let n = 1; n < threads; n *= 2) candidates.push(n);
  candidates.push(threads);
  return candidates;
}

/** Width classes: 1, 2-3, 4-7, 8-15, ... tokens per step. */
export function widthClass(tokens: number): number {
  return 31 - Math.clz32(Math.max(1, tokens));
}

interface WidthState {
  /** The fewest tokens of a step in this class (1, 2, 4, ...). */
  fromTokens: number;
  /** Index into candidates of the count steps of this width use. */
  current: number;
  /** The latest cycles (ms) on the current count. */
  baseline: number[];
  stepsUntilProbe: number;
  interval: number;
  /** The probe in progress: the candidate, steps still to run on it, cycles measured so far. */
  probe: { candidate: number; stepsLeft: number; cycles: number[]; stepsSinceStart: number } | undefined;
  /** A probe found this candidate faster: one more in a row switches to it. */
  promising: number | undefined;
  /** Alternates the neighbour probed (below, above). */
  probes: number;
}

export interface ThreadChange {
  tokensFrom: number;
  from: number;
  to: number;
  /** The neighbour's median cycle over the current count's in the deciding probe. */
  ratio: number;
}

export class ThreadTuner {
  readonly candidates: readonly number[];
  private readonly widths: WidthState[] = [];
  private probes = 0;
  private changes = 0;

  /** `onChange` hears every change of a width class's thread count (for logs and metrics). */
  constructor(threads: number, private readonly onChange: (change: ThreadChange) => void = () => {}) {
    this.candidates = threadCandidates(threads);
  }

  /** The threads a step of `tokens` tokens decodes on; `generating`: one token per sequence (steps with prompts use all threads). */
  threadsFor(tokens: number, generating: boolean): number {
    const top = this.candidates.length - 1;
    if (!generating || top === 0) return this.candidates[top]!;
    const state = this.widthState(tokens);
    const probe = state.probe;
    if (probe) {
      probe.stepsSinceStart++;
      if (probe.stepsLeft > 0) {
        probe.stepsLeft--;
        return this.candidates[probe.candidate]!;
      }
      // Its cycles arrive one step late, and only for steady steps: give up on a probe that does not complete.
      if (probe.stepsSinceStart > PROBE_STEPS * 4) this.endProbe(state, state.interval);
    } else if (--state.stepsUntilProbe <= 0 && state.baseline.length >= BASELINE_CYCLES / 2) {
      const candidate = this.neighbour(state);
      this.probes++;
      state.probe = { candidate, stepsLeft: PROBE_STEPS - 1, cycles: [], stepsSinceStart: 1 };
      return this.candidates[candidate]!;
    }
    return this.candidates[state.current]!;
  }

  /** The cycle of a steady generation step of `tokens` tokens decoded on `threads` threads. */
  cycle(tokens: number, threads: number, ms: number): void {
    if (this.candidates.length === 1) return;
    const state = this.widthState(tokens);
    const probe = state.probe;
    if (probe && this.candidates[probe.candidate] === threads) {
      probe.cycles.push(ms);
      if (probe.cycles.length >= PROBE_STEPS) this.judge(state, probe.candidate, median(probe.cycles));
    } else if (this.candidates[state.current] === threads) {
      state.baseline.push(ms);
      if (state.baseline.length > BASELINE_CYCLES) state.baseline.shift();
    }
  }

  status(): DecodeThreadsStatus {
    const byWidth: DecodeThreadsStatus["byWidth"] = [];
    for (const s of this.widths) if (s) byWidth.push({ fromTokens: s.fromTokens, threads: this.candidates[s.current]! });
    return { byWidth, probes: this.probes, changes: this.changes };
  }

  /** For logs: "1: 1, 2-3: 2, 8-15: 2" (width class: threads), classes seen only. */
  describe(): string {
    return this.status()
      .byWidth.map(({ fromTokens, threads }) => `${fromTokens}${fromTokens > 1 ? `-${fromTokens * 2 - 1}` : ""}: ${threads}`)
      .join(", ");
  }

  private judge(state: WidthState, candidate: number, probeMs: number): void {
    const ratio = state.baseline.length > 0 ? probeMs / median(state.baseline) : 1;
    if (ratio * SWITCH_GAIN <= 1) {
      if (state.promising === candidate) {
        const from = this.candidates[state.current]!;
        state.current = candidate;
        state.baseline = [];
        state.promising = undefined;
        state.interval = FIRST_PROBE_AFTER;
        this.changes++;
        this.endProbe(state, FIRST_PROBE_AFTER);
        this.onChange({ tokensFrom: state.fromTokens, from, to: this.candidates[candidate]!, ratio });
        return;
      }
      // Confirm soon, against fresh cycles on the current count.
      state.promising = candidate;
      this.endProbe(state, BASELINE_CYCLES);
      return;
    }
    state.promising = undefined;
    if (ratio >= CLEARLY_SLOWER) state.interval = Math.min(state.interval * 2, MAX_PROBE_INTERVAL);
    this.endProbe(state, state.interval);
  }

  private endProbe(state: WidthState, stepsUntilProbe: number): void {
    state.probe = undefined;
    state.stepsUntilProbe = stepsUntilProbe;
  }

  /** The neighbouring candidate to probe next: the one a probe promised, else below and above in turn. */
  private neighbour(state: WidthState): number {
    if (state.promising !== undefined) return state.promising;
    const below = state.current - 1;
    const above = state.current + 1;
    if (below < 0) return above;
    if (above >= this.candidates.length) return below;
    return state.probes++ % 2 === 0 ? below : above;
  }

  private widthState(tokens: number): WidthState {
    const c = widthClass(tokens);
    return (this.widths[c] ??= {
      fromTokens: 1 << c,
      current: this.candidates.length - 1,
      baseline: [],
      stepsUntilProbe: FIRST_PROBE_AFTER,
      interval: FIRST_PROBE_AFTER,
      probe: undefined,
      promising: undefined,
      probes: 0,
    });
  }
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}
