import { RunnerHeartbeat_State as State } from "../../proto/gen/tributary/v1/inference.js";
import type { RunnerView } from "../inference/mod.js";

export interface BudgetInput {
  /** The model's runners as the directory knows them (from their last heartbeats). */
  runners: readonly RunnerView[];
  /** This worker's lines of the model in flight now. */
  mine: number;
  /** This worker's in-flight count when the runner's heartbeat arrived (undefined: not seen). */
  mineAtBeat: (runner: RunnerView) => number | undefined;
  /** Batch lines per runner beyond its slots; -1: four times its slots (at most its queue bound). */
  queueMargin: number;
}

/**
 * Lines a batch worker may start now for one model: every ready runner's slots plus the margin,
 * less the interactive work on them, less this worker's lines in flight, less the batch work
 * other workers have on them.
 *
 * A heartbeat is up to an interval old, so its batch figure is not this worker's live load:
 * taken as is, lines that finished since it was sent would keep blocking new ones until the next
 * beat, and the runner would drain and idle for part of every interval. Other workers' share is
 * what the runner reported beyond this worker's own in-flight count when the beat came.
 */
export function dispatchBudget({ runners, mine, mineAtBeat, queueMargin }: BudgetInput): number {
  let capacity = 0;
  let interactive = 0;
  let others = 0;
  for (const r of runners) {
    if (r.state !== State.STATE_READY) continue;
    // Auto margin: four rounds of slots (a line's round trip through JetStream, NATS and the
    // result write is long next to a short generation), never past the runner's batch queue bound.
    const margin = queueMargin < 0 ? Math.min(4 * r.slotsTotal, r.queueLimit) : Math.min(queueMargin, r.queueLimit);
    capacity += r.slotsTotal + margin;
    interactive += Math.max(0, r.reported.slotsBusy - r.batchRunning) + Math.max(0, r.reported.queueLength - r.batchQueueLength);
    others += Math.max(0, r.batchRunning + r.batchQueueLength - (mineAtBeat(r) ?? mine));
  }
  return capacity - interactive - mine - others;
}
