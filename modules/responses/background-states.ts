import type { HeldCharge } from "../ratelimit/mod.js";
import type { ResponseError, ResponseObject } from "../openai/mod.js";
import type { BackgroundCharge, StoredResponse } from "./response-store.js";

// The states of a background response and every move between them, as pure functions of the
// stored record: the lifecycle (background-lifecycle.ts) applies each one with a compare-and-set
// on the record, so of two moves racing (a cancel and a run starting) exactly one happens.
//
//   queued ──claim──▶ in_progress ──finish──▶ completed | incomplete | failed
//     ▲                 │  │
//     └────requeue──────┘  └──claim again (its host died): in_progress, or failed when it
//                                       streamed or used up its attempts
//   queued | in_progress ──cancel──▶ cancelled     queued | in_progress ──fail──▶ failed
//
// The rate-limit charge taken when the response was queued rides on the record until the move
// that ends the run settles it (and drops it, so it is never settled twice).

/** A settlement due: `usedTokens` against the charge `held`. */
export interface Settlement {
  held: HeldCharge;
  usedTokens: number;
}

/** A move: the record to store, and the settlement it makes (done once the record is stored). */
export interface Transition {
  next: StoredResponse;
  settle?: Settlement;
}

export const isTerminal = (status: ResponseObject["status"]) => status !== "queued" && status !== "in_progress";

/** Why a run started by a host that died is not run again. */
export const STREAM_CUT = "The worker running this response stopped; the response could not be completed.";
export const attemptsUsedUp = (attempts: number) => `The background run was interrupted ${attempts} times; giving up.`;
export const NO_REQUEST = "The background request of this response is missing.";

/** The tokens to settle: what the runs used, or at least the estimate when a run's usage is unknown. */
export function usedTokens(charge: BackgroundCharge, lastRunTokens: number): number {
  const used = charge.spentTokens + lastRunTokens;
  return charge.unmetered ? Math.max(charge.held.tokens, used) : used;
}

/** The record without its charge, and the settlement of that charge (none when it had none). */
function settling(current: StoredResponse, lastRunTokens: number): { rest: StoredResponse; settle?: Settlement } {
  const { charge, ...rest } = current;
  return charge ? { rest, settle: { held: charge.held, usedTokens: usedTokens(charge, lastRunTokens) } } : { rest };
}

export type Claim =
  /** Run it: the record to store (in_progress, one more attempt). */
  | { kind: "run"; next: StoredResponse }
  /** Do not run it: it ends failed with this error. */
  | { kind: "fail"; error: ResponseError }
  /** Nothing to do: it ended already (finished, failed, cancelled). */
  | { kind: "over" };

/**
 * A worker takes the response. Queued: it runs. In progress: the host that ran it died (every
 * other way out of a run leaves it queued or final), so its run starts over, unless its events
 * were already streamed or its attempts are used up; the dead run's usage is unknown.
 */
export function claim(current: StoredResponse, maxAttempts: number): Claim {
  const { status } = current.response;
  if (isTerminal(status)) return { kind: "over" };
  if (!current.request) return { kind: "fail", error: { code: "server_error", message: NO_REQUEST } };
  const attempts = current.attempts ?? 0;
  let charge = current.charge;
  if (status === "in_progress") {
    if (current.request.stream) return { kind: "fail", error: { code: "server_error", message: STREAM_CUT } };
    if (attempts >= maxAttempts) return { kind: "fail", error: { code: "server_error", message: attemptsUsedUp(attempts) } };
    if (charge) charge = { ...charge, unmetered: true };
  }
  const next: StoredResponse = { ...current, attempts: attempts + 1, response: { ...current.response, status: "in_progress" } };
  if (charge) next.charge = charge;
  return { kind: "run", next };
}

/**
 * The user cancels. A queued response is settled now (no run used anything); a running one keeps
 * its charge for its run, which stops at the signal and settles with what it used. Undefined for
 * a response that ended already (cancelling it changes nothing).
 */
export function cancel(current: StoredResponse): Transition | undefined {
  const { status } = current.response;
  if (isTerminal(status)) return undefined;
  const response: ResponseObject = { ...current.response, status: "cancelled" };
  if (status === "in_progress") return { next: { ...current, response } };
  const { rest, settle } = settling(current, 0);
  return { next: { ...rest, response }, settle };
}

/**
 * A run ended with `final` (completed, incomplete, failed; cancelled when it was stopped). A
 * response cancelled meanwhile stays cancelled and keeps the output produced until then.
 * Undefined when the record moved on otherwise (requeued, finished by another run).
 */
export function finish(current: StoredResponse, final: ResponseObject, runTokens: number): Transition | undefined {
  const { status } = current.response;
  if (status !== "in_progress" && status !== "cancelled") return undefined;
  const response: ResponseObject = status === "cancelled" ? { ...final, status: "cancelled", completed_at: null } : final;
  const { rest, settle } = settling(current, runTokens);
  return { next: { ...rest, response }, settle };
}

/**
 * The response cannot run (its request refused, its deadline passed, its attempts used up, the
 * worker giving up on it). Undefined when it ended already.
 */
export function fail(current: StoredResponse, error: ResponseError, runTokens = 0): Transition | undefined {
  if (isTerminal(current.response.status)) return undefined;
  const response: ResponseObject = { ...current.response, status: "failed", error, completed_at: null };
  const { rest, settle } = settling(current, runTokens);
  return { next: { ...rest, response }, settle };
}

/**
 * A run stopped before its end and the response waits for another one: its runner was lost
 * before anyone saw its output (`countsAsAttempt`), or its host is shutting down and hands it
 * back (not an attempt: nothing went wrong with it). What the run used is remembered for the
 * settlement. A response cancelled meanwhile ends as `finish` would end it.
 */
export function requeue(current: StoredResponse, stopped: ResponseObject, runTokens: number, countsAsAttempt: boolean): Transition | undefined {
  if (current.response.status === "cancelled") return finish(current, stopped, runTokens);
  if (current.response.status !== "in_progress") return undefined;
  const attempts = current.attempts ?? 0;
  const next: StoredResponse = {
    ...current,
    attempts: countsAsAttempt ? attempts : Math.max(0, attempts - 1),
    response: { ...current.response, status: "queued" },
  };
  if (current.charge) next.charge = { ...current.charge, spentTokens: current.charge.spentTokens + runTokens };
  return { next };
}
