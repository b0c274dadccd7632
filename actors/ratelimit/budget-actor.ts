import type { Msg, Subscription } from "@nats-io/transport-node";
import type { KV } from "@nats-io/kv";
import { LeaseGrant, LeaseGrant_Status, LeaseRequest, LeaseReturn, type BudgetKey } from "../../proto/gen/tributary/v1/ratelimit.js";
import { subjects } from "../../lib/nats/subjects.js";
import { updateRecord } from "../../lib/nats/kv-records.js";
import { openMailbox } from "../../modules/actor-runtime/mod.js";
import type { Actor, ActorContext } from "../../modules/actor-runtime/mod.js";
import { applyReturn, decideChunk, remaining, rollWindow, windowEndsInMs, type BudgetRecord } from "../../modules/ratelimit/mod.js";

export interface BudgetActorOptions {
  windowMs: number;
  /** A gateway that leased within this long counts as active when sharing out the budget. */
  activeGatewayMs: number;
  /** How often given-back chunks are written when no grant writes them sooner. */
  returnFlushMs: number;
}

interface PendingGrant {
  msg: Msg;
  /** The window the chunk was decided (and counted) in. */
  window: number;
  requests: number;
  tokens: number;
}

const NOT_OWNER = LeaseGrant.encode(LeaseGrant.fromPartial({ status: LeaseGrant_Status.STATUS_NOT_OWNER })).finish();

/**
 * The owner of one budget (a model x a scope). Its state is in memory and in the rate-limits
 * bucket; a grant is answered only after the state that includes it was written, by
 * compare-and-set on the revision this owner last wrote. Grants that arrive while a write is in
 * flight are written together by the next one (group commit). A write that finds another
 * revision means another host took the budget over: this one steps down without answering, so
 * whatever happens, no chunk is granted that the stored state does not count.
 */
export class BudgetActor implements Actor {
  readonly name: string;
  private subscriptions: Subscription[] = [];
  private pending: PendingGrant[] = [];
  private writing = false;
  private dirty = false;
  private owning = true;
  private readonly gateways = new Map<string, number>();
  private flushTimer: NodeJS.Timeout | undefined;
  private ctx: ActorContext | undefined;
  /** Date.now() of the last lease or return. */
  lastActivity = Date.now();

  constructor(
    readonly key: BudgetKey,
    private readonly kvKey: string,
    private readonly kv: KV,
    private state: BudgetRecord,
    private revision: number,
    private readonly options: BudgetActorOptions,
    /** Called once when this actor stops owning the budget (stepped down or released). */
    private readonly onGone: (actor: BudgetActor) => void,
  ) {
    this.name = `budget ${kvKey}`;
  }

  get owns(): boolean {
    return this.owning;
  }

  get busy(): boolean {
    return this.writing || this.pending.length > 0 || this.dirty;
  }

  async start(ctx: ActorContext): Promise<void> {
    this.ctx = ctx;
    const { model, scope, scopeId } = this.key;
    this.subscriptions = [
      openMailbox(ctx, subjects.budgetLease(model, scope, scopeId), (msg) => this.onLease(msg)),
      openMailbox(ctx, subjects.budgetReturn(model, scope, scopeId), (msg) => this.onReturn(msg)),
    ];
    // The server has the subscriptions before anyone is told this host owns the budget.
    await ctx.nc.flush();
    this.flushTimer = setInterval(() => void this.flush(), this.options.returnFlushMs);
    this.flushTimer.unref();
  }

  /** Releases the budget (idle, or the host is stopping): the state stays, the owner is cleared. */
  async stop(): Promise<void> {
    if (!this.owning) return;
    this.leave();
    while (this.writing) await new Promise((r) => setTimeout(r, 5));
    this.state.owner = "";
    this.state.updated_at = Date.now();
    await updateRecord(this.kv, this.kvKey, this.state, this.revision).catch(() => undefined);
  }

  private onLease(msg: Msg): void {
    if (!this.owning) {
      msg.respond(NOT_OWNER);
      return;
    }
    const req = LeaseRequest.decode(msg.data);
    const now = Date.now();
    this.lastActivity = now;
    rollWindow(this.state, this.options.windowMs, now);
    if (req.limits && req.limits.requests > 0 && req.limits.tokens > 0) {
      // The latest catalog a gateway sent is the one applied.
      this.state.limit_requests = req.limits.requests;
      this.state.limit_tokens = req.limits.tokens;
    }
    this.gateways.set(req.gatewayId, now);
    for (const [g, seen] of this.gateways) if (now - seen > this.options.activeGatewayMs) this.gateways.delete(g);
    const chunk = decideChunk(this.state, req, this.gateways.size);
    this.state.granted_requests += chunk.requests;
    this.state.granted_tokens += chunk.tokens;
    this.pending.push({ msg, window: this.state.window, ...chunk });
    void this.flush();
  }

  private onReturn(msg: Msg): void {
    if (!this.owning) return;
    const ret = LeaseReturn.decode(msg.data);
    this.lastActivity = Date.now();
    rollWindow(this.state, this.options.windowMs, this.lastActivity);
    if (applyReturn(this.state, ret.window, ret)) this.dirty = true;
  }

  private async flush(): Promise<void> {
    if (this.writing || !this.owning || (this.pending.length === 0 && !this.dirty)) return;
    this.writing = true;
    const batch = this.pending.splice(0);
    this.dirty = false;
    const snapshot: BudgetRecord = { ...this.state, updated_at: Date.now() };
    let revision: number | undefined;
    try {
      revision = await updateRecord(this.kv, this.kvKey, snapshot, this.revision);
    } catch (err) {
      // Unknown whether it was written: step down, the next owner reads what is stored.
      this.ctx?.log.warn("budget state write failed; stepping down", { budget: this.kvKey, err });
    }
    this.writing = false;
    if (revision === undefined) {
      if (this.owning) this.ctx?.log.info("budget taken over by another host; stepping down", { budget: this.kvKey });
      for (const p of batch) p.msg.respond(NOT_OWNER);
      this.leave();
      return;
    }
    this.revision = revision;
    const now = Date.now();
    const left = remaining(snapshot);
    for (const p of batch) {
      // A chunk decided in a window that ended before this write (the window rolled while it
      // waited for the write in flight) was counted in that window, not in the one written: it
      // is answered as that window's, over, and the gateway asks again in the new one.
      const current = p.window === snapshot.window;
      p.msg.respond(
        LeaseGrant.encode({
          status: LeaseGrant_Status.STATUS_GRANTED,
          window: p.window,
          windowMs: snapshot.window_ms,
          windowEndsInMs: current ? windowEndsInMs(snapshot, now) : 0,
          requests: p.requests,
          tokens: p.tokens,
          remainingRequests: left.requests,
          remainingTokens: left.tokens,
          limits: { requests: snapshot.limit_requests, tokens: snapshot.limit_tokens },
        }).finish(),
      );
    }
    if (this.pending.length > 0) void this.flush();
  }

  /** Stops serving: no more subscriptions, pending leases told to go elsewhere. */
  private leave(): void {
    if (!this.owning) return;
    this.owning = false;
    if (this.flushTimer) clearInterval(this.flushTimer);
    for (const s of this.subscriptions) s.unsubscribe();
    for (const p of this.pending.splice(0)) {
      // Never answered, so never granted: not counted in what a release writes (a chunk of a
      // window that has rolled away was never in the current window's counts).
      if (p.window === this.state.window) {
        this.state.granted_requests -= p.requests;
        this.state.granted_tokens -= p.tokens;
      }
      p.msg.respond(NOT_OWNER);
    }
    this.onGone(this);
  }
}
