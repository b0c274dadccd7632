import type { DomainError } from "../../modules/errors/mod.js";

// What becomes of the connection when an answer goes out while its request body still arrives
// (a 401, a 404, an early error, a 413 for a declared length), or when a relayed response (a
// hosted app's) ends before its request body did. The exchange (exchange.ts) does what is decided.
//
//   keep    nothing is left to read: the connection stays open for the next request
//   drain   the rest is small enough (drainBodyBytes): read and dropped; the answer says
//           `Connection: close`, so the client is never reset while it still sends
//   linger  as drain, for an answer that closes the connection: it goes out once the rest is in
//   hold    the rest is too large to drain (or its length unknown): reading stops, the answer says
//           `Connection: close`, uWS closes the connection at its 10 s timeout (holdUnread)
//   close   the answer closes the connection at once (past maxHeldConnections, a client still
//           sending may lose it to the reset)

export type AnswerEnding = "keep" | "drain" | "linger" | "hold" | "close";

/** How long an answer that closes the connection waits for a rest it may drain (no body timeout set). */
export const LINGER_MS = 10_000;

/**
 * How long a held connection is counted: uWS closes it at its 10 s timeout, whose timers tick
 * every 4 s (so 8-12 s after the answer), and a paused socket does not notice its client leave
 * sooner. Counting a little longer keeps the count an upper bound.
 */
const HELD_COUNTED_MS = 13_000;

/** Errors whose request is not worth keeping the connection for: the answer closes it. */
const CLOSING_ERRORS: ReadonlySet<DomainError["_tag"]> = new Set(["TooLarge", "RequestTimeout", "HeadersTooLarge", "AmbiguousRequest", "TooManyConnections"]);

/** Whether the error's answer closes the connection. */
export const closesConnection = (err: DomainError): boolean => CLOSING_ERRORS.has(err._tag);

/** Connections held unread in this process (an upper bound, see HELD_COUNTED_MS). */
let held = 0;
export const heldConnections = (): number => held;

/**
 * Counts one more held connection unless `max` are held already (false: the caller closes
 * instead). Each held connection keeps up to its socket's receive buffer of unread input in the
 * kernel, which nothing else bounds.
 */
export function tryHoldConnection(max: number): boolean {
  if (held >= max) return false;
  held++;
  setTimeout(() => held--, HELD_COUNTED_MS).unref();
  return true;
}

/**
 * An answer's ending. `rest` is the body still to come (undefined: none, or all read);
 * `closeConnection` says the answer closes the connection anyway; `lingerOnClose` that such an
 * answer first takes a rest small enough to drain (a 413: its client is still sending and waits
 * for the answer); `hold` holds the connection if it may.
 */
export function answerEnding(
  rest: { remaining: number } | undefined,
  options: { closeConnection: boolean; lingerOnClose: boolean; drainBodyBytes: number },
  hold: () => boolean,
): AnswerEnding {
  if (!rest) return options.closeConnection ? "close" : "keep";
  if (rest.remaining > options.drainBodyBytes) return hold() ? "hold" : "close";
  if (!options.closeConnection) return "drain";
  return options.lingerOnClose ? "linger" : "close";
}

/**
 * The ending of a relayed response whose request body still arrives: the app answered without
 * reading all of it, and nothing will. Buffering what comes would grow without bound once the
 * response is over (nothing may pause the socket then), so the rest is dropped as it comes when
 * it is small enough to drain, held unread when larger or of unknown length, and past
 * maxHeldConnections the connection closes with the answer (at once: relayed frames arrive from
 * NATS or after a writable event, never while uWS is reading the request).
 */
export function relayedEnding(rest: { remaining: number } | undefined, drainBodyBytes: number, hold: () => boolean): "keep" | "hold" | "close" {
  if (!rest || rest.remaining <= drainBodyBytes) return "keep";
  return hold() ? "hold" : "close";
}
