import type { KV } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import { bindKvForReading } from "../../lib/nats/jetstream.js";
import { getRecord } from "../../lib/nats/kv-records.js";
import { buckets, kvToken } from "../../lib/nats/subjects.js";
import { windowEndsInMs, type BudgetRecord } from "./budget-policy.js";
import { budgetRecordSchema } from "./budget-policy.js";

/** A budget's key in the rate-limits bucket: `<model token>.<scope>.<scope id>`. */
export function budgetStateKey(key: { model: string; scope: string; scopeId: string }): string {
  return `${kvToken(key.model)}.${key.scope}.${key.scopeId}`;
}

/** One budget as the dashboard shows it: its limits and what its current window has handed out. */
export interface BudgetUse {
  model: string;
  scope: string;
  scopeId: string;
  limits: { requests: number; tokens: number };
  /**
   * Granted to gateways in the current window, less what they gave back: what requests used,
   * plus what gateways hold in leased chunks not used yet (an upper bound of the use).
   */
  granted: { requests: number; tokens: number };
  windowMs: number | null;
  windowEndsInMs: number | null;
  /** Whether an actor host owns the budget now (a budget nobody used lately is released). */
  owned: boolean;
}

/**
 * Reads budgets' state from the rate-limits bucket, for display only: the owning actor host keeps
 * the truth and writes every grant before answering it, so a read is at most one grant behind.
 * The gateway may only read this bucket (direct gets), never write it.
 */
export class BudgetReader {
  private constructor(private readonly kv: KV) {}

  static async open(nc: NatsConnection): Promise<BudgetReader> {
    return new BudgetReader(await bindKvForReading(nc, buckets.rateLimits));
  }

  async read(key: { model: string; scope: string; scopeId: string }, limits: { requests: number; tokens: number }, nowMs = Date.now()): Promise<BudgetUse> {
    let rec: BudgetRecord | undefined;
    try {
      rec = (await getRecord(this.kv, budgetStateKey(key), budgetRecordSchema))?.value;
    } catch {
      // The bucket does not exist yet (no budget was ever activated), or the read failed: nothing to show.
      rec = undefined;
    }
    const current = rec && rec.window === Math.floor(nowMs / rec.window_ms);
    return {
      ...key,
      limits: rec ? { requests: rec.limit_requests, tokens: rec.limit_tokens } : limits,
      granted: current ? { requests: rec!.granted_requests, tokens: rec!.granted_tokens } : { requests: 0, tokens: 0 },
      windowMs: rec?.window_ms ?? null,
      windowEndsInMs: rec && current ? windowEndsInMs(rec, nowMs) : null,
      owned: !!rec && rec.owner !== "",
    };
  }
}
