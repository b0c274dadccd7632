// Which NATS client errors mean "the fabric is failing over", not "this request is wrong": a
// server that died mid-request, a JetStream stream or the meta group electing a leader, a node
// still starting, a cluster without quorum. Another attempt a moment later may succeed.
// modules/errors maps them to 503s; start-up retries them (setup-retry.ts).

/** The client's names for an outage (nats.js names its errors by class). */
const OUTAGE_NAMES = new Set(["TimeoutError", "JetStreamNotEnabled", "NoRespondersError", "ConnectionError", "ClosedConnectionError", "DrainingConnectionError"]);

/**
 * JetStream API errors a cluster answers while it cannot place or serve a request yet, by
 * err_code: no suitable peers for placement (replicas' nodes down), the cluster cannot handle the
 * request (no leader), the stream is offline. 503s (temporarily unavailable, insufficient
 * resources, not current) are outages whatever their code.
 */
const CLUSTER_NOT_READY_CODES = new Set([10005, 10009, 10118]);

/** The JetStream API's own code (its error's `code` in nats.js 2, `status` in 3) for "try again shortly". */
const JS_TEMPORARILY_UNAVAILABLE = 503;

interface ErrorShape {
  name?: unknown;
  cause?: unknown;
  status?: unknown;
  code?: unknown;
  api_error?: { code?: number; err_code?: number };
}

/** A failure of the NATS fabric rather than of the request (see above). */
export function isNatsOutage(err: unknown): boolean {
  const e = err as ErrorShape | null;
  if (!e || typeof e !== "object") return false;
  if (OUTAGE_NAMES.has(String(e.name))) return true;
  if (e.api_error?.code === JS_TEMPORARILY_UNAVAILABLE || e.status === JS_TEMPORARILY_UNAVAILABLE) return true;
  // A RequestError carries the timeout or the missing responders as its cause.
  return String(e.name) === "RequestError" && isNatsOutage(e.cause);
}

/**
 * An outage that start-up waits out: as isNatsOutage, also a JetStream cluster not ready to place
 * or serve a stream yet, but not this process's own connection closing (it is stopping).
 */
export function isTransientForSetup(err: unknown): boolean {
  const e = err as ErrorShape | null;
  if (!e || typeof e !== "object") return false;
  if (e.name === "ClosedConnectionError" || e.name === "DrainingConnectionError") return false;
  const code = typeof e.code === "number" ? e.code : e.api_error?.err_code;
  if (String(e.name) === "JetStreamApiError" && code !== undefined && CLUSTER_NOT_READY_CODES.has(code)) return true;
  return isNatsOutage(err);
}
