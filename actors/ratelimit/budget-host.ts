import { type Msg, type NatsConnection, type Subscription } from "@nats-io/transport-node";
import type { KV } from "@nats-io/kv";
import { Activation, BudgetKey, OwnerProbeReply } from "../../proto/gen/tributary/v1/ratelimit.js";
import { randomToken } from "../../lib/ids.js";
import { openKv } from "../../lib/nats/jetstream.js";
import { kvRecord } from "../../lib/nats/kv-records.js";
import { buckets, queues, subjects } from "../../lib/nats/subjects.js";
import { claimOwnership, openMailbox, type OwnerProbe } from "../../modules/actor-runtime/mod.js";
import type { Actor, ActorContext } from "../../modules/actor-runtime/mod.js";
import { BudgetActor, type BudgetActorOptions } from "./budget-actor.js";
import { budgetRecordSchema, budgetStateKey, freshRecord, type BudgetRecord } from "../../modules/ratelimit/mod.js";

export interface BudgetHostOptions extends BudgetActorOptions {
  /** How long the recorded owner of a budget has to answer "do you own it?" before it is taken over. */
  probeTimeoutMs: number;
  /** A budget without leases for this long is released (its state stays in KV). */
  idleReleaseMs: number;
}

export function budgetHostOptions(windowMs: number): BudgetHostOptions {
  return {
    windowMs,
    activeGatewayMs: Math.min(2_000, windowMs / 2),
    returnFlushMs: 250,
    probeTimeoutMs: 500,
    idleReleaseMs: Math.max(2 * windowMs, 10_000),
  };
}

const SCOPES = new Set(["organization", "project", "key"]);
const SCOPE_ID = /^[A-Za-z0-9_-]{1,64}$/;
const MAX_CLAIM_ATTEMPTS = 8;

/**
 * The rate-limit budgets of one actor host: it activates budgets that have no live owner (NATS
 * queue group: one host answers each activation), runs a BudgetActor for each budget it owns, and
 * answers probes from other hosts about them. Ownership is recorded in the budget's KV record
 * (claimOwnership): a host takes a budget over when its recorded owner does not answer a probe
 * (the process died or is cut off), by compare-and-set, which fences the old owner: its next
 * write fails and it steps down.
 */
export class BudgetHostActor implements Actor {
  readonly name = "rate-limit budgets";
  readonly hostId = `bh${randomToken(12)}`;
  private kv: KV | undefined;
  private ctx: ActorContext | undefined;
  private subscriptions: Subscription[] = [];
  private readonly budgets = new Map<string, BudgetActor>();
  private readonly activating = new Map<string, Promise<Activation>>();
  private sweepTimer: NodeJS.Timeout | undefined;
  private stopping = false;

  constructor(private readonly options: BudgetHostOptions) {}

  async start(ctx: ActorContext): Promise<void> {
    this.ctx = ctx;
    this.kv = await openKv(ctx.nc, buckets.rateLimits, { history: 1, description: "Tributary rate-limit budgets: owner, window, granted" });
    this.subscriptions = [
      openMailbox(ctx, subjects.budgetActivate, (msg) => this.onActivate(msg), { queue: queues.budgetHosts }),
      openMailbox(ctx, subjects.budgetHostProbe(this.hostId), (msg) => this.onProbe(msg)),
    ];
    this.sweepTimer = setInterval(() => this.releaseIdle(), Math.min(5_000, this.options.idleReleaseMs / 2));
    this.sweepTimer.unref();
    ctx.log.info("rate-limit budgets ready", { hostId: this.hostId, windowMs: this.options.windowMs });
  }

  async stop(): Promise<void> {
    this.stopping = true;
    if (this.sweepTimer) clearInterval(this.sweepTimer);
    for (const s of this.subscriptions) s.unsubscribe();
    // Released, not abandoned: another host takes them at once, without probing.
    await Promise.all([...this.budgets.values()].map((b) => b.stop()));
  }

  /** Budgets owned here (tests and logs). */
  get owned(): string[] {
    return [...this.budgets.keys()];
  }

  private onProbe(msg: Msg): void {
    const key = BudgetKey.decode(msg.data);
    const owns = this.budgets.get(stateKey(key))?.owns ?? false;
    msg.respond(OwnerProbeReply.encode({ owns }).finish());
  }

  private async onActivate(msg: Msg): Promise<void> {
    let key: BudgetKey;
    try {
      key = BudgetKey.decode(msg.data);
    } catch {
      msg.respond(Activation.encode({ ownerHost: "", error: "malformed budget key" }).finish());
      return;
    }
    if (!key.model || !SCOPES.has(key.scope) || !SCOPE_ID.test(key.scopeId)) {
      msg.respond(Activation.encode({ ownerHost: "", error: "invalid budget key" }).finish());
      return;
    }
    const id = stateKey(key);
    let pending = this.activating.get(id);
    if (!pending) {
      pending = this.claim(key, id)
        .catch((err: unknown) => {
          this.ctx?.log.warn("budget activation failed", { budget: id, err });
          return Activation.fromPartial({ error: String((err as Error)?.message ?? err) });
        })
        .finally(() => this.activating.delete(id));
      this.activating.set(id, pending);
    }
    msg.respond(Activation.encode(await pending).finish());
  }

  /** Makes this host the owner of the budget, unless a live host owns it. */
  private async claim(key: BudgetKey, id: string): Promise<Activation> {
    if (this.budgets.get(id)?.owns) return { ownerHost: this.hostId, error: "" };
    const claim = await claimOwnership(kvRecord(this.kv!, id, budgetRecordSchema), this.hostId, {
      ownerOf: (record) => record.owner,
      // Limits come with the first lease; a window with nothing granted needs none yet.
      claimedBy: (current, me) => (current ? { ...current, owner: me, updated_at: Date.now() } : freshRecord(me, this.options.windowMs, Date.now(), { requests: 0, tokens: 0 })),
    }, { where: id, attempts: MAX_CLAIM_ATTEMPTS, probeOwner: (owner) => this.probeOwner(owner, key), stopping: () => this.stopping });
    if ("liveOwner" in claim) return { ownerHost: claim.liveOwner, error: "" };
    if ("stopping" in claim) return { ownerHost: "", error: "host stopping" };
    if (claim.previousOwner && claim.previousOwner !== this.hostId) this.ctx?.log.info("took over a budget from an owner that did not answer", { budget: id, previousOwner: claim.previousOwner });
    return this.own(key, id, claim.owned.value, claim.owned.revision);
  }

  private async own(key: BudgetKey, id: string, record: BudgetRecord, revision: number): Promise<Activation> {
    const actor = new BudgetActor(key, id, this.kv!, record, revision, this.options, (a) => {
      if (this.budgets.get(id) === a) this.budgets.delete(id);
    });
    this.budgets.set(id, actor);
    const ctx = this.ctx!;
    await actor.start({
      nc: ctx.nc,
      log: ctx.log.child({ budget: id }),
      // A budget that fails is dropped: the next lease re-activates it from its stored state.
      fail: (err) => {
        ctx.log.error("budget actor failed; releasing it", { budget: id, err });
        void actor.stop();
      },
    });
    this.ctx?.log.debug("budget owned", { budget: id });
    return { ownerHost: this.hostId, error: "" };
  }

  private async probeOwner(hostId: string, key: BudgetKey): Promise<OwnerProbe> {
    try {
      const reply = await (this.ctx!.nc as NatsConnection).request(subjects.budgetHostProbe(hostId), BudgetKey.encode(key).finish(), {
        timeout: this.options.probeTimeoutMs,
      });
      return OwnerProbeReply.decode(reply.data).owns ? "owns" : "disowns";
    } catch {
      // No responders, or no answer in time: taken over at once (no lease). Safe either way:
      // the owner answers a grant only once its compare-and-set on the record succeeded, and the
      // claim's compare-and-set makes every later one of its fail.
      return "silent";
    }
  }

  private releaseIdle(): void {
    const now = Date.now();
    for (const b of this.budgets.values())
      if (now - b.lastActivity > this.options.idleReleaseMs && !b.busy) void b.stop();
  }
}

/** The budget's key in the rate-limits bucket. */
export const stateKey = (key: BudgetKey): string => budgetStateKey(key);
