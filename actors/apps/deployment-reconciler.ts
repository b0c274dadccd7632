import { RequestError, type NatsConnection, type Subscription } from "@nats-io/transport-node";
import * as Schema from "effect/Schema";
import { randomToken } from "../../lib/ids.js";
import { getRecord, kvRecord, updateRecord, valueSchema } from "../../lib/nats/kv-records.js";
import { subjects } from "../../lib/nats/subjects.js";
import { claimOwnership, openMailbox, type Actor, type ActorContext } from "../../modules/actor-runtime/mod.js";
import { AppHostDirectory, DeploymentReconciler, DeploymentStore, RECONCILER_KEY, type ReconcilerOptions } from "../../modules/apps/mod.js";

interface ReconcilerOwner {
  owner: string;
  updated_at: number;
}
const ownerRecord = valueSchema<ReconcilerOwner>()(Schema.Struct({ owner: Schema.String, updated_at: Schema.Number }));

/** How long the named owner has to answer "do you reconcile?" before another host takes over. */
const PROBE_TIMEOUT_MS = 500;

/**
 * Hosted-app deployments' reconciler, on one actor host at a time. Every actor host runs this
 * actor; each round (every `intervalMs`), one that does not reconcile claims the job as the
 * rate-limit budgets are claimed (claimOwnership on the `reconciler` record of the deployments
 * bucket, taken over when the named owner does not answer a probe), and the owner checks the
 * record still names it (else it steps down) and runs a round of DeploymentReconciler. Every
 * host hears the app hosts' heartbeats all along, so a new owner knows which hosts live at once.
 */
export class DeploymentReconcilerActor implements Actor {
  readonly name = "app-deployment-reconciler";
  private readonly hostId = `rc${randomToken(12)}`;
  private ctx: ActorContext | undefined;
  private store: DeploymentStore | undefined;
  private hosts: AppHostDirectory | undefined;
  private reconciler: DeploymentReconciler | undefined;
  private probe: Subscription | undefined;
  private timer: NodeJS.Timeout | undefined;
  private round: Promise<void> | undefined;
  private stopping = false;

  constructor(private readonly intervalMs: number, private readonly options: ReconcilerOptions) {}

  async start(ctx: ActorContext): Promise<void> {
    this.ctx = ctx;
    this.store = await DeploymentStore.open(ctx.nc);
    this.hosts = new AppHostDirectory(ctx.nc, this.options.hostTimeoutMs);
    this.hosts.start();
    this.probe = openMailbox(ctx, subjects.appReconcilerProbe(this.hostId), (msg) => {
      msg.respond(new TextEncoder().encode(JSON.stringify({ owns: this.reconciler !== undefined })));
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
    if (!this.reconciler) return;
    this.reconciler.stop();
    this.reconciler = undefined;
    // Released, not abandoned: another host takes over at its next round, without a probe.
    const kv = this.store!.kv;
    const current = await getRecord(kv, RECONCILER_KEY, ownerRecord).catch(() => undefined);
    if (current?.value.owner === this.hostId) await updateRecord(kv, RECONCILER_KEY, { owner: "", updated_at: Date.now() }, current.revision).catch(() => undefined);
  }

  private async once(): Promise<void> {
    const ctx = this.ctx!;
    const kv = this.store!.kv;
    if (this.reconciler) {
      const current = await getRecord(kv, RECONCILER_KEY, ownerRecord);
      if (current?.value.owner === this.hostId) return this.reconciler.tick();
      // Taken over (this host seemed dead to another): the record fences it.
      ctx.log.info("another actor host reconciles app deployments now", { owner: current?.value.owner ?? null });
      this.reconciler.stop();
      this.reconciler = undefined;
      return;
    }
    const claim = await claimOwnership(kvRecord(kv, RECONCILER_KEY, ownerRecord), this.hostId, {
      ownerOf: (record) => record.owner,
      claimedBy: (_current, me) => ({ owner: me, updated_at: Date.now() }),
    }, { where: RECONCILER_KEY, ownerAlive: (owner) => this.ownerAlive(ctx.nc, owner), stopping: () => this.stopping });
    if (!("owned" in claim) || this.stopping) return;
    ctx.log.info("reconciling app deployments", { previousOwner: claim.previousOwner || null });
    const reconciler = new DeploymentReconciler(ctx.nc, this.store!, this.hosts!, this.options, ctx.log);
    this.reconciler = reconciler;
    await reconciler.start();
  }

  private async ownerAlive(nc: NatsConnection, owner: string): Promise<boolean> {
    try {
      const reply = await nc.request(subjects.appReconcilerProbe(owner), new Uint8Array(), { timeout: PROBE_TIMEOUT_MS });
      return (JSON.parse(new TextDecoder().decode(reply.data)) as { owns?: unknown }).owns === true;
    } catch (err) {
      if (err instanceof RequestError && err.isNoResponders()) return false;
      // No answer in time: gone. Safe either way: the claim's compare-and-set fences it.
      return false;
    }
  }
}
