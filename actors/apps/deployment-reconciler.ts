import type { NatsConnection, Subscription } from "@nats-io/transport-node";
import * as Schema from "effect/Schema";
import { randomToken } from "../../lib/ids.js";
import { kvRecord, updateRecord, valueSchema } from "../../lib/nats/kv-records.js";
import { subjects } from "../../lib/nats/subjects.js";
import { actsUntil, claimOwnership, LeaseWatch, openMailbox, type Actor, type ActorContext, type LeaseTerms, type OwnerProbe } from "../../modules/actor-runtime/mod.js";
import { AppHostDirectory, DeploymentReconciler, DeploymentStore, RECONCILER_KEY, type ReconcilerOptions } from "../../modules/apps/mod.js";

interface ReconcilerOwner {
  owner: string;
  updated_at: number;
}
const ownerRecord = valueSchema<ReconcilerOwner>()(Schema.Struct({ owner: Schema.String, updated_at: Schema.Number }));

/** How long the named owner has to answer "do you reconcile?" before it counts as silent. */
const PROBE_TIMEOUT_MS = 500;

/**
 * The reconciler record's lease, for a round of `intervalMs` (each round renews it): a silent
 * owner is taken over after 6 rounds without a renewal (3 s at least), and stops acting a quarter
 * of that earlier.
 */
export function reconcilerLease(intervalMs: number): LeaseTerms {
  const ttlMs = Math.max(3_000, 6 * intervalMs);
  return { ttlMs, marginMs: ttlMs / 4 };
}

/** This host reconciles: the record's revision it last wrote, and the timer that ends its term. */
interface Held {
  revision: number;
  reconciler: DeploymentReconciler;
  fence: NodeJS.Timeout | undefined;
  /** The reconciler's round under way: renewals do not wait for it (a round may wait on app hosts). */
  ticking: Promise<void> | undefined;
}

/**
 * Hosted-app deployments' reconciler, on one actor host at a time. Every actor host runs this
 * actor; each round (every `intervalMs`), one that does not reconcile claims the job as the
 * rate-limit budgets are claimed (claimOwnership on the `reconciler` record of the deployments
 * bucket), and the owner renews the record by compare-and-set (a renewal that finds another
 * revision: taken over, it steps down) and runs a round of DeploymentReconciler.
 *
 * The record is a lease (see modules/actor-runtime/ownership.ts): the reconciler acts between
 * writes (it places instances when a deployment changes or a request waits), so an owner cut off
 * from the store stops it when its term could have ended (reconcilerLease), before a host that
 * gets no answer from it may take over, and reconciles again only after claiming anew. Every
 * host hears the app hosts' heartbeats all along, so a new owner knows which hosts live at once.
 */
export class DeploymentReconcilerActor implements Actor {
  readonly name = "app-deployment-reconciler";
  private readonly hostId = `rc${randomToken(12)}`;
  private readonly terms: LeaseTerms;
  private readonly watch: LeaseWatch;
  private ctx: ActorContext | undefined;
  private store: DeploymentStore | undefined;
  private hosts: AppHostDirectory | undefined;
  private held: Held | undefined;
  private probe: Subscription | undefined;
  private timer: NodeJS.Timeout | undefined;
  private round: Promise<void> | undefined;
  private stopping = false;

  constructor(
    private readonly intervalMs: number,
    private readonly options: ReconcilerOptions,
    private readonly now: () => number = () => performance.now(),
  ) {
    this.terms = reconcilerLease(intervalMs);
    this.watch = new LeaseWatch(this.terms, now);
  }

  async start(ctx: ActorContext): Promise<void> {
    this.ctx = ctx;
    this.store = await DeploymentStore.open(ctx.nc);
    this.hosts = new AppHostDirectory(ctx.nc, this.options.hostTimeoutMs);
    this.hosts.start();
    this.probe = openMailbox(ctx, subjects.appReconcilerProbe(this.hostId), (msg) => {
      msg.respond(new TextEncoder().encode(JSON.stringify({ owns: this.held !== undefined })));
    });
    this.timer = setInterval(() => {
      if (!this.round) this.round = this.once().catch((err: unknown) => ctx.log.warn("app reconciler round failed", { err })).finally(() => (this.round = undefined));
    }, this.intervalMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    this.stopping = true;
    if (this.timer) clearInterval(this.timer);
    await this.round;
    this.probe?.unsubscribe();
    this.hosts?.stop();
    const held = this.stepDown();
    if (!held) return;
    await held.ticking;
    // Released, not abandoned: another host takes over at its next round, without a probe. Only
    // at the revision this host wrote: a record taken over meanwhile is left alone.
    await updateRecord(this.store!.kv, RECONCILER_KEY, { owner: "", updated_at: Date.now() }, held.revision).catch(() => undefined);
  }

  private async once(): Promise<void> {
    if (this.held) return this.renew(this.held);
    const ctx = this.ctx!;
    const kv = this.store!.kv;
    // The term of a claim counts from before its write was sent.
    const sentAt = this.now();
    const claim = await claimOwnership(kvRecord(kv, RECONCILER_KEY, ownerRecord), this.hostId, {
      ownerOf: (record) => record.owner,
      claimedBy: (_current, me) => ({ owner: me, updated_at: Date.now() }),
    }, { where: RECONCILER_KEY, probeOwner: (owner) => this.probeOwner(ctx.nc, owner), stopping: () => this.stopping, lease: this.watch });
    if (!("owned" in claim) || this.stopping) return;
    ctx.log.info("reconciling app deployments", { reconcilerId: this.hostId, previousOwner: claim.previousOwner || null });
    const held: Held = { revision: claim.owned.revision, reconciler: new DeploymentReconciler(ctx.nc, this.store!, this.hosts!, this.options, ctx.log), fence: undefined, ticking: undefined };
    this.held = held;
    this.fenceFrom(held, sentAt);
    try {
      await held.reconciler.start();
    } catch (err) {
      if (this.held === held) this.stepDown();
      throw err;
    }
  }

  /** Renews the lease at the revision last written, then runs a round; taken over: steps down. */
  private async renew(held: Held): Promise<void> {
    const sentAt = this.now();
    const revision = await updateRecord(this.store!.kv, RECONCILER_KEY, { owner: this.hostId, updated_at: Date.now() }, held.revision);
    // Stopped meanwhile, or its term ended first: it claims anew before it acts again.
    if (this.held !== held) return;
    if (revision === undefined) {
      this.ctx!.log.info("another actor host reconciles app deployments now");
      this.stepDown();
      return;
    }
    held.revision = revision;
    this.fenceFrom(held, sentAt);
    held.ticking ??= held.reconciler
      .tick()
      .catch((err: unknown) => this.ctx!.log.warn("app reconciler round failed", { err }))
      .finally(() => (held.ticking = undefined));
  }

  /** Ends this host's reconciling when the term of a renewal sent at `sentAt` could have ended. */
  private fenceFrom(held: Held, sentAt: number): void {
    if (held.fence) clearTimeout(held.fence);
    held.fence = setTimeout(() => {
      if (this.held !== held) return;
      this.ctx!.log.warn("the reconciler's lease was not renewed in time: stopping until it is claimed again", { ttlMs: this.terms.ttlMs });
      this.stepDown();
    }, Math.max(0, actsUntil(this.terms, sentAt) - this.now()));
    held.fence.unref();
  }

  /** Stops reconciling here (nothing written); what was held, if anything. */
  private stepDown(): Held | undefined {
    const held = this.held;
    if (!held) return undefined;
    this.held = undefined;
    if (held.fence) clearTimeout(held.fence);
    held.reconciler.stop();
    return held;
  }

  private async probeOwner(nc: NatsConnection, owner: string): Promise<OwnerProbe> {
    try {
      const reply = await nc.request(subjects.appReconcilerProbe(owner), new Uint8Array(), { timeout: PROBE_TIMEOUT_MS });
      return (JSON.parse(new TextDecoder().decode(reply.data)) as { owns?: unknown }).owns === true ? "owns" : "disowns";
    } catch {
      // No responders or no answer in time: dead or cut off; the lease decides when to take over.
      return "silent";
    }
  }
}
