import { Schema } from "effect";
import type { KV, KvEntry } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import { listKeys, openKv } from "../../lib/nats/jetstream.js";
import { createRecord, decodeEntry, getRecord, modifyRecord, pageRecords, upsertRecord, valueSchema, type Mutable, type Versioned } from "../../lib/nats/kv-records.js";
import type { Page, PageQuery } from "../../lib/page.js";
import { buckets, kvToken } from "../../lib/nats/subjects.js";

// Deployment records and the routes of hosted addresses (KV `tributary_app_deployments`).
//   <project>.<deployment id>        the deployment object, its project, manifest and host
//   route.<project slug>.<org slug>  the deployment a hosted address serves (and its project)
// A deployment's status moves as deployment-states.ts says.

export const DEPLOYMENT_STATUSES = ["pending", "starting", "healthy", "failed", "superseded", "stopped"] as const;
export type DeploymentStatus = (typeof DEPLOYMENT_STATUSES)[number];
/** Deployment ids: the prefix and 24 base62 characters (newSortableId). */
export const DEPLOYMENT_ID = /^dep_[0-9A-Za-z]{24}$/;
/** Log lines a failed deployment's record keeps (the evidence of why). */
export const LAST_LOG_LINES = 50;

const EffectiveTimeoutsSchema = Schema.Struct({ request_seconds: Schema.Number, idle_seconds: Schema.Number });
export type EffectiveTimeouts = Mutable<typeof EffectiveTimeoutsSchema.Type>;

export const DeploymentObjectSchema = Schema.Struct({
  id: Schema.String,
  object: Schema.Literal("app.deployment"),
  status: Schema.Literals(DEPLOYMENT_STATUSES),
  /** Why it failed or ended: memory_exceeded, crash_loop, health_check_timeout, bundle_invalid, secret_missing, host_full, host_lost, superseded, user_stop, host_stopped. */
  reason: Schema.NullOr(Schema.String),
  message: Schema.NullOr(Schema.String),
  artifact_id: Schema.String,
  sha256: Schema.String,
  hosted_url: Schema.String,
  entrypoint: Schema.String,
  resources: Schema.Struct({ cpu_mhz: Schema.Number, memory_size_mb: Schema.Number, gpu_count: Schema.Number }),
  env_names: Schema.mutable(Schema.Array(Schema.String)),
  secrets: Schema.mutable(Schema.Array(Schema.String)),
  restarts: Schema.Number,
  created_at: Schema.Number,
  healthy_at: Schema.NullOr(Schema.Number),
  ended_at: Schema.NullOr(Schema.Number),
  /** The deployment this one replaced (or that replaced it, once superseded). */
  replaces: Schema.NullOr(Schema.String),
  superseded_by: Schema.NullOr(Schema.String),
  /** The last log lines of a failed deployment. */
  last_logs: Schema.mutable(Schema.Array(Schema.String)),
  /** What the gateways wait for the app: the manifest's `timeouts`, the defaults where it sets none (absent on records made before). */
  timeouts: Schema.optionalKey(EffectiveTimeoutsSchema),
});
export type DeploymentObject = Mutable<typeof DeploymentObjectSchema.Type>;

const ManifestSchema = Schema.Struct({
  entrypoint: Schema.String,
  organizationSlug: Schema.String,
  project: Schema.String,
  projectSlug: Schema.String,
  cpuMhz: Schema.Number,
  gpuCount: Schema.Number,
  memorySizeMb: Schema.Number,
  env: Schema.Record(Schema.String, Schema.String),
  secrets: Schema.mutable(Schema.Array(Schema.String)),
  runtime: Schema.Literal("python"),
  timeouts: Schema.optionalKey(Schema.Struct({ requestSeconds: Schema.optionalKey(Schema.Number), idleSeconds: Schema.optionalKey(Schema.Number) })),
});

const StoredDeploymentSchema = Schema.Struct({
  deployment: DeploymentObjectSchema,
  project: Schema.String,
  host_id: Schema.String,
  manifest: ManifestSchema,
});
export type StoredDeployment = Mutable<typeof StoredDeploymentSchema.Type>;
const storedDeployment = valueSchema<StoredDeployment>()(StoredDeploymentSchema);

/** `timeouts`: the deployment's (absent on routes written before: the gateway's defaults apply). */
const RouteSchema = Schema.Struct({ project: Schema.String, deployment_id: Schema.String, host_id: Schema.String, sha256: Schema.String, timeouts: Schema.optionalKey(EffectiveTimeoutsSchema) });
export type AppRoute = Mutable<typeof RouteSchema.Type>;
const route = valueSchema<AppRoute>()(RouteSchema);

export const nowSeconds = () => Math.floor(Date.now() / 1000);
const routeKey = (projectSlug: string, organizationSlug: string) => `route.${projectSlug}.${organizationSlug}`;

export class DeploymentStore {
  private constructor(readonly kv: KV) {}

  static async open(nc: NatsConnection): Promise<DeploymentStore> {
    return new DeploymentStore(await openKv(nc, buckets.appDeployments, { history: 1 }));
  }

  key(project: string, id: string): string {
    return `${kvToken(project)}.${id}`;
  }

  async create(record: StoredDeployment): Promise<void> {
    if ((await createRecord(this.kv, this.key(record.project, record.deployment.id), record)) === undefined) throw new Error(`deployment ${record.deployment.id} exists already`);
  }

  async get(project: string, id: string): Promise<StoredDeployment | undefined> {
    if (!DEPLOYMENT_ID.test(id)) return undefined;
    return (await getRecord(this.kv, this.key(project, id), storedDeployment))?.value;
  }

  /**
   * Applies `move` (one of deployment-states.ts, which never moves a final record) with
   * compare-and-set: it returns the next object, or undefined to leave it. Returns the record as
   * stored afterwards.
   */
  async transition(project: string, id: string, move: (current: DeploymentObject) => DeploymentObject | undefined): Promise<StoredDeployment | undefined> {
    const result = await modifyRecord(this.kv, this.key(project, id), storedDeployment, (current) => {
      const next = move(current.deployment);
      return next ? { ...current, deployment: next } : undefined;
    });
    return result?.value;
  }

  /**
   * A page of a project's deployments (ids sort by creation time), those past `after` when
   * given. Records are kept, so a project's list only grows: pageRecords reads the page's
   * records from a recent window of the bucket, not all of them.
   */
  list(project: string, query: PageQuery): Promise<Page<StoredDeployment>> {
    return pageRecords(this.kv, kvToken(project), query, async (id) => (await getRecord(this.kv, this.key(project, id), storedDeployment).catch(() => undefined))?.value, { idPrefix: "dep_" });
  }

  /** Every deployment record of every project, final ones too (the sweeper's view; routes are not deployments). */
  async all(): Promise<StoredDeployment[]> {
    const keys = await listKeys(this.kv, "*.*");
    const records = await Promise.all(keys.map((k) => getRecord(this.kv, k, storedDeployment).catch(() => undefined)));
    return records.flatMap((r) => (r ? [r.value] : []));
  }

  async route(projectSlug: string, organizationSlug: string): Promise<AppRoute | undefined> {
    return (await getRecord(this.kv, routeKey(projectSlug, organizationSlug), route))?.value;
  }

  /** Points a hosted address at a deployment; returns the route it replaced. */
  async switchRoute(projectSlug: string, organizationSlug: string, next: AppRoute): Promise<AppRoute | undefined> {
    let previous: AppRoute | undefined;
    await upsertRecord(this.kv, routeKey(projectSlug, organizationSlug), route, (current) => {
      previous = current;
      return next;
    });
    return previous;
  }

  /** Removes the route when it still points at `deploymentId` (a stop of the serving deployment). */
  async dropRoute(projectSlug: string, organizationSlug: string, deploymentId: string): Promise<void> {
    const key = routeKey(projectSlug, organizationSlug);
    const current = await getRecord(this.kv, key, route);
    if (current?.value.deployment_id === deploymentId) await this.kv.delete(key, { previousSeq: current.revision }).catch(() => undefined);
  }

  /** Every route as it changes (the gateway's cache): `onChange(key tail, route or undefined when deleted)`. */
  async watchRoutes(onChange: (address: string, value: AppRoute | undefined) => void): Promise<() => void> {
    const watcher = await this.kv.watch({ key: "route.>" });
    void (async () => {
      for await (const entry of watcher as AsyncIterable<KvEntry>) {
        const address = entry.key.slice("route.".length);
        if (entry.operation !== "PUT") onChange(address, undefined);
        else {
          try {
            onChange(address, decodeEntry(entry, route)?.value);
          } catch {
            onChange(address, undefined);
          }
        }
      }
    })();
    return () => watcher.stop();
  }
}
