import t from "tap";
import { dispatchBudget } from "../../modules/batches/mod.js";
import type { RunnerView } from "../../modules/inference/mod.js";
import { RunnerHeartbeat_State as State } from "../../proto/gen/tributary/v1/inference.js";

/** A runner's view as its heartbeat reported it: 8 slots, queue bound 64 (auto margin 32). */
function runner(busy: number, queued: number, batchRunning: number, batchQueued: number, state = State.STATE_READY): RunnerView {
  return {
    runnerId: "r", model: "m", state, slotsTotal: 8, slotsBusy: busy, queueLength: queued, queueLimit: 64, detail: "",
    batchRunning, batchQueueLength: batchQueued, reported: { slotsBusy: busy, queueLength: queued }, lastSeen: 0, intervalMs: 500,
  };
}

t.test("an idle runner takes its slots plus four rounds of them", async (t) => {
  t.equal(dispatchBudget({ runners: [runner(0, 0, 0, 0)], mine: 0, mineAtBeat: () => 0, queueMargin: -1 }), 40);
  t.equal(dispatchBudget({ runners: [runner(0, 0, 0, 0)], mine: 0, mineAtBeat: () => 0, queueMargin: 4 }), 12);
  t.equal(dispatchBudget({ runners: [runner(0, 0, 0, 0, State.STATE_LOADING)], mine: 0, mineAtBeat: () => 0, queueMargin: -1 }), 0, "runners not ready take nothing");
});

t.test("lines that finished since the last heartbeat are replaced at once", async (t) => {
  // The beat said 8 running + 32 queued, all this worker's; 10 have finished since.
  const beat = runner(8, 32, 8, 32);
  t.equal(dispatchBudget({ runners: [beat], mine: 30, mineAtBeat: () => 40, queueMargin: -1 }), 10);
  // All 40 done: the runner is about to idle, the worker refills it whole.
  t.equal(dispatchBudget({ runners: [beat], mine: 0, mineAtBeat: () => 40, queueMargin: -1 }), 40);
});

t.test("other workers' lines and interactive work count against the budget", async (t) => {
  // 40 batch lines on the runner, 20 of them this worker's: the other 20 belong to another worker.
  t.equal(dispatchBudget({ runners: [runner(8, 32, 8, 32)], mine: 20, mineAtBeat: () => 20, queueMargin: -1 }), 0);
  t.equal(dispatchBudget({ runners: [runner(8, 12, 8, 12)], mine: 0, mineAtBeat: () => 0, queueMargin: -1 }), 20);
  // 3 interactive requests running, 2 queued.
  t.equal(dispatchBudget({ runners: [runner(8, 2, 5, 0)], mine: 5, mineAtBeat: () => 5, queueMargin: -1 }), 30);
  // A runner not heard from since this worker started: its whole report counts as others'.
  t.equal(dispatchBudget({ runners: [runner(8, 0, 8, 0)], mine: 0, mineAtBeat: () => undefined, queueMargin: -1 }), 32);
});

t.test("several runners add their capacity", async (t) => {
  t.equal(dispatchBudget({ runners: [runner(0, 0, 0, 0), runner(8, 32, 8, 32)], mine: 40, mineAtBeat: () => 40, queueMargin: -1 }), 40);
});
