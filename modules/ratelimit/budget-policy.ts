import * as Schema from "effect/Schema";
import { valueSchema } from "../../lib/nats/kv-records.js";

// The state of one budget and how chunks of it are granted: pure functions, unit-tested.

/** Persisted in the rate-limits bucket; every grant is written before it is answered. */
export interface BudgetRecord {
  /** Actor host owning the budget; "" when released. */
  owner: string;
  /** Window id: start of the window in ms since the epoch / window_ms. */
  window: number;
  window_ms: number;
  limit_requests: number;
  limit_tokens: number;
  /** Granted to gateways in this window, less what they gave back. */
  granted_requests: number;
  granted_tokens: number;
  /** Unix ms of the last write. */
  updated_at: number;
}

/** How a budget record is read back from the rate-limits bucket. */
export const budgetRecordSchema = valueSchema<BudgetRecord>()(
  Schema.Struct({
    owner: Schema.String,
    window: Schema.Number,
    window_ms: Schema.Number,
    limit_requests: Schema.Number,
    limit_tokens: Schema.Number,
    granted_requests: Schema.Number,
    granted_tokens: Schema.Number,
    updated_at: Schema.Number,
  }),
);

export interface Ask {
  needRequests: number;
  needTokens: number;
  wantRequests: number;
  wantTokens: number;
}

export interface Chunk {
  requests: number;
  tokens: number;
}

export function freshRecord(owner: string, windowMs: number, nowMs: number, limits: { requests: number; tokens: number }): BudgetRecord {
  return {
    owner,
    window: Math.floor(nowMs / windowMs),
    window_ms: windowMs,
    limit_requests: limits.requests,
    limit_tokens: limits.tokens,
    granted_requests: 0,
    granted_tokens: 0,
    updated_at: nowMs,
  };
}

/**
 * Moves the record to the window of `nowMs` (a new window starts with nothing granted). A window
 * recorded ahead of this clock (another owner's clock ran ahead) is kept: windows never go back.
 */
export function rollWindow(rec: BudgetRecord, windowMs: number, nowMs: number): void {
  const current = Math.floor(nowMs / windowMs);
  if (rec.window_ms !== windowMs) {
    rec.window_ms = windowMs;
    rec.window = current;
    rec.granted_requests = 0;
    rec.granted_tokens = 0;
  } else if (current > rec.window) {
    rec.window = current;
    rec.granted_requests = 0;
    rec.granted_tokens = 0;
  }
}

export function windowEndsInMs(rec: BudgetRecord, nowMs: number): number {
  return Math.max(0, (rec.window + 1) * rec.window_ms - nowMs);
}

export function remaining(rec: BudgetRecord): Chunk {
  return {
    requests: Math.max(0, rec.limit_requests - rec.granted_requests),
    tokens: Math.max(0, rec.limit_tokens - rec.granted_tokens),
  };
}

/**
 * The chunk for one lease: at least what the gateway needs now (if the budget has it), and up to
 * what it wants, but no more than a fair share of what is left: half of it split between the
 * gateways active lately. Chunks shrink as the budget runs down, so little is stranded on a gateway
 * that stops receiving requests, while at a steady rate most requests need no round trip.
 */
export function decideChunk(rec: BudgetRecord, ask: Ask, activeGateways: number): Chunk {
  const left = remaining(rec);
  const share = (n: number) => Math.ceil(n / (2 * Math.max(1, activeGateways)));
  const pick = (rem: number, need: number, want: number) => Math.min(rem, Math.max(need, Math.min(Math.max(want, need), share(rem))));
  return {
    requests: pick(left.requests, ask.needRequests, ask.wantRequests),
    tokens: pick(left.tokens, ask.needTokens, ask.wantTokens),
  };
}

/**
 * Applies what came back for `window` (ignored once that window is over): a chunk a gateway did
 * not use, or the settlement of a background response, whose usage beyond its estimate
 * (`overrunTokens`) counts as granted.
 */
export function applyReturn(rec: BudgetRecord, window: number, back: Chunk & { overrunTokens?: number }): boolean {
  if (window !== rec.window) return false;
  rec.granted_requests = Math.max(0, rec.granted_requests - back.requests);
  rec.granted_tokens = Math.max(0, rec.granted_tokens - back.tokens) + (back.overrunTokens ?? 0);
  return true;
}
