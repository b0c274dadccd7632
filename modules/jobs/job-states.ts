import type { ExecEvent } from "../sandboxes/mod.js";
import type { JobObject, JobStatus } from "./job-store.js";

// The states of a job and every move between them, as pure functions of the job object: the job
// runner (and the cancel route) apply each with a compare-and-set on the record, so a job ends in
// exactly one final state whatever races (a cancel, a redelivery to another worker after one died).
//
//   queued ──start──▶ running ──runEnded──▶ succeeded | failed
//     ▲                │  │ └──runEnded (a failure, retries left)──▶ queued
//     │                │  └──start (redelivered: its worker died; the next attempt)──▶ running
//     │                └──cancel (the user)──▶ cancelling ──stopped (by its worker)──▶ cancelled
//     └──cancel (the user)──▶ cancelled
//   queued | running | cancelling ──fail (attempts used up, its input or secret gone)──▶ failed
//   queued | running | cancelling ──stopped (a cancel seen by the worker)──▶ cancelled
//   queued ──waiting (no room for its sandbox yet)──▶ queued, its waiting_reason saying why (cleared on leaving queued)
//
// A final record (succeeded, failed, cancelled) never moves again.

export type JobError = NonNullable<JobObject["error"]>;

export const isFinal = (status: JobStatus) => status === "succeeded" || status === "failed" || status === "cancelled";

/** What a worker does with a delivery of the job's queue message. */
export type Delivery =
  /** Nothing: the job is final. */
  | { kind: "over" }
  /** It was cancelled: it ends cancelled (stopped) without running. */
  | { kind: "cancel" }
  /** Its attempts are used up (a worker died in each): it fails (fail) with this error. */
  | { kind: "fail"; error: JobError }
  /** Run attempt `attempt` (a delivery after a worker died mid-run counts as the next attempt). */
  | { kind: "run"; attempt: number };

export function deliver(job: JobObject, cancelRequested: boolean): Delivery {
  if (isFinal(job.status)) return { kind: "over" };
  if (job.status === "cancelling" || cancelRequested) return { kind: "cancel" };
  const attempt = job.attempt + 1;
  if (attempt > job.max_retries + 1) return { kind: "fail", error: { code: "attempts_exhausted", message: `The job failed ${job.attempt} times.` } };
  return { kind: "run", attempt };
}

/** How a run's command ended, for its job. */
export type RunEnd =
  | { kind: "succeeded" }
  /** It failed; `retryable`: another attempt may do better (the job runs again while it has retries left). */
  | { kind: "failed"; error: JobError; exitCode: number | null; retryable: boolean };

/** The run ended before its command started, or its sandbox's host was lost while it ran. */
export const hostLost = (message: string): RunEnd => ({ kind: "failed", error: { code: "host_lost", message }, exitCode: null, retryable: true });

/** What the last event of the command's exec says (undefined: not an end; the delivery is tried again). */
export function runEnd(event: ExecEvent, timeoutSeconds: number): RunEnd | undefined {
  if (event.t === "error") return hostLost("The sandbox ended while the command ran.");
  if (event.t !== "exit") return undefined;
  if (event.timed_out) return { kind: "failed", error: { code: "timeout", message: `The command ran past its timeout of ${timeoutSeconds} s.` }, exitCode: null, retryable: false };
  if (event.exit_code === 0) return { kind: "succeeded" };
  const what = event.exit_code === null ? `was killed by ${event.signal ?? "a signal"}${event.oom_killed ? " (out of memory)" : ""}` : `exited with code ${event.exit_code}`;
  return { kind: "failed", error: { code: event.oom_killed ? "oom" : "exit_code", message: `The command ${what}.` }, exitCode: event.exit_code, retryable: true };
}

/** The job runs again after this end of attempt `attempt`: a retryable failure with retries left. */
export const triesAgain = (job: JobObject, attempt: number, end: RunEnd) => end.kind === "failed" && end.retryable && attempt <= job.max_retries;

/**
 * The files the command left become the job's outputs: its run ends the job (it succeeded, or
 * it failed on its last attempt) and the command ran to its exit (it neither timed out nor lost
 * its sandbox).
 */
export function keepsOutputs(job: JobObject, attempt: number, end: RunEnd): boolean {
  if (end.kind === "succeeded") return true;
  return (end.error.code === "exit_code" || end.error.code === "oom") && !triesAgain(job, attempt, end);
}

/**
 * Its worker could not start it (no sandbox host with room, the project's sandboxes at their
 * limit): it stays queued, saying why. From queued only; undefined when it says so already.
 */
export function waiting(job: JobObject, reason: string): JobObject | undefined {
  if (job.status !== "queued" || job.waiting_reason === reason) return undefined;
  return { ...job, waiting_reason: reason };
}

/** Attempt `attempt` starts in sandbox `sandboxId`. From queued, or running (a redelivery after its worker died). */
export function start(job: JobObject, attempt: number, sandboxId: string, at: number): JobObject | undefined {
  if (job.status !== "queued" && job.status !== "running") return undefined;
  return { ...job, status: "running", attempt, sandbox_id: sandboxId, started_at: job.started_at ?? at, waiting_reason: null };
}

/** The project files its command left. Undefined for a final job. */
export function withOutputs(job: JobObject, fileIds: string[]): JobObject | undefined {
  if (isFinal(job.status)) return undefined;
  return { ...job, output_files: fileIds };
}

/**
 * Attempt `attempt` ended: the job succeeds, fails, or (a retryable failure with retries left)
 * is queued again with the failure on it. Undefined for a final job; a job cancelling meanwhile
 * is not queued again (its next delivery stops it).
 */
export function runEnded(job: JobObject, attempt: number, end: RunEnd, at: number): JobObject | undefined {
  if (isFinal(job.status)) return undefined;
  if (end.kind === "succeeded") return { ...job, status: "succeeded", exit_code: 0, error: null, finished_at: at, waiting_reason: null };
  if (triesAgain(job, attempt, end)) return job.status === "running" ? { ...job, status: "queued", exit_code: end.exitCode, error: end.error } : undefined;
  return { ...job, status: "failed", exit_code: end.exitCode, error: end.error, finished_at: at, waiting_reason: null };
}

/** It cannot run (attempts used up, an input file or a secret gone): it fails, its last exit code kept. Undefined for a final job. */
export function fail(job: JobObject, error: JobError, at: number): JobObject | undefined {
  if (isFinal(job.status)) return undefined;
  return { ...job, status: "failed", error, finished_at: at, waiting_reason: null };
}

/** A worker saw its cancel (before or while it ran): it ends cancelled. Undefined for a final job. */
export function stopped(job: JobObject, at: number): JobObject | undefined {
  if (isFinal(job.status)) return undefined;
  return { ...job, status: "cancelled", error: null, finished_at: at, waiting_reason: null };
}

/**
 * The user cancels: a queued job is cancelled at once (the error of an earlier attempt kept), a
 * running one goes cancelling (its worker stops it). Undefined otherwise: cancelling or final
 * already, nothing changes.
 */
export function cancel(job: JobObject, at: number): JobObject | undefined {
  if (job.status === "queued") return { ...job, status: "cancelled", finished_at: at, waiting_reason: null };
  if (job.status === "running") return { ...job, status: "cancelling" };
  return undefined;
}
