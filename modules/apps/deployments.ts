import * as Effect from "effect/Effect";
import * as Schema from "effect/Schema";
import type { KV, KvEntry } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import { openKv } from "../../lib/nats/jetstream.js";
import { createRecord, decodeEntry, getRecord, modifyRecord, pageRecords, upsertRecord, valueSchema, type Modified, type Mutable, type Versioned } from "../../lib/nats/kv-records.js";
import type { Page, PageQuery } from "../../lib/page.js";
import { buckets, kvToken } from "../../lib/nats/subjects.js";
import { DEFAULT_TARGET_INFLIGHT } from "./manifest.js";

// Deployment records and the routes of hosted addresses (KV `tributary_app_deployments`).
//   <project>.<deployment id>        the deployment object (what should run: its desired count of
//                                    instances; where each runs), its project and manifest
//   route.<project slug>.<org slug>  the deployment a hosted address serves (and its project)
//   reconciler                       which actor host reconciles deployments now (reconciler.ts)
// A deployment's status and its instances move as deployment-states.ts says.

export const DEPLOYMENT_STATUSES = ["pending", "starting", "healthy", "failed", "superseded", "stopped"] as const;
export type DeploymentStatus = (typeof DEPLOYMENT_STATUSES)[number];
/** An instance: placed on a host that was told to start it, starting (or restarting), answering. */
export const INSTANCE_STATUSES = ["pending", "starting", "healthy"] as const;
export type InstanceStatus = (typeof INSTANCE_STATUSES)[number];
/** Instance ids: the prefix and 16 random base62 characters. */
export const INSTANCE_ID = /^ins_[0-9A-Za-z]{16}$/;
/** Deployment ids: the prefix and 24 base62 characters (newSortableId). */
export const DEPLOYMENT_ID = /^dep_[0-9A-Za-z]{24}$/;
/** Log lines a failed deployment's record keeps (the evidence of why). */
export const LAST_LOG_LINES = 50;

const InstanceSchema = Schema.Struct({
  id: Schema.String,
  /** The app host it was placed on. */
  host: Schema.String,
  status: Schema.Literals(INSTANCE_STATUSES),
  /** When it was placed (seconds). */
  started_at: Schema.Number,
});

// Fields records written before them lack decode as one instance, as every deployment had.
const ScalingSchema = Schema.Struct({ min_instances: Schema.Number, max_instances: Schema.Number, target_inflight: Schema.Number });
const oneInstance = () => Schema.Number.pipe(Schema.withDecodingDefaultKey(Effect.succeed(1)));
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
  /** The manifest's instance counts and scaling target. */
  scaling: ScalingSchema.pipe(Schema.withDecodingDefaultKey(Effect.succeed({ min_instances: 1, max_instances: 1, target_inflight: DEFAULT_TARGET_INFLIGHT }))),
  /** How many instances should run now: between min and max, moved by load (the reconciler). */
  desired_instances: oneInstance(),
  /** The instances placed for it (none once it is final). */
  instances: Schema.mutable(Schema.Array(InstanceSchema)).pipe(Schema.withDecodingDefaultKey(Effect.succeed([]))),
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
export type DeploymentInstance = DeploymentObject["instances"][number];

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
  minInstances: oneInstance(),
  maxInstances: oneInstance(),
  targetInflight: Schema.Number.pipe(Schema.withDecodingDefaultKey(Effect.succeed(DEFAULT_TARGET_INFLIGHT))),
  timeouts: Schema.optionalKey(Schema.Struct({ requestSeconds: Schema.optionalKey(Schema.Number), idleSeconds: Schema.optionalKey(Schema.Number) })),
});

const StoredDeploymentSchema = Schema.Struct({
  deployment: DeploymentObjectSchema,
  project: Schema.String,
  manifest: ManifestSchema,
});
export type StoredDeployment = Mutable<typeof StoredDeploymentSchema.Type>;
const storedDeployment = valueSchema<StoredDeployment>()(StoredDeploymentSchema);

// Which instances serve it is not in the route: gateways learn that from the app hosts' heartbeats.
/** `timeouts`: the deployment's (absent on routes written before: the gateway's defaults apply). */
const RouteSchema = Schema.Struct({ project: Schema.String, deployment_id: Schema.String, sha256: Schema.String, timeouts: Schema.optionalKey(EffectiveTimeoutsSchema) });
export type AppRoute = Mutable<typeof RouteSchema.Type>;
const route = valueSchema<AppRoute>()(RouteSchema);

export const nowSeconds = () => Math.floor(Date.now() / 1000);
/** The key of the record naming the actor host that reconciles deployments (one token: no deployment's key). */
export const RECONCILER_KEY = "reconciler";
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
    return (await this.apply(project, id, move))?.value;
  }

  /** `transition`, telling whether this call's move is what the record now holds, and its revision. */
  apply(project: string, id: string, move: (current: DeploymentObject) => DeploymentObject | undefined): Promise<Modified<StoredDeployment> | undefined> {
    return modifyRecord(this.kv, this.key(project, id), storedDeployment, (current) => {
      const next = move(current.deployment);
      return next ? { ...current, deployment: next } : undefined;
    });
  }

  /**
   * A page of a project's deployments (ids sort by creation time), those past `after` when
   * given. Records are kept, so a project's list only grows: pageRecords reads the page's
   * records from a recent window of the bucket, not all of them.
   */
  list(project: string, query: PageQuery): Promise<Page<StoredDeployment>> {
    return pageRecords(this.kv, kvToken(project), query, async (id) => (await getRecord(this.kv, this.key(project, id), storedDeployment).catch(() => undefined))?.value, { idPrefix: "dep_" });
  }

  /**
   * Every deployment record of every project (final ones too), then each change as it happens:
   * `onChange(record with its revision)`; routes and the reconciler's record are not deployments.
   */
  async watchDeployments(onChange: (record: Versioned<StoredDeployment>) => void): Promise<() => void> {
    const watcher = await this.kv.watch({ key: "*.*" });
    void (async () => {
      for await (const entry of watcher as AsyncIterable<KvEntry>) {
        if (entry.operation !== "PUT") continue;
        try {
          const record = decodeEntry(entry, storedDeployment);
          if (record) onChange(record);
        } catch {
          // a record that does not decode is nothing to reconcile
        }
      }
    })();
    return () => watcher.stop();
  }

  async route(projectSlug: string, organizationSlug: string): Promise<AppRoute | undefined> {
    return (await getRecord(this.kv, routeKey(projectSlug, organizationSlug), route))?.value;
  }

  /**
   * Points a hosted address at a deployment, unless it serves a newer one (ids sort by creation:
   * of two deployments becoming healthy out of order, the later deploy serves). Returns the route
   * it replaced, or `newer`: the deployment the address keeps serving.
   */
  async switchRoute(projectSlug: string, organizationSlug: string, next: AppRoute): Promise<{ previous: AppRoute | undefined } | { newer: AppRoute }> {
    let previous: AppRoute | undefined;
    let newer: AppRoute | undefined;
    await upsertRecord(this.kv, routeKey(projectSlug, organizationSlug), route, (current) => {
      previous = current;
      newer = current && current.deployment_id > next.deployment_id ? current : undefined;
      return newer ? undefined : next;
    });
    return newer ? { newer } : { previous };
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
