import type { NatsConnection, Subscription } from "@nats-io/transport-node";
import { newSortableId } from "../../lib/ids.js";
import type { Logger } from "../../lib/log.js";
import { mapPage, type Page } from "../../lib/page.js";
import { subjects } from "../../lib/nats/subjects.js";
import type { AccountStore, Principal } from "../accounts/mod.js";
import type { ArtifactStore } from "../artifacts/mod.js";
import { errors, shown } from "../errors/mod.js";
import { hostedAddressOf, pathUrlOf } from "./addresses.js";
import * as states from "./deployment-states.js";
import { DEPLOYMENT_ID, nowSeconds, type AppRoute, type DeploymentObject, type DeploymentStore, type EffectiveTimeouts, type StoredDeployment } from "./deployments.js";
import type { LogLine } from "./instance.js";
import type { AppHostDirectory } from "./host-directory.js";
import { parseManifest, slugOf, type AppManifest } from "./manifest.js";
import { appHostReply, appLogEvent, encodeJson, endedEvent, type AppDemand, type AppHostCall, type AppLogEvent } from "./protocol.js";

// The gateway's side of hosted apps: deployments (create from an artifact, list, get, stop,
// logs), and the hosted addresses' routes (cached from the KV watch, so a hosted request costs no
// KV read). Which instances serve a deployment, the gateway learns from the app hosts'
// heartbeats (AppHostDirectory); the reconciler places them.

export interface AppServiceOptions {
  /** Hosted addresses are `<project slug>.<organization slug>.<appsDomain>`. */
  appsDomain: string;
  /** The scheme and port hosted addresses are reached on (hosted_url). */
  publicScheme: string;
  publicPort: () => number;
  /** The gateway's own address on its machine (`http://127.0.0.1:8080`): where local_url points. */
  localBase: () => string;
  rpcTimeoutMs: number;
  stopTimeoutMs: number;
  /** What a deployment whose manifest sets no `timeouts` (or one field only) gets. */
  defaultTimeouts: EffectiveTimeouts;
}

/**
 * A deployment as the API shows it: the stored object, and its path address on the answering
 * gateway (`local_url`, made when asked: it names this gateway's port, not the one that created
 * the deployment).
 */
export type PresentedDeployment = DeploymentObject & { local_url: string };

/** The deployment a hosted address serves. */
export interface HostedTarget {
  project: string;
  deploymentId: string;
  /** How long the app may take to its response head, and between bytes of its body. */
  timeouts: { requestMs: number; idleMs: number };
}

/** The recent log lines a deployment's logs show (its instances' together, the latest). */
const LOG_LINES_SHOWN = 200;

export class AppService {
  private readonly routes = new Map<string, AppRoute>();
  private stopWatch: (() => void) | undefined;

  constructor(
    private readonly nc: NatsConnection,
    private readonly store: DeploymentStore,
    private readonly artifacts: ArtifactStore,
    private readonly accounts: AccountStore,
    readonly hosts: AppHostDirectory,
    private readonly options: AppServiceOptions,
    private readonly log: Logger,
  ) {}

  async start(): Promise<void> {
    this.stopWatch = await this.store.watchRoutes((address, route) => {
      if (route) this.routes.set(address, route);
      else this.routes.delete(address);
    });
  }

  stop(): void {
    this.stopWatch?.();
  }

  /** The `<project slug>.<organization slug>` of a Host header under the apps domain, or undefined. */
  hostedAddress(host: string | undefined): string | undefined {
    return hostedAddressOf(host, this.options.appsDomain);
  }

  /** The deployment a hosted address serves when the route cache holds it (no wait: the usual case). */
  resolveCached(address: string): HostedTarget | undefined {
    const route = this.routes.get(address);
    return route && this.targetOf(route);
  }

  /** The deployment a hosted address serves (the cache first; `fresh` reads KV, after a refused exchange). */
  async resolve(address: string, fresh = false): Promise<HostedTarget | undefined> {
    let route = fresh ? undefined : this.routes.get(address);
    if (!route) {
      const [projectSlug, organizationSlug] = address.split(".") as [string, string];
      route = await this.store.route(projectSlug, organizationSlug);
      if (route) this.routes.set(address, route);
    }
    return route && this.targetOf(route);
  }

  /** True when the deployment still runs (it is not final): worth waiting for an instance of. */
  async isLive(target: HostedTarget): Promise<boolean> {
    const record = await this.store.get(target.project, target.deploymentId);
    return record !== undefined && !states.isFinal(record.deployment.status);
  }

  /** Asks the reconciler for an instance of a deployment none serves (scaled to zero, or all lost). */
  demand(target: HostedTarget): void {
    this.nc.publish(subjects.appDemand, encodeJson({ project: target.project, deployment_id: target.deploymentId } satisfies AppDemand));
  }

  private targetOf(route: AppRoute): HostedTarget {
    const timeouts = route.timeouts ?? this.options.defaultTimeouts;
    return { project: route.project, deploymentId: route.deployment_id, timeouts: { requestMs: timeouts.request_seconds * 1000, idleMs: timeouts.idle_seconds * 1000 } };
  }

  hostedUrl(manifest: Pick<AppManifest, "projectSlug" | "organizationSlug">): string {
    const port = this.options.publicPort();
    const defaultPort = this.options.publicScheme === "https" ? 443 : 80;
    return `${this.options.publicScheme}://${manifest.projectSlug}.${manifest.organizationSlug}.${this.options.appsDomain}${port === defaultPort ? "" : `:${port}`}`;
  }

  /** The deployment as the API shows it (with its local_url). */
  present(record: Pick<StoredDeployment, "deployment" | "manifest">): PresentedDeployment {
    return { ...record.deployment, local_url: pathUrlOf(this.options.localBase(), record.manifest) };
  }

  /** The slugs of the key's organization and project (their names as DNS labels). */
  private async slugs(principal: Principal): Promise<{ organizationSlug: string; projectSlug: string }> {
    const org = await this.accounts.getOrganization(principal.organizationId);
    const project = await this.accounts.getProject(principal.organizationId, principal.projectId);
    return { organizationSlug: slugOf(org?.name ?? principal.organizationId), projectSlug: slugOf(project?.name ?? principal.projectId) };
  }

  /**
   * Creates a deployment of an artifact (an app bundle with its manifest) and hands it to an app
   * host. The same bundle and manifest as the serving deployment change nothing: that one is
   * returned with `unchanged`.
   */
  async create(principal: Principal, body: unknown): Promise<{ deployment: PresentedDeployment; unchanged: boolean }> {
    if (typeof body !== "object" || body === null || Array.isArray(body)) throw errors.invalidParam(null, "The body must be a JSON object.", "invalid_type");
    for (const key of Object.keys(body)) if (key !== "artifact_id") throw errors.unknownParam(key.slice(0, 64));
    const artifactId = (body as { artifact_id?: unknown }).artifact_id;
    if (artifactId === undefined) throw errors.missingParam("artifact_id");
    if (typeof artifactId !== "string" || artifactId.length > 128) throw errors.invalidParam("artifact_id", "artifact_id must be an artifact id.", "invalid_type");
    const project = principal.projectId;
    const artifact = await this.artifacts.get(project, artifactId);
    if (!artifact) throw errors.notFound(`No such artifact: ${shown(artifactId)}`, "artifact_id");
    if (artifact.status !== "ready" || !artifact.sha256) throw errors.invalidParam("artifact_id", `The artifact ${artifactId} is still uploading: finish it first.`, "artifact_not_ready");
    if (artifact.manifest === null) throw errors.invalidParam("artifact_id", `The artifact ${artifactId} has no manifest: upload the bundle with its tributary.yaml.`, "missing_manifest");

    const offer = this.hosts.offer();
    if (!offer) throw errors.unavailable("No app host is running. Please retry shortly.", 5);
    const manifest = parseManifest(artifact.manifest, await this.slugs(principal), offer);

    const route = await this.store.route(manifest.projectSlug, manifest.organizationSlug);
    if (route && route.project !== project)
      throw errors.conflict(`The hosted address ${manifest.projectSlug}.${manifest.organizationSlug} belongs to another project.`, "manifest.project_slug", "address_taken");
    if (route && route.sha256 === artifact.sha256) {
      const current = await this.store.get(project, route.deployment_id);
      if (current && current.deployment.status === "healthy" && sameManifest(current.manifest, manifest)) return { deployment: this.present(current), unchanged: true };
    }

    if (!this.hosts.fits(manifest)) throw errors.unavailable("No app host has room for this app now. Please retry shortly.", 5);
    // A redeploy starts as many instances as the deployment it replaces runs (within its own bounds).
    const replaced = route ? await this.store.get(project, route.deployment_id) : undefined;
    const running = replaced && !states.isFinal(replaced.deployment.status) ? replaced.deployment.desired_instances : 0;
    const id = newSortableId("dep_");
    const deployment: DeploymentObject = {
      id,
      object: "app.deployment",
      status: "pending",
      reason: null,
      message: null,
      artifact_id: artifact.id,
      sha256: artifact.sha256,
      hosted_url: this.hostedUrl(manifest),
      entrypoint: manifest.entrypoint,
      resources: { cpu_mhz: manifest.cpuMhz, memory_size_mb: manifest.memorySizeMb, gpu_count: manifest.gpuCount },
      scaling: { min_instances: manifest.minInstances, max_instances: manifest.maxInstances, target_inflight: manifest.targetInflight },
      // At least one, even scaled to zero: a deploy proves the app answers.
      desired_instances: Math.min(manifest.maxInstances, Math.max(manifest.minInstances, 1, running)),
      instances: [],
      env_names: Object.keys(manifest.env),
      secrets: manifest.secrets,
      restarts: 0,
      created_at: nowSeconds(),
      healthy_at: null,
      ended_at: null,
      replaces: route?.deployment_id ?? null,
      superseded_by: null,
      last_logs: [],
      timeouts: {
        request_seconds: manifest.timeouts?.requestSeconds ?? this.options.defaultTimeouts.request_seconds,
        idle_seconds: manifest.timeouts?.idleSeconds ?? this.options.defaultTimeouts.idle_seconds,
      },
    };
    // What should run; the reconciler (on an actor host) places its instances.
    const record: StoredDeployment = { deployment, project, manifest };
    await this.store.create(record);
    return { deployment: this.present(record), unchanged: false };
  }

  /** A page of the project's deployments, newest first: `limit` 1 to 100, `after` a deployment id. */
  async list(principal: Principal, query: { limit: number; after?: string | undefined }): Promise<Page<PresentedDeployment>> {
    if (query.after !== undefined && !DEPLOYMENT_ID.test(query.after))
      throw errors.invalidParam("after", `Invalid value for 'after': expected a deployment id, got '${shown(query.after)}'.`);
    const page = await this.store.list(principal.projectId, { ...query, order: "desc" });
    return mapPage(page, (r) => this.present(r));
  }

  async get(principal: Principal, id: string): Promise<StoredDeployment> {
    const record = DEPLOYMENT_ID.test(id) ? await this.store.get(principal.projectId, id) : undefined;
    if (!record) throw errors.notFound(`No such deployment: ${id.slice(0, 64)}`, "deployment_id");
    return record;
  }

  /**
   * Stops a deployment: its record ends (so nothing places it again) and its address stops
   * routing to it; answered once the hosts running its instances stopped them (a host that does
   * not answer has its instances stopped by the reconciler, as no record wants them).
   */
  async stopDeployment(principal: Principal, id: string): Promise<PresentedDeployment> {
    const record = await this.get(principal, id);
    if (states.isFinal(record.deployment.status)) return this.present(record);
    let placed: string[] = [];
    await this.store.apply(record.project, id, (cur) => {
      placed = cur.instances.map((i) => i.host);
      return states.end(cur, states.stoppedBy("user_stop"), nowSeconds());
    });
    await this.store.dropRoute(record.manifest.projectSlug, record.manifest.organizationSlug, id);
    const call: AppHostCall = { op: "stop", project: record.project, deployment_id: id, reason: "user_stop" };
    // Answered once the instances ended: uvicorn's grace plus a margin.
    await Promise.all(
      [...new Set(placed)].filter((hostId) => this.hosts.alive(hostId)).map((hostId) => this.nc.request(subjects.appHostRpc(hostId), encodeJson(call), { timeout: this.options.stopTimeoutMs }).catch(() => undefined)),
    );
    this.nc.publish(subjects.appLogs(id), endedEvent("stopped"));
    return this.present(await this.get(principal, id));
  }

  /** The recent log lines: the live instances' (from their hosts), else those its record kept. */
  async logs(principal: Principal, id: string): Promise<LogLine[]> {
    const record = await this.get(principal, id);
    const hosts = [...new Set(record.deployment.instances.map((i) => i.host))].filter((hostId) => this.hosts.alive(hostId));
    if (hosts.length > 0 && !states.isFinal(record.deployment.status)) {
      const call: AppHostCall = { op: "logs", project: record.project, deployment_id: id };
      const replies = await Promise.all(
        hosts.map(async (hostId) => {
          try {
            const msg = await this.nc.request(subjects.appHostRpc(hostId), encodeJson(call), { timeout: this.options.rpcTimeoutMs });
            return appHostReply.parseBytes("app host", msg.data).logs;
          } catch {
            return undefined;
          }
        }),
      );
      const lines = replies.flatMap((r) => r ?? []);
      if (replies.some((r) => r !== undefined)) return lines.sort((a, b) => a.at - b.at).slice(-LOG_LINES_SHOWN);
    }
    return record.deployment.last_logs.map((line) => ({ at: 0, stream: "stderr" as const, line }));
  }

  /** Log lines as they are written, until the deployment ends (`end`) or the caller unsubscribes. */
  followLogs(id: string, onEvent: (event: AppLogEvent) => void): Subscription {
    return this.nc.subscribe(subjects.appLogs(id), {
      callback: (err, msg) => {
        if (err) return;
        try {
          onEvent(appLogEvent.parseBytes(msg.subject, msg.data));
        } catch {
          this.log.debug("a log line of an app did not decode", { deploymentId: id });
        }
      },
    });
  }
}

function sameManifest(a: AppManifest, b: AppManifest): boolean {
  return JSON.stringify(normalize(a)) === JSON.stringify(normalize(b));
}

function normalize(m: AppManifest): unknown {
  return { ...m, env: Object.fromEntries(Object.entries(m.env).sort(([x], [y]) => (x < y ? -1 : 1))), secrets: [...m.secrets].sort() };
}
