// The states of a sandbox and every move between them, as pure functions of the sandbox object:
// the gateway (create, stop, extend), the sandbox host (started, ended) and the sweeper apply
// each with a compare-and-set on the record (SandboxStore.transition), so of two moves racing
// (a user's stop and the host seeing the sandbox exit) exactly one ends it.
//
//   starting ──start──▶ running ──stopping (a user's stop or delete)──▶ stopping
//      │                  │                                              │
//      └──────────────────┴──────────────end──────────────────────────────┴──▶ stopped | failed
//
// `end` names why (the termination reason): a failure (oom, host_lost, error) ends it as failed,
// anything else (user_stop, deleted, timeout, idle) as stopped. `extend` moves a live sandbox's
// deadline. A final record (stopped, failed) never moves again.

export const SANDBOX_STATUSES = ["starting", "running", "stopping", "stopped", "failed"] as const;
export type SandboxStatus = (typeof SANDBOX_STATUSES)[number];
export const TERMINATION_REASONS = ["user_stop", "deleted", "timeout", "idle", "oom", "host_lost", "error"] as const;
export type TerminationReason = (typeof TERMINATION_REASONS)[number];

/** The fields of a sandbox object that its life moves (records.ts holds the whole object). */
export interface SandboxLife {
  status: SandboxStatus;
  termination_reason: TerminationReason | null;
  /** Why it failed, in words. */
  error: string | null;
  created_at: number;
  started_at: number | null;
  expires_at: number;
  stopped_at: number | null;
  timeout_seconds: number;
}

export const isFinal = (status: SandboxStatus) => status === "stopped" || status === "failed";

const FAILURES: ReadonlySet<TerminationReason> = new Set(["oom", "host_lost", "error"]);

/** Its host started it. Only from starting (a sandbox stopped while it started does not run on). */
export function start<S extends SandboxLife>(current: S, at: number): S | undefined {
  if (current.status !== "starting") return undefined;
  return { ...current, status: "running", started_at: at };
}

/** A user stops or deletes it: its host is asked to end it. From starting or running; undefined otherwise. */
export function stopping<S extends SandboxLife>(current: S): S | undefined {
  if (current.status !== "starting" && current.status !== "running") return undefined;
  return { ...current, status: "stopping" };
}

/**
 * It ended for `reason` (a failure reason ends it as failed, any other as stopped), with
 * `error` in words when given. From any live state; undefined for a final record.
 */
export function end<S extends SandboxLife>(current: S, reason: TerminationReason, at: number, error: string | null = null): S | undefined {
  if (isFinal(current.status)) return undefined;
  return { ...current, status: FAILURES.has(reason) ? "failed" : "stopped", termination_reason: reason, stopped_at: at, error: error ?? current.error };
}

/** Its deadline moves to `expiresAt` (its timeout counted from its creation). From any live state. */
export function extend<S extends SandboxLife>(current: S, expiresAt: number): S | undefined {
  if (isFinal(current.status)) return undefined;
  return { ...current, expires_at: expiresAt, timeout_seconds: expiresAt - current.created_at };
}

/** A sandbox still starting this long after its creation did not start. */
export const START_LIMIT_S = 120;
/** Past its deadline by this much, a sandbox its live host did not end is stopped by the sweeper. */
export const EXPIRY_GRACE_S = 5;

/**
 * What the sweeper (the backstop of lifetimes) finds wrong with a live sandbox at `now`: its
 * host went silent, it is stuck starting, or it is past its deadline; undefined when nothing is.
 */
export function verdict(current: SandboxLife, now: number, hostAlive: boolean): "host_lost" | "stuck" | "expired" | undefined {
  if (!hostAlive) return "host_lost";
  if (current.status === "starting" && now - current.created_at > START_LIMIT_S) return "stuck";
  if (now > current.expires_at + EXPIRY_GRACE_S) return "expired";
  return undefined;
}
