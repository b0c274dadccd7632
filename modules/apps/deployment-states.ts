import type { DeploymentObject, DeploymentStatus } from "./deployments.js";

// The states of a deployment and every move between them, as pure functions of the deployment
// object: its app host (start, serve, restarted, end), the gateway (a deploy its host did not
// take, a stop when its host is gone) and the sweeper apply each with a compare-and-set on the
// record (DeploymentStore.transition), so of two moves racing exactly one happens.
//
//   pending ──start (its host takes it)──▶ starting ──serve (its instance answers)──▶ healthy
//      │                                     │                                    │  ▲
//      │                                     │                                    └──┘ restarted
//      └─────────────────────────────────────┴──────────┬─────────────────────────┘
//                                                        end
//                                                         ▼
//      failed      its own failure (appFailed: bundle, secrets, crash loop, memory, health check)
//                  or its placement's (placementFailed: host full, host lost, not started in time)
//      stopped     a user's stop, or its host shutting down (stoppedBy)
//      superseded  a newer deployment of its address became healthy (supersededBy)
//
// A final record (failed, stopped, superseded) never moves again. Today the platform's doings (a
// placementFailed, a stoppedBy host_stopped) end the deployment as before; they are the moves a
// reconciler will turn into placing it again, leaving the app's own failures (appFailed) final.

export const isFinal = (status: DeploymentStatus) => status === "failed" || status === "superseded" || status === "stopped";

/** Its host took it and starts its instance. Only from pending (one stopped meanwhile never runs). */
export function start(current: DeploymentObject): DeploymentObject | undefined {
  if (current.status !== "pending") return undefined;
  return { ...current, status: "starting" };
}

/** Its instance answers its health check: it serves, after `restarts` restarts. From any live state. */
export function serve(current: DeploymentObject, restarts: number, at: number): DeploymentObject | undefined {
  if (isFinal(current.status)) return undefined;
  return { ...current, status: "healthy", healthy_at: at, restarts };
}

/** Its instance restarted and answers again: the count of restarts. From any live state. */
export function restarted(current: DeploymentObject, restarts: number): DeploymentObject | undefined {
  if (isFinal(current.status)) return undefined;
  return { ...current, restarts };
}

/** Why the platform could not keep a deployment placed (its host's doing, not the app's). */
export type PlacementFailure = "host_full" | "host_lost" | "start_timeout";

/** How a deployment ends: its final status, why (a reason code and words) and what replaced it. */
export type Ending =
  | { status: "failed"; reason: string; message: string | null }
  | { status: "stopped"; reason: "user_stop" | "host_stopped"; message: string | null }
  | { status: "superseded"; reason: "superseded"; message: string | null; supersededBy: string | null };

/** The app failed for a reason of its own (bundle_invalid, secret_missing, crash_loop, memory_exceeded, health_check_timeout, exited_before_healthy). */
export const appFailed = (reason: string, message: string | null): Ending => ({ status: "failed", reason, message });

/** Its placement failed: its host had no room, went silent, or did not start it in time. */
export const placementFailed = (reason: PlacementFailure, message: string): Ending => ({ status: "failed", reason, message });

/** A user stopped it, or its host shut down. */
export const stoppedBy = (reason: "user_stop" | "host_stopped", message: string | null = null): Ending => ({ status: "stopped", reason, message });

/** A newer deployment of its address (`by`) became healthy. */
export const supersededBy = (by: string | null): Ending => ({ status: "superseded", reason: "superseded", message: by ? `replaced by ${by}` : null, supersededBy: by });

/**
 * It ends as `ending` says; a failed one keeps `lastLogs` (its instance's last lines, the
 * evidence of why). From any live state; undefined for a final record.
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
  };
}

/** A deployment still pending or starting this long after its creation did not start. */
export const START_LIMIT_S = 600;

/**
 * What the sweeper (the backstop of deployments) finds wrong with a live deployment at `now`:
 * its app host went silent, or it did not start in time; undefined when nothing is.
 */
export function verdict(current: DeploymentObject, now: number, hostAlive: boolean): "host_lost" | "start_timeout" | undefined {
  if (isFinal(current.status)) return undefined;
  if (!hostAlive) return "host_lost";
  if ((current.status === "pending" || current.status === "starting") && now - current.created_at > START_LIMIT_S) return "start_timeout";
  return undefined;
}
