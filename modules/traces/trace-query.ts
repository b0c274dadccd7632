import { errors } from "../errors/mod.js";
import type { TraceStatus } from "./observation.js";
import { TRACE_ID } from "./trace-record.js";
import type { TraceQuery } from "./trace-store.js";

export const TRACE_STATUSES: readonly TraceStatus[] = ["success", "error", "cancelled", "client_disconnected"];

const KNOWN = new Set(["model", "status", "api_key_id", "start_time", "end_time", "limit", "after"]);
/** Unix seconds accepted for times: 0 to the year 2106. */
const MAX_TIME = 2 ** 32 - 1;

function time(params: URLSearchParams, name: string): number | undefined {
  const raw = params.get(name);
  if (raw === null) return undefined;
  const v = /^\d{1,10}$/.test(raw) ? Number(raw) : NaN;
  if (!(v >= 0 && v <= MAX_TIME)) throw errors.invalidParam(name, `Invalid value for '${name}': expected Unix seconds (an integer from 0 to ${MAX_TIME}), got '${raw.slice(0, 64)}'.`);
  return v;
}

/**
 * GET /v1/traces query: model, status, api_key_id, start_time and end_time (Unix seconds: created
 * in [start_time, end_time)), limit (1-100, default 20) and after (the id of the last trace of
 * the previous page). Every value is bounded before it reaches NATS; unknown names are refused.
 */
export function parseTraceQuery(params: URLSearchParams): TraceQuery {
  for (const name of params.keys()) if (!KNOWN.has(name)) throw errors.unknownParam(name.slice(0, 64));
  const query: TraceQuery = { limit: 20 };
  const rawLimit = params.get("limit");
  if (rawLimit !== null) {
    const limit = /^\d{1,3}$/.test(rawLimit) ? Number(rawLimit) : NaN;
    if (!(limit >= 1 && limit <= 100)) throw errors.invalidParam("limit", `Invalid value for 'limit': expected an integer between 1 and 100, got '${rawLimit.slice(0, 64)}'.`);
    query.limit = limit;
  }
  const model = params.get("model");
  if (model !== null) {
    if (model.length < 1 || model.length > 256) throw errors.invalidParam("model", "Invalid value for 'model': expected 1 to 256 characters.");
    query.model = model;
  }
  const status = params.get("status");
  if (status !== null) {
    if (!TRACE_STATUSES.includes(status as TraceStatus))
      throw errors.invalidParam("status", `Invalid value for 'status': expected one of ${TRACE_STATUSES.join(", ")}, got '${status.slice(0, 64)}'.`);
    query.status = status as TraceStatus;
  }
  const key = params.get("api_key_id");
  if (key !== null) {
    if (!/^[A-Za-z0-9_-]{1,64}$/.test(key)) throw errors.invalidParam("api_key_id", "Invalid value for 'api_key_id': expected a key id (1 to 64 letters, digits, '-' or '_').");
    query.keyId = key;
  }
  query.startTime = time(params, "start_time");
  query.endTime = time(params, "end_time");
  if (query.startTime !== undefined && query.endTime !== undefined && query.endTime <= query.startTime)
    throw errors.invalidParam("end_time", "Invalid value for 'end_time': it must be after 'start_time'.");
  const after = params.get("after");
  if (after !== null) {
    if (!TRACE_ID.test(after)) throw errors.invalidParam("after", `Invalid value for 'after': expected a trace id, got '${after.slice(0, 64)}'.`);
    query.after = after;
  }
  return query;
}
