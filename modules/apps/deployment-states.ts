import type { DeploymentObject, DeploymentStatus } from "./deployments.js";

// The states of a deployment, its instances, and every move between them, as pure functions of
// the deployment object. The record says what should run (desired_instances) and where each
// instance was placed; the reconciler (reconcile.ts, on one actor host at a time) places and
// forgets instances and sets the count, app hosts report their instances' health and end a
// deployment that fails, the gateway creates and stops. Each applies its move with a
// compare-and-set on the record (DeploymentStore.transition), so of two moves racing exactly one
// happens, and a move finds the record as the other left it.
//
//   pending ──(an instance starts)──▶ starting ──(an instance answers)──▶ healthy
//      │                                │                                   │
//      └────────────────────────────────┴─────────────┬─────────────────────┘
//                                                      end
//                                                       ▼
//      failed      its own failure (appFailed: bundle, secrets, crash loop, memory, health check),
//                  or it never answered within START_LIMIT_S of its creation (start_timeout)
//      stopped     a user's stop
//      superseded  a newer deployment of its address became healthy
//
// A healthy deployment stays healthy while its instances are lost, replaced, scaled, or scaled
// to zero: their own statuses (pending, starting, healthy) say that. Losing an app host, or the
// whole stack stopping, ends no deployment: the reconciler places its instances again.
// A final record (failed, stopped, superseded) never moves again and lists no instances.

export const isFinal = (status: DeploymentStatus) => status === "failed" || status === "superseded" || status === "stopped";

/** An instance placed on `host` (pending until its host starts it). Only for a live deployment. */
export function placeInstance(current: DeploymentObject, instance: { id: string; host: string; at: number }): DeploymentObject | undefined {
  if (isFinal(current.status) || current.instances.some((i) => i.id === instance.id)) return undefined;
  return { ...current, instances: [...current.instances, { id: instance.id, host: instance.host, status: "pending", started_at: instance.at }] };
}

/**
 * Its host starts (or restarts) the instance; the deployment, if still pending, is starting.
 * Undefined when the record no longer lists the instance (forgotten, retired: it must not run).
 */
export function instanceStarting(current: DeploymentObject, instanceId: string): DeploymentObject | undefined {
  if (isFinal(current.status) || !current.instances.some((i) => i.id === instanceId)) return undefined;
  return {
    ...current,
    status: current.status === "pending" ? "starting" : current.status,
    instances: current.instances.map((i) => (i.id === instanceId ? { ...i, status: "starting" } : i)),
  };
}

/**
 * The instance answers its health check; a deployment not yet healthy is, from `at` (its first
 * answering instance makes it serve its address). Undefined when the record no longer lists it.
 */
export function instanceHealthy(current: DeploymentObject, instanceId: string, at: number): DeploymentObject | undefined {
  if (isFinal(current.status) || !current.instances.some((i) => i.id === instanceId)) return undefined;
  const first = current.status !== "healthy";
  return {
    ...current,
    status: "healthy",
    healthy_at: first ? at : current.healthy_at,
    instances: current.instances.map((i) => (i.id === instanceId ? { ...i, status: "healthy" } : i)),
  };
}

/** The instance is no longer placed (its host was lost or stopped it, or it was retired). */
export function dropInstance(current: DeploymentObject, instanceId: string): DeploymentObject | undefined {
  if (!current.instances.some((i) => i.id === instanceId)) return undefined;
  return { ...current, instances: current.instances.filter((i) => i.id !== instanceId) };
}

/** How many instances should run (scaling's decision). Only for a live deployment. */
export function scaleTo(current: DeploymentObject, desired: number): DeploymentObject | undefined {
  if (isFinal(current.status) || current.desired_instances === desired || desired < 0) return undefined;
  return { ...current, desired_instances: desired };
}

/** Its instances restarted `count` more times after crashing (the deployment's running total). */
export function restarted(current: DeploymentObject, count: number): DeploymentObject | undefined {
  if (isFinal(current.status) || count <= 0) return undefined;
  return { ...current, restarts: current.restarts + count };
}

/** How a deployment ends: its final status, why (a reason code and words) and what replaced it. */
export type Ending =
  | { status: "failed"; reason: string; message: string | null }
  | { status: "stopped"; reason: "user_stop"; message: string | null }
  | { status: "superseded"; reason: "superseded"; message: string | null; supersededBy: string | null };

/** The app failed for a reason of its own (bundle_invalid, secret_missing, crash_loop, memory_exceeded, health_check_timeout, exited_before_healthy). */
export const appFailed = (reason: string, message: string | null): Ending => ({ status: "failed", reason, message });

/** It never answered: no instance was healthy within START_LIMIT_S of its creation. */
export const startTimedOut = (): Ending => ({ status: "failed", reason: "start_timeout", message: `no instance answered within ${START_LIMIT_S / 60} minutes of the deploy` });

/** A user stopped it. */
export const stoppedBy = (reason: "user_stop", message: string | null = null): Ending => ({ status: "stopped", reason, message });

/** A newer deployment of its address (`by`) became healthy. */
export const supersededBy = (by: string | null): Ending => ({ status: "superseded", reason: "superseded", message: by ? `replaced by ${by}` : null, supersededBy: by });

/**
 * It ends as `ending` says; a failed one keeps `lastLogs` (its instance's last lines, the
 * evidence of why). From any live state; undefined for a final record. Its instances are no
 * longer placed (their hosts stop them).
 */
export function end(current: DeploymentObject, ending: Ending, at: number, lastLogs: string[] = []): DeploymentObject | undefined {
  if (isFinal(current.status)) return undefined;
  return {
    ...current,
    status: ending.status,
    reason: ending.reason,
    message: ending.message,
    ended_at: at,
    superseded_by: (ending.status === "superseded" ? ending.supersededBy : null) ?? current.superseded_by,
    last_logs: ending.status === "failed" ? lastLogs : [],
    instances: [],
  };
}

/** A deployment none of whose instances answered this long after its creation did not start. */
export const START_LIMIT_S = 600;

/** True when a deployment that never served has had START_LIMIT_S to start (`now` in seconds). */
export const startOverdue = (current: DeploymentObject, now: number) => !isFinal(current.status) && current.healthy_at === null && now - current.created_at > START_LIMIT_S;
