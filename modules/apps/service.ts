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
import { parseManifest, slugOf, type AppHostOffer, type AppManifest } from "./manifest.js";
import { appHostHeartbeat, appHostReply, appLogEvent, encodeJson, type AppHostCall, type AppHostHeartbeat, type AppLogEvent } from "./protocol.js";

// The gateway's side of hosted apps: the app hosts it hears (capacity, liveness), deployments
// (create from an artifact, list, get, stop, logs), and the hosted addresses' routes (cached
// from the KV watch, so a hosted request costs no KV read).

interface HostView extends AppHostHeartbeat {
  lastSeen: number;
}

export class AppHostDirectory {
  private readonly hosts = new Map<string, HostView>();
  private subscription: Subscription | undefined;

  constructor(private readonly nc: NatsConnection, private readonly hostTimeoutMs: number) {}

  start(): void {
    this.subscription = this.nc.subscribe(subjects.appHostHeartbeat, {
      callback: (err, msg) => {
        if (err) return;
        try {
          const beat = appHostHeartbeat.parseBytes(msg.subject, msg.data);
          this.hosts.set(beat.host_id, { ...beat, lastSeen: performance.now() });
        } catch {
          // a heartbeat that does not decode leaves the host looking silent
        }
      },
    });
  }

  stop(): void {
    this.subscription?.unsubscribe();
  }

  alive(hostId: string): boolean {
    const h = this.hosts.get(hostId);
    return h !== undefined && performance.now() - h.lastSeen <= this.hostTimeoutMs;
  }

  /** The largest instance a live app host could run (its totals); undefined when none is alive. */
  offer(): AppHostOffer | undefined {
    let out: AppHostOffer | undefined;
    for (const h of this.hosts.values()) {
      if (!this.alive(h.host_id)) continue;
      out = { maxCpuMhz: Math.max(out?.maxCpuMhz ?? 0, h.cpu_mhz_total), maxMemoryMb: Math.max(out?.maxMemoryMb ?? 0, h.memory_mb_total), maxGpuCount: Math.max(out?.maxGpuCount ?? 0, h.gpu_count) };
    }
    return out;
  }

  /** A live, ready host with room for the manifest's instance (the most memory free), or undefined. */
  place(manifest: AppManifest): string | undefined {
    let best: HostView | undefined;
    for (const h of this.hosts.values()) {
      if (!this.alive(h.host_id) || h.state !== "ready") continue;
      if (h.cpu_mhz_free < manifest.cpuMhz || h.memory_mb_free < manifest.memorySizeMb || h.gpu_count < manifest.gpuCount) continue;
      if (!best || h.memory_mb_free > best.memory_mb_free) best = h;
    }
    if (!best) return undefined;
    best.cpu_mhz_free -= manifest.cpuMhz;
    best.memory_mb_free -= manifest.memorySizeMb;
    return best.host_id;
  }
}

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

/** Where a hosted request goes. */
export interface HostedTarget {
  project: string;
  deploymentId: string;
  hostId: string;
  /** How long the app may take to its response head, and between bytes of its body. */
  timeouts: { requestMs: number; idleMs: number };
}

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

  private targetOf(route: AppRoute): HostedTarget {
    const timeouts = route.timeouts ?? this.options.defaultTimeouts;
    return { project: route.project, deploymentId: route.deployment_id, hostId: route.host_id, timeouts: { requestMs: timeouts.request_seconds * 1000, idleMs: timeouts.idle_seconds * 1000 } };
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

    const hostId = this.hosts.place(manifest);
    if (!hostId) throw errors.unavailable("No app host has room for this app now. Please retry shortly.", 5);
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
    const record: StoredDeployment = { deployment, project, host_id: hostId, manifest };
    await this.store.create(record);
    try {
      const reply = appHostReply.parseBytes("app host", (await this.nc.request(subjects.appHostRpc(hostId), encodeJson({ op: "deploy", project, deployment_id: id } satisfies AppHostCall), { timeout: this.options.rpcTimeoutMs })).data);
      if (!reply.ok) throw new Error(reply.message ?? "refused");
    } catch (err) {
      const ending = states.placementFailed("host_lost", `the app host did not take the deployment: ${(err as Error).message}`);
      await this.store.transition(project, id, (cur) => states.end(cur, ending, nowSeconds()));
      throw errors.unavailable("The app host did not answer. Please retry shortly.", 2);
    }
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

  /** Stops a deployment (its host drops the route when it serves the address). */
  async stopDeployment(principal: Principal, id: string): Promise<PresentedDeployment> {
    const record = await this.get(principal, id);
    if (states.isFinal(record.deployment.status)) return this.present(record);
    const call: AppHostCall = { op: "stop", project: record.project, deployment_id: id, reason: "user_stop", superseded_by: null };
    if (this.hosts.alive(record.host_id)) {
      try {
        // Answered once the instance ended: uvicorn's grace plus a margin.
        await this.nc.request(subjects.appHostRpc(record.host_id), encodeJson(call), { timeout: this.options.stopTimeoutMs });
      } catch {
        throw errors.unavailable("The deployment's app host did not answer. Please retry shortly.", 2);
      }
    } else {
      // Its host is gone: nothing runs it any more.
      await this.store.transition(record.project, id, (cur) => states.end(cur, states.stoppedBy("user_stop"), nowSeconds()));
      await this.store.dropRoute(record.manifest.projectSlug, record.manifest.organizationSlug, id);
    }
    return this.present(await this.get(principal, id));
  }

  /** The recent log lines: the live instance's (from its host), else those its record kept. */
  async logs(principal: Principal, id: string): Promise<LogLine[]> {
    const record = await this.get(principal, id);
    if (this.hosts.alive(record.host_id) && !states.isFinal(record.deployment.status)) {
      try {
        const msg = await this.nc.request(subjects.appHostRpc(record.host_id), encodeJson({ op: "logs", project: record.project, deployment_id: id } satisfies AppHostCall), { timeout: this.options.rpcTimeoutMs });
        return appHostReply.parseBytes("app host", msg.data).logs;
      } catch {
        // fall back to the record
      }
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
