import type { NatsConnection, Subscription } from "@nats-io/transport-node";
import { RunnerHeartbeat, RunnerHeartbeat_State as State } from "../../proto/gen/tributary/v1/inference.js";
import { subjects } from "../../lib/nats/subjects.js";

export interface RunnerView {
  runnerId: string;
  model: string;
  state: State;
  slotsTotal: number;
  slotsBusy: number;
  queueLength: number;
  queueLimit: number;
  detail: string;
  /** Of slotsBusy: batch choices (preemptible). */
  batchRunning: number;
  /** Of queueLength: waiting batch requests. */
  batchQueueLength: number;
  /** slotsBusy and queueLength as the runner reported them (the fields above include local admissions since). */
  reported: { slotsBusy: number; queueLength: number };
  /** performance.now() of the last heartbeat or event from this runner. */
  lastSeen: number;
  intervalMs: number;
}

/**
 * How long a directory keeps a runner it no longer hears from: four runner timeouts, at least
 * 10 s, so that a runner is declared lost (its streams ended) long before it is forgotten.
 */
const runnerForgetAfterMs = (runnerTimeoutMs: number) => Math.max(runnerTimeoutMs * 4, 10_000);

/**
 * What this gateway knows about runners, from their heartbeats: which runners serve a model,
 * how loaded they are (for routing), and when each was last heard from (for loss detection).
 * Load figures are updated locally on each request sent, so a burst between two heartbeats
 * spreads across runners instead of piling onto the one that looked idlest.
 */
export class RunnerDirectory {
  private readonly runners = new Map<string, RunnerView>();
  private readonly byModel = new Map<string, Set<string>>();
  private subscription: Subscription | undefined;
  private readonly beatListeners = new Set<(view: RunnerView) => void>();

  private readonly forgetAfterMs: number;

  /** `runnerTimeoutMs`: a runner silent this long is lost (no longer a candidate); it is forgotten later. */
  constructor(private readonly nc: NatsConnection, private readonly runnerTimeoutMs: number) {
    this.forgetAfterMs = runnerForgetAfterMs(runnerTimeoutMs);
  }

  start(): void {
    this.subscription = this.nc.subscribe(subjects.heartbeatAll, {
      callback: (err, msg) => {
        if (err) return;
        try {
          this.record(RunnerHeartbeat.decode(msg.data));
        } catch {
          // a malformed heartbeat is ignored; the runner will look silent
        }
      },
    });
  }

  stop(): void {
    this.subscription?.unsubscribe();
  }

  get(runnerId: string): RunnerView | undefined {
    return this.runners.get(runnerId);
  }

  /** Calls `listener` with each runner's view as its heartbeat arrives; returns the unsubscribe. */
  onHeartbeat(listener: (view: RunnerView) => void): () => void {
    this.beatListeners.add(listener);
    return () => this.beatListeners.delete(listener);
  }

  /** Counts a request sent to a runner locally until the next heartbeat brings the runner's own figures. */
  noteRequest(runnerId: string, queued: boolean): void {
    const r = this.runners.get(runnerId);
    if (!r) return;
    if (queued || r.slotsBusy >= r.slotsTotal) r.queueLength++;
    else r.slotsBusy++;
  }

  /**
   * Whether a runner is lost: not heard from for the runner timeout (or forgotten already). Its
   * streams are failed by the client's watchdog; it is no longer a candidate.
   */
  isLost(runnerId: string, now = performance.now()): boolean {
    const r = this.runners.get(runnerId);
    return !r || now - r.lastSeen > this.runnerTimeoutMs;
  }

  /**
   * A request counted by noteRequest ended (or was refused): one less in flight until the next
   * heartbeat brings the runner's own figures. Without it the local count only grows between
   * heartbeats, and a runner that served a burst looks busy after it is idle again.
   */
  noteFinished(runnerId: string): void {
    const r = this.runners.get(runnerId);
    if (!r) return;
    if (r.queueLength > 0) r.queueLength--;
    else if (r.slotsBusy > 0) r.slotsBusy--;
  }

  /** Runners of a model that are alive, in the order to try them: most spare capacity first. */
  candidates(model: string): RunnerView[] {
    this.expire();
    const ids = this.byModel.get(model);
    if (!ids) return [];
    const now = performance.now();
    const ready: RunnerView[] = [];
    for (const id of ids) {
      const r = this.runners.get(id)!;
      if (r.state === State.STATE_READY && !this.isLost(id, now)) ready.push(r);
    }
    const load = (r: RunnerView) => (r.slotsBusy + r.queueLength) / Math.max(1, r.slotsTotal);
    // Shuffle first so equally loaded runners share the work, then order by load.
    for (let i = ready.length - 1; i > 0; i--) {
      const j = Math.floor(Math.random() * (i + 1));
      [ready[i], ready[j]] = [ready[j]!, ready[i]!];
    }
    return ready.sort((a, b) => load(a) - load(b));
  }

  /** Live runners that are ready to serve, of every model. */
  readyCount(): number {
    this.expire();
    let n = 0;
    for (const r of this.runners.values()) if (r.state === State.STATE_READY) n++;
    return n;
  }

  /** Live runners of a model in any state (to explain why none is ready). */
  all(model: string): RunnerView[] {
    this.expire();
    return [...(this.byModel.get(model) ?? [])].map((id) => this.runners.get(id)!);
  }

  private record(beat: RunnerHeartbeat): void {
    const now = performance.now();
    const view: RunnerView = {
      runnerId: beat.runnerId,
      model: beat.model,
      state: beat.state,
      slotsTotal: beat.slotsTotal,
      slotsBusy: beat.slotsBusy,
      queueLength: beat.queueLength,
      queueLimit: beat.queueLimit,
      detail: beat.detail,
      batchRunning: beat.batchRunning,
      batchQueueLength: beat.batchQueueLength,
      reported: { slotsBusy: beat.slotsBusy, queueLength: beat.queueLength },
      lastSeen: now,
      intervalMs: beat.intervalMs,
    };
    this.runners.set(beat.runnerId, view);
    let set = this.byModel.get(beat.model);
    if (!set) this.byModel.set(beat.model, (set = new Set()));
    set.add(beat.runnerId);
    for (const listener of this.beatListeners) listener(view);
  }

  private expire(): void {
    const cutoff = performance.now() - this.forgetAfterMs;
    for (const [id, r] of this.runners) {
      if (r.lastSeen >= cutoff) continue;
      this.runners.delete(id);
      this.byModel.get(r.model)?.delete(id);
    }
  }
}
