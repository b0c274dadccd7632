import * as states from "./deployment-states.js";
import type { DeploymentInstance, DeploymentObject } from "./deployments.js";
import type { HostInstanceState } from "./protocol.js";

// The reconciler's decisions, as pure functions: what a deployment's record wants (its desired
// count of instances, where each was placed) against what the app hosts say in their heartbeats
// (which hosts live, what each runs), giving the actions that bring the two together. The
// reconciler (reconciler.ts) gathers the inputs and applies the actions, each a compare-and-set
// on the record or a call to a host; test/unit/app-reconcile.test.ts covers every rule.

/** An app host as the reconciler sees it. */
export interface HostState {
  hostId: string;
  /** Heard within the host timeout. */
  alive: boolean;
  /** Shutting down: its instances are going away. */
  draining: boolean;
  /** May be given an instance now (ready, and it has not refused one lately). */
  accepting: boolean;
  /** What it has left, less the instances placed on it that it has not reported yet. */
  free: { cpuMhz: number; memoryMb: number; gpus: number };
  /** The instances its last heartbeat named. */
  instances: ReadonlyMap<string, { deploymentId: string; state: HostInstanceState; load: number }>;
}

/** What one instance of a deployment takes on a host. */
export interface InstanceNeeds {
  cpuMhz: number;
  memoryMb: number;
  gpus: number;
}

export type Action =
  /** Place a new instance on the host (record it, then tell the host to start it). */
  | { kind: "place"; hostId: string }
  /** The instance no longer runs: its host was lost or is draining, or never started it. Its place is taken by a new one. */
  | { kind: "forget"; instanceId: string; hostId: string; why: "host_lost" | "host_draining" | "not_running" }
  /** More instances run than are wanted: this one drains and stops. */
  | { kind: "retire"; instanceId: string; hostId: string }
  /** No instance ever answered in time: the deployment fails (start_timeout). */
  | { kind: "end"; why: "start_timeout" };

export interface DecideInput {
  deployment: DeploymentObject;
  needs: InstanceNeeds;
  hosts: readonly HostState[];
  /** Seconds (the records' clock). */
  now: number;
  /**
   * The reconciler heard heartbeats for a whole host timeout: a host it has not heard is lost.
   * Before that (just started, or just became the owner) a silent host may not have spoken yet.
   */
  judgeHosts: boolean;
  /** A placed instance its live host has not named this long after its placement was never started (its start call was lost). */
  reportGraceS: number;
}

/**
 * The actions that bring the deployment to its desired count of running instances: forget those
 * that no longer run, place new ones (spread: on the hosts with fewest of its instances, then the
 * most memory free), or retire the surplus (those not serving yet first, then the newest). None
 * for a final deployment.
 */
export function decide(input: DecideInput): Action[] {
  const { deployment: d, now } = input;
  if (states.isFinal(d.status)) return [];
  if (states.startOverdue(d, now)) return [{ kind: "end", why: "start_timeout" }];
  const hosts = new Map(input.hosts.map((h) => [h.hostId, h]));
  const actions: Action[] = [];
  const kept: DeploymentInstance[] = [];
  for (const instance of d.instances) {
    const host = hosts.get(instance.host);
    if (!host?.alive) {
      if (input.judgeHosts) actions.push({ kind: "forget", instanceId: instance.id, hostId: instance.host, why: "host_lost" });
      else kept.push(instance);
      continue;
    }
    if (host.draining) {
      actions.push({ kind: "forget", instanceId: instance.id, hostId: instance.host, why: "host_draining" });
      continue;
    }
    const reported = host.instances.get(instance.id);
    if ((!reported && now - instance.started_at > input.reportGraceS) || reported?.state === "stopping") {
      actions.push({ kind: "forget", instanceId: instance.id, hostId: instance.host, why: "not_running" });
      continue;
    }
    kept.push(instance);
  }
  const missing = d.desired_instances - kept.length;
  if (missing > 0) for (const hostId of spread(missing, kept, input.hosts, input.needs)) actions.push({ kind: "place", hostId });
  if (missing < 0) for (const instance of surplus(kept, -missing)) actions.push({ kind: "retire", instanceId: instance.id, hostId: instance.host });
  return actions;
}

/** Hosts for `count` new instances, one at a time: fewest of the deployment's instances first, then the most memory free. */
function spread(count: number, kept: readonly DeploymentInstance[], hosts: readonly HostState[], needs: InstanceNeeds): string[] {
  const candidates = hosts.filter((h) => h.alive && h.accepting && !h.draining).map((h) => ({ hostId: h.hostId, free: { ...h.free }, mine: kept.filter((i) => i.host === h.hostId).length }));
  const chosen: string[] = [];
  for (let n = 0; n < count; n++) {
    let best: (typeof candidates)[number] | undefined;
    for (const c of candidates) {
      if (c.free.cpuMhz < needs.cpuMhz || c.free.memoryMb < needs.memoryMb || c.free.gpus < needs.gpus) continue;
      if (!best || c.mine < best.mine || (c.mine === best.mine && c.free.memoryMb > best.free.memoryMb)) best = c;
    }
    if (!best) break;
    best.free.cpuMhz -= needs.cpuMhz;
    best.free.memoryMb -= needs.memoryMb;
    best.free.gpus -= needs.gpus;
    best.mine++;
    chosen.push(best.hostId);
  }
  return chosen;
}

const RETIRE_ORDER: Record<DeploymentInstance["status"], number> = { pending: 0, starting: 1, healthy: 2 };

/** The `count` instances to retire: those not serving yet first, then the newest. */
function surplus(kept: readonly DeploymentInstance[], count: number): DeploymentInstance[] {
  return [...kept].sort((a, b) => RETIRE_ORDER[a.status] - RETIRE_ORDER[b.status] || b.started_at - a.started_at).slice(0, count);
}

// ---- Scaling ----

/** The instances the load asks for: requests in flight over the target per instance, within min and max. */
export function recommend(load: number, demand: boolean, scaling: { min_instances: number; max_instances: number; target_inflight: number }): number {
  let wanted = Math.ceil(load / scaling.target_inflight - 1e-9);
  // A request waiting for an instance (a scale-to-zero app's first) wants one.
  if (demand) wanted = Math.max(wanted, 1);
  return Math.min(scaling.max_instances, Math.max(scaling.min_instances, wanted));
}

/** What scaling recommended when (ms). */
export interface ScaleSample {
  at: number;
  instances: number;
}

/**
 * The desired count after this recommendation. Up at once; down only to the highest count
 * recommended over the last `windowMs` (as Kubernetes' HPA stabilizes scale-downs), and only once
 * the reconciler has watched the deployment that long: a burst between quiet spells keeps its
 * instances, and a new owner scales nothing down on what it has not seen. Returns the history to
 * keep (the window's samples).
 */
export function nextDesired(
  current: number,
  recommendation: number,
  history: readonly ScaleSample[],
  now: number,
  windowMs: number,
  watchedSince: number,
): { desired: number; history: ScaleSample[] } {
  const kept = [...history.filter((s) => now - s.at < windowMs), { at: now, instances: recommendation }];
  if (recommendation >= current) return { desired: recommendation, history: kept };
  if (now - watchedSince < windowMs) return { desired: current, history: kept };
  const highest = Math.max(...kept.map((s) => s.instances));
  return { desired: Math.min(current, highest), history: kept };
}
