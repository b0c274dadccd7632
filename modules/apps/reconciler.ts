import type { NatsConnection, Subscription } from "@nats-io/transport-node";
import { newId } from "../../lib/ids.js";
import type { Logger } from "../../lib/log.js";
import type { Versioned } from "../../lib/nats/kv-records.js";
import { subjects } from "../../lib/nats/subjects.js";
import * as states from "./deployment-states.js";
import { nowSeconds, type DeploymentStore, type StoredDeployment } from "./deployments.js";
import type { AppHostDirectory } from "./host-directory.js";
import { appDemand, appHostReply, encodeJson, endedEvent, refusalOf, type AppHostCall } from "./protocol.js";
import { decide, nextDesired, recommend, type Action, type HostState, type ScaleSample } from "./reconcile.js";

// The reconciler of hosted-app deployments, run by the one actor host that owns it at a time
// (actors/apps/deployment-reconciler.ts): it follows every deployment record (a KV watch), hears
// the app hosts' heartbeats (AppHostDirectory) and the gateways' demand for an app with no
// instance, and brings each live deployment to what its record wants (reconcile.ts decides):
// it places instances on live hosts and tells them to start, forgets instances whose host was
// lost, sets the desired count from the load, retires the surplus, and stops instances that no
// record wants. Every change to a record is a compare-and-set, so an app host's report and a
// reconciler's move never overwrite each other; two reconcilers for a moment (one taking over
// from one that only seemed dead) at worst place an instance too many, which the next round
// retires.

export interface ReconcilerOptions {
  /** An app host silent this long is lost (also: how long a placed instance may go unreported). */
  hostTimeoutMs: number;
  /** Scaling down waits for this long a window of lower recommendations. */
  scaleDownDelayMs: number;
  /** Longest wait for a host to answer a start. */
  rpcTimeoutMs: number;
  /** A host that refused an instance is not asked again for this long. */
  refusalBackoffMs: number;
}

/** How long a gateway's demand for a deployment counts (it repeats it while its request waits). */
const DEMAND_MS = 3_000;
/** An instance no record lists is checked again (a KV read) at most this often. */
const UNWANTED_RECHECK_MS = 5_000;

export class DeploymentReconciler {
  /** Live deployments by id, as last read or written. */
  private readonly live = new Map<string, Versioned<StoredDeployment>>();
  /** Deployments whose actions are being applied, and those to decide again once they are. */
  private readonly busy = new Set<string>();
  private readonly again = new Set<string>();
  private readonly demandUntil = new Map<string, number>();
  private readonly scaling = new Map<string, { since: number; history: ScaleSample[] }>();
  private readonly refusedUntil = new Map<string, number>();
  private readonly unwantedChecked = new Map<string, number>();
  private stopWatch: (() => void) | undefined;
  private demand: Subscription | undefined;
  private running = false;

  constructor(
    private readonly nc: NatsConnection,
    private readonly store: DeploymentStore,
    private readonly hosts: AppHostDirectory,
    private readonly options: ReconcilerOptions,
    private readonly log: Logger,
  ) {}

  async start(): Promise<void> {
    this.running = true;
    this.demand = this.nc.subscribe(subjects.appDemand, {
      callback: (err, msg) => {
        if (err) return;
        try {
          const { deployment_id: id } = appDemand.parseBytes(msg.subject, msg.data);
          if (!this.live.has(id)) return;
          this.demandUntil.set(id, Date.now() + DEMAND_MS);
          this.soon(id);
        } catch {
          // not a demand
        }
      },
    });
    this.stopWatch = await this.store.watchDeployments((record) => this.observed(record));
  }

  stop(): void {
    this.running = false;
    this.stopWatch?.();
    this.demand?.unsubscribe();
    this.live.clear();
    this.scaling.clear();
  }

  /** One round: every live deployment, then instances no record wants. */
  async tick(): Promise<void> {
    if (!this.running) return;
    const now = Date.now();
    for (const [host, until] of this.refusedUntil) if (until <= now) this.refusedUntil.delete(host);
    for (const [id, until] of this.demandUntil) if (until <= now) this.demandUntil.delete(id);
    // One view of the hosts for the round: each placement takes its share of it at once.
    const hosts = this.hostStates(now);
    await Promise.all([...this.live.keys()].map((id) => this.reconcile(id, hosts)));
    await this.stopUnwanted(now);
  }

  /** A record as the watch delivers it (or a write of ours returned it). */
  private observed(record: Versioned<StoredDeployment>): void {
    const id = record.value.deployment.id;
    const known = this.live.get(id);
    if (known && known.revision >= record.revision) return;
    if (states.isFinal(record.value.deployment.status)) {
      this.live.delete(id);
      this.scaling.delete(id);
      this.demandUntil.delete(id);
      return;
    }
    this.live.set(id, record);
    this.soon(id);
  }

  private soon(id: string): void {
    if (this.running) void this.reconcile(id);
  }

  private async reconcile(id: string, hosts?: HostState[]): Promise<void> {
    if (this.busy.has(id)) {
      this.again.add(id);
      return;
    }
    this.busy.add(id);
    try {
      await this.reconcileOnce(id, hosts);
    } catch (err) {
      this.log.warn("app deployment reconcile failed", { deploymentId: id, err });
    } finally {
      this.busy.delete(id);
      if (this.again.delete(id)) this.soon(id);
    }
  }

  private async reconcileOnce(id: string, roundHosts: HostState[] | undefined): Promise<void> {
    let record = this.live.get(id);
    if (!record || !this.running) return;
    const nowMs = Date.now();
    const hosts = roundHosts ?? this.hostStates(nowMs);
    const judgeHosts = this.hosts.listeningMs() > this.options.hostTimeoutMs;
    const desired = this.scale(record.value, hosts, nowMs);
    if (desired !== record.value.deployment.desired_instances) {
      record = await this.write(record.value, (cur) => states.scaleTo(cur, desired));
      if (!record) return;
      this.log.info("app deployment scaled", { deploymentId: id, instances: desired });
    }
    const { manifest } = record.value;
    const actions = decide({
      deployment: record.value.deployment,
      needs: { cpuMhz: manifest.cpuMhz, memoryMb: manifest.memorySizeMb, gpus: manifest.gpuCount },
      hosts,
      now: Math.floor(nowMs / 1000),
      judgeHosts,
      reportGraceS: Math.ceil(this.options.hostTimeoutMs / 1000),
    });
    for (const action of actions) {
      if (action.kind !== "place") continue;
      const host = hosts.find((h) => h.hostId === action.hostId)!;
      host.free.cpuMhz -= manifest.cpuMhz;
      host.free.memoryMb -= manifest.memorySizeMb;
      host.free.gpus -= manifest.gpuCount;
    }
    for (const action of actions) {
      const current = this.live.get(id);
      if (!current || !this.running) return;
      await this.act(current.value, action);
    }
  }

  /** The desired count of instances now (unchanged for a deployment not yet serving). */
  private scale(record: StoredDeployment, hosts: HostState[], nowMs: number): number {
    const d = record.deployment;
    if (d.status !== "healthy") return d.desired_instances;
    let load = 0;
    const placed = new Set(d.instances.map((i) => i.id));
    for (const h of hosts) if (h.alive) for (const [instanceId, i] of h.instances) if (placed.has(instanceId) && i.state !== "stopping") load += i.load;
    const recommendation = recommend(load, (this.demandUntil.get(d.id) ?? 0) > nowMs, d.scaling);
    let watch = this.scaling.get(d.id);
    if (!watch) this.scaling.set(d.id, (watch = { since: nowMs, history: [] }));
    const next = nextDesired(d.desired_instances, recommendation, watch.history, nowMs, this.options.scaleDownDelayMs, watch.since);
    watch.history = next.history;
    return next.desired;
  }

  private async act(record: StoredDeployment, action: Action): Promise<void> {
    const { project, deployment } = record;
    switch (action.kind) {
      case "place": {
        const instanceId = newId("ins_", 16);
        const placed = await this.write(record, (cur) => states.placeInstance(cur, { id: instanceId, host: action.hostId, at: nowSeconds() }));
        if (!placed) return;
        const call: AppHostCall = { op: "start_instance", project, deployment_id: deployment.id, instance_id: instanceId };
        let refusal: string | undefined;
        try {
          const reply = appHostReply.parseBytes("app host", (await this.nc.request(subjects.appHostRpc(action.hostId), encodeJson(call), { timeout: this.options.rpcTimeoutMs })).data);
          if (!reply.ok) refusal = reply.message ?? "refused";
        } catch (err) {
          refusal = (err as Error).message;
        }
        if (refusal === undefined) {
          this.log.info("app instance placed", { deploymentId: deployment.id, instanceId, hostId: action.hostId });
          return;
        }
        // Another host gets it, next round; a host without room is left alone for a while.
        if (refusalOf(refusal) !== "unwanted") this.refusedUntil.set(action.hostId, Date.now() + this.options.refusalBackoffMs);
        this.log.info("app host did not take an instance", { deploymentId: deployment.id, hostId: action.hostId, reason: refusal });
        await this.write(placed.value, (cur) => states.dropInstance(cur, instanceId));
        this.again.add(deployment.id);
        return;
      }
      case "forget":
        if (await this.write(record, (cur) => states.dropInstance(cur, action.instanceId)))
          this.log.info("app instance lost; placing another", { deploymentId: deployment.id, instanceId: action.instanceId, hostId: action.hostId, why: action.why });
        return;
      case "retire":
        if (!(await this.write(record, (cur) => states.dropInstance(cur, action.instanceId)))) return;
        this.tell(action.hostId, { op: "stop_instance", project, deployment_id: deployment.id, instance_id: action.instanceId, reason: "retired" });
        this.log.info("app instance retired", { deploymentId: deployment.id, instanceId: action.instanceId, hostId: action.hostId });
        return;
      case "end": {
        const ended = await this.write(record, (cur) => states.end(cur, states.startTimedOut(), nowSeconds()));
        if (!ended) return;
        for (const hostId of new Set(deployment.instances.map((i) => i.host))) this.tell(hostId, { op: "stop", project, deployment_id: deployment.id, reason: "failed" });
        this.nc.publish(subjects.appLogs(deployment.id), endedEvent("failed"));
        this.log.warn("app deployment failed", { deploymentId: deployment.id, reason: "start_timeout" });
        return;
      }
    }
  }

  /** Applies a move to the record; the record after it, when the move happened (undefined otherwise). */
  private async write(record: StoredDeployment, move: Parameters<DeploymentStore["apply"]>[2]): Promise<Versioned<StoredDeployment> | undefined> {
    const result = await this.store.apply(record.project, record.deployment.id, move);
    if (!result) return undefined;
    this.observed({ value: result.value, revision: result.revision });
    return result.changed ? this.live.get(record.deployment.id) ?? { value: result.value, revision: result.revision } : undefined;
  }

  private tell(hostId: string, call: AppHostCall): void {
    this.nc.publish(subjects.appHostRpc(hostId), encodeJson(call));
  }

  /**
   * The hosts as decide() reads them: a host's free capacity less what was placed on it that it
   * has not reported yet (its heartbeat lags the placements).
   */
  private hostStates(nowMs: number): HostState[] {
    const out = new Map<string, HostState>();
    for (const h of this.hosts.views()) {
      out.set(h.host_id, {
        hostId: h.host_id,
        alive: this.hosts.alive(h.host_id),
        draining: h.state === "draining",
        accepting: h.state === "ready" && (this.refusedUntil.get(h.host_id) ?? 0) <= nowMs,
        free: { cpuMhz: h.cpu_mhz_free, memoryMb: h.memory_mb_free, gpus: h.gpu_count },
        instances: new Map(h.instances.map((i) => [i.instance_id, { deploymentId: i.deployment_id, state: i.state, load: i.load }])),
      });
    }
    for (const { value } of this.live.values())
      for (const i of value.deployment.instances) {
        const host = out.get(i.host);
        if (!host || host.instances.has(i.id)) continue;
        host.free.cpuMhz -= value.manifest.cpuMhz;
        host.free.memoryMb -= value.manifest.memorySizeMb;
        host.free.gpus -= value.manifest.gpuCount;
      }
    return [...out.values()];
  }

  /**
   * Instances hosts run that no record wants (their deployment ended, or they were forgotten while
   * their host was out of reach): read the record afresh, and stop those it does not list.
   */
  private async stopUnwanted(nowMs: number): Promise<void> {
    for (const [id, at] of this.unwantedChecked) if (nowMs - at > UNWANTED_RECHECK_MS) this.unwantedChecked.delete(id);
    const checks: Array<Promise<void>> = [];
    for (const h of this.hosts.views()) {
      if (!this.hosts.alive(h.host_id)) continue;
      for (const i of h.instances) {
        if (i.state === "stopping" || this.unwantedChecked.has(i.instance_id)) continue;
        if (this.live.get(i.deployment_id)?.value.deployment.instances.some((p) => p.id === i.instance_id)) continue;
        this.unwantedChecked.set(i.instance_id, nowMs);
        checks.push(
          (async () => {
            const record = await this.store.get(i.project, i.deployment_id);
            if (record?.deployment.instances.some((p) => p.id === i.instance_id)) return;
            this.tell(h.host_id, { op: "stop_instance", project: i.project, deployment_id: i.deployment_id, instance_id: i.instance_id, reason: "unwanted" });
            this.log.info("stopping an app instance no deployment wants", { deploymentId: i.deployment_id, instanceId: i.instance_id, hostId: h.host_id });
          })().catch((err) => this.log.warn("app instance check failed", { instanceId: i.instance_id, err })),
        );
      }
    }
    await Promise.all(checks);
  }
}
