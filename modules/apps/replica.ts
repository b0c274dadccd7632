import { AppInstance, type InstanceExit, type InstanceHostOptions, type InstanceSpec, type LogLine } from "./instance.js";

// A replica keeps one instance of a deployment running: it starts it, waits for its health
// check, and restarts it with backoff when it crashes. Repeated crashes (or one memory kill, or
// a first start that never becomes healthy) fail it, with the last log lines as the evidence.

export type ReplicaState = "starting" | "healthy" | "failed" | "stopped";
export type ReplicaFailure = "memory_exceeded" | "crash_loop" | "health_check_timeout" | "exited_before_healthy";

export interface ReplicaPolicy {
  /** How long a start may take to answer its first request. */
  healthTimeoutMs: number;
  /** Restarts allowed within `crashWindowMs`; one more crash fails the replica. */
  maxRestarts: number;
  crashWindowMs: number;
  /** First restart delay; doubles per crash in the window, up to `maxBackoffMs`. */
  backoffMs: number;
  maxBackoffMs: number;
}

export const DEFAULT_REPLICA_POLICY: ReplicaPolicy = { healthTimeoutMs: 30_000, maxRestarts: 3, crashWindowMs: 60_000, backoffMs: 500, maxBackoffMs: 8_000 };

export interface ReplicaStatus {
  state: ReplicaState;
  reason: ReplicaFailure | null;
  message: string | null;
  restarts: number;
}

const LOG_LINES_KEPT = 200;

export class AppReplica {
  private instance: AppInstance | undefined;
  private generation = 0;
  private crashes: number[] = [];
  private restarts = 0;
  private status: ReplicaStatus = { state: "starting", reason: null, message: null, restarts: 0 };
  private readonly logs: LogLine[] = [];
  private readonly logListeners = new Set<(line: LogLine) => void>();
  private readonly stateListeners = new Set<(status: ReplicaStatus) => void>();
  private restartTimer: NodeJS.Timeout | undefined;
  private stopped = false;
  private readonly firstOutcome: Promise<ReplicaStatus>;
  private settleFirst!: (status: ReplicaStatus) => void;

  constructor(
    private readonly options: InstanceHostOptions,
    /** The instance spec; each start gets `${replicaId}-${n}` as its instance id. */
    private readonly spec: Omit<InstanceSpec, "instanceId">,
    readonly replicaId: string,
    private readonly policy: ReplicaPolicy = DEFAULT_REPLICA_POLICY,
  ) {
    this.firstOutcome = new Promise((resolve) => (this.settleFirst = resolve));
  }

  /** Starts the first instance; resolves once it is healthy or the replica failed. */
  start(): Promise<ReplicaStatus> {
    void this.launch();
    return this.firstOutcome;
  }

  get current(): ReplicaStatus {
    return { ...this.status };
  }

  /** The socket of the serving instance (undefined unless healthy). */
  get appSocket(): string | undefined {
    return this.status.state === "healthy" ? this.instance?.appSocket : undefined;
  }

  recentLogs(): LogLine[] {
    return [...this.logs];
  }

  onLog(listener: (line: LogLine) => void): () => void {
    this.logListeners.add(listener);
    return () => this.logListeners.delete(listener);
  }

  onState(listener: (status: ReplicaStatus) => void): () => void {
    this.stateListeners.add(listener);
    return () => this.stateListeners.delete(listener);
  }

  /** Stops the instance (graceful for `graceMs`, then killed); the replica ends as stopped. */
  async stop(graceMs: number): Promise<void> {
    this.stopped = true;
    clearTimeout(this.restartTimer);
    const instance = this.instance;
    if (instance) await instance.stop(graceMs);
    if (this.status.state !== "failed") this.setStatus({ state: "stopped", reason: null, message: null, restarts: this.restarts });
  }

  private async launch(): Promise<void> {
    if (this.stopped) return;
    this.generation++;
    let instance: AppInstance;
    try {
      instance = new AppInstance(this.options, { ...this.spec, instanceId: `${this.replicaId}-${this.generation}` });
    } catch (err) {
      return this.fail("exited_before_healthy", `the instance could not start: ${(err as Error).message}`);
    }
    this.instance = instance;
    instance.onLog((line) => this.addLog(line));
    this.setStatus({ state: "starting", reason: null, message: null, restarts: this.restarts });
    void instance.exited.then((exit) => this.onExit(instance, exit));
    const healthy = await instance.waitHealthy(this.policy.healthTimeoutMs);
    if (this.stopped || instance !== this.instance) return;
    if (healthy) {
      this.setStatus({ state: "healthy", reason: null, message: null, restarts: this.restarts });
      return;
    }
    if (instance.alive) {
      // Running but never answering: restarting it would only wait as long again.
      instance.kill();
      await instance.exited;
      this.fail("health_check_timeout", `the app did not answer on its socket within ${this.policy.healthTimeoutMs} ms`);
    }
    // else: it ended; onExit decides.
  }

  private onExit(instance: AppInstance, exit: InstanceExit): void {
    if (this.stopped || instance.stopRequested || instance !== this.instance || this.status.state === "failed") return;
    const how = exit.signal ? `signal ${exit.signal}` : `exit code ${exit.code}`;
    if (exit.oom) return this.fail("memory_exceeded", `the app exceeded its memory limit (${this.spec.manifest.memorySizeMb} MB) and was killed (${how})`);
    const now = Date.now();
    this.crashes = [...this.crashes.filter((at) => now - at < this.policy.crashWindowMs), now];
    if (this.crashes.length > this.policy.maxRestarts)
      return this.fail("crash_loop", `the app ended ${this.crashes.length} times within ${Math.round(this.policy.crashWindowMs / 1000)} s (last: ${how})`);
    this.restarts++;
    const delay = Math.min(this.policy.maxBackoffMs, this.policy.backoffMs * 2 ** (this.crashes.length - 1));
    this.addLog({ at: now, stream: "stderr", line: `[tributary] the instance ended (${how}); restarting in ${delay} ms` });
    this.setStatus({ state: "starting", reason: null, message: `restarting after ${how}`, restarts: this.restarts });
    this.restartTimer = setTimeout(() => void this.launch(), delay);
  }

  private fail(reason: ReplicaFailure, message: string): void {
    this.addLog({ at: Date.now(), stream: "stderr", line: `[tributary] ${message}` });
    this.setStatus({ state: "failed", reason, message, restarts: this.restarts });
  }

  private setStatus(status: ReplicaStatus): void {
    this.status = status;
    if (status.state !== "starting") this.settleFirst({ ...status });
    for (const listener of this.stateListeners) listener({ ...status });
  }

  private addLog(line: LogLine): void {
    this.logs.push(line);
    if (this.logs.length > LOG_LINES_KEPT) this.logs.shift();
    for (const listener of this.logListeners) listener(line);
  }
}
