import type { NatsConnection, Subscription } from "@nats-io/transport-node";
import { subjects } from "../../lib/nats/subjects.js";
import type { AppHostOffer, AppManifest } from "./manifest.js";
import { appHostHeartbeat, type AppHostHeartbeat } from "./protocol.js";

// The app hosts a process hears (a gateway, the reconciler): each host's capacity and liveness,
// and the instances it runs, from their heartbeats. Gateways send a hosted request to an instance
// found here (those that answer, on a live host that is not draining); the reconciler compares
// what runs with what the records want.

export interface HostView extends AppHostHeartbeat {
  /** performance.now() when its last heartbeat arrived. */
  lastSeen: number;
}

/** An instance a request may go to. */
export interface ServingInstance {
  instanceId: string;
  hostId: string;
}

/** A host silent this many host timeouts is forgotten (it is long gone; its id never comes back). */
const FORGET_AFTER_TIMEOUTS = 12;

export class AppHostDirectory {
  private readonly hosts = new Map<string, HostView>();
  /** Deployment id → its healthy instances (instance id → host id), as the hosts last said. */
  private readonly serving = new Map<string, Map<string, string>>();
  /** Woken by a heartbeat naming a healthy instance of the deployment. */
  private readonly waiters = new Map<string, Set<() => void>>();
  private subscription: Subscription | undefined;
  private listeningSince = 0;

  constructor(private readonly nc: NatsConnection, readonly hostTimeoutMs: number) {}

  start(): void {
    this.listeningSince = performance.now();
    this.subscription = this.nc.subscribe(subjects.appHostHeartbeat, {
      callback: (err, msg) => {
        if (err) return;
        let beat: AppHostHeartbeat;
        try {
          beat = appHostHeartbeat.parseBytes(msg.subject, msg.data);
        } catch {
          return; // a heartbeat that does not decode leaves the host looking silent
        }
        this.heard(beat);
      },
    });
  }

  stop(): void {
    this.subscription?.unsubscribe();
    for (const set of this.waiters.values()) for (const wake of set) wake();
    this.waiters.clear();
  }

  /** Takes in one heartbeat (what the subscription does with each). */
  heard(beat: AppHostHeartbeat): void {
    const now = performance.now();
    const previous = this.hosts.get(beat.host_id);
    for (const i of previous?.instances ?? []) this.serving.get(i.deployment_id)?.delete(i.instance_id);
    this.hosts.set(beat.host_id, { ...beat, lastSeen: now });
    const woken = new Set<string>();
    for (const i of beat.instances) {
      if (i.state !== "healthy") continue;
      let set = this.serving.get(i.deployment_id);
      if (!set) this.serving.set(i.deployment_id, (set = new Map()));
      set.set(i.instance_id, beat.host_id);
      woken.add(i.deployment_id);
    }
    for (const id of previous?.instances ?? []) if (this.serving.get(id.deployment_id)?.size === 0) this.serving.delete(id.deployment_id);
    for (const id of woken) {
      const set = this.waiters.get(id);
      if (!set) continue;
      this.waiters.delete(id);
      for (const wake of set) wake();
    }
    if (!previous) this.forgetSilent(now);
  }

  private forgetSilent(now: number): void {
    for (const h of this.hosts.values()) {
      if (now - h.lastSeen <= FORGET_AFTER_TIMEOUTS * this.hostTimeoutMs) continue;
      this.hosts.delete(h.host_id);
      for (const i of h.instances) this.serving.get(i.deployment_id)?.delete(i.instance_id);
    }
  }

  alive(hostId: string): boolean {
    const h = this.hosts.get(hostId);
    return h !== undefined && performance.now() - h.lastSeen <= this.hostTimeoutMs;
  }

  /** True when the host's latest heartbeat arrived after `since` (performance.now() ms). */
  heardSince(hostId: string, since: number): boolean {
    return (this.hosts.get(hostId)?.lastSeen ?? -Infinity) > since;
  }

  /** How long this directory has listened: a host not heard within its first host timeout may just not have spoken yet. */
  listeningMs(): number {
    return this.listeningSince === 0 ? 0 : performance.now() - this.listeningSince;
  }

  /** Every host heard (live or not), as last heard. */
  views(): HostView[] {
    return [...this.hosts.values()];
  }

  /** The largest instance a live app host could run (its totals); undefined when none is alive. */
  offer(): AppHostOffer | undefined {
    let out: AppHostOffer | undefined;
    for (const h of this.hosts.values()) {
      if (!this.alive(h.host_id)) continue;
      out = { maxCpuMhz: Math.max(out?.maxCpuMhz ?? 0, h.cpu_mhz_total), maxMemoryMb: Math.max(out?.maxMemoryMb ?? 0, h.memory_mb_total), maxGpuCount: Math.max(out?.maxGpuCount ?? 0, h.gpu_count) };
    }
    return out;
  }

  /** True when a live, ready host has room for one instance of the manifest now. */
  fits(manifest: Pick<AppManifest, "cpuMhz" | "memorySizeMb" | "gpuCount">): boolean {
    for (const h of this.hosts.values())
      if (this.alive(h.host_id) && h.state === "ready" && h.cpu_mhz_free >= manifest.cpuMhz && h.memory_mb_free >= manifest.memorySizeMb && h.gpu_count >= manifest.gpuCount) return true;
    return false;
  }

  /** The deployment's instances that answer, on live hosts that are not draining. */
  servingInstances(deploymentId: string): ServingInstance[] {
    const set = this.serving.get(deploymentId);
    if (!set) return [];
    const out: ServingInstance[] = [];
    for (const [instanceId, hostId] of set) if (this.alive(hostId) && this.hosts.get(hostId)!.state === "ready") out.push({ instanceId, hostId });
    return out;
  }

  /** Resolves at the next heartbeat naming a healthy instance of the deployment, or after `timeoutMs`. */
  nextServing(deploymentId: string, timeoutMs: number): Promise<void> {
    return new Promise((resolve) => {
      let set = this.waiters.get(deploymentId);
      if (!set) this.waiters.set(deploymentId, (set = new Set()));
      const wake = () => {
        clearTimeout(timer);
        const set = this.waiters.get(deploymentId);
        if (set?.delete(wake) && set.size === 0) this.waiters.delete(deploymentId);
        resolve();
      };
      const timer = setTimeout(wake, timeoutMs);
      set.add(wake);
    });
  }
}
