import { spawn } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { createGunzip } from "node:zlib";
import type { Msg, NatsConnection, Subscription } from "@nats-io/transport-node";
import type { Logger } from "../../lib/log.js";
import { subjects } from "../../lib/nats/subjects.js";
import type { ArtifactStore } from "../artifacts/mod.js";
import { walledCommand } from "../sandboxes/mod.js";
import type { SecretStore } from "../secrets/mod.js";
import { BoundedTar, BundleRefused, type BundleBounds } from "./bundle-archive.js";
import * as states from "./deployment-states.js";
import { LAST_LOG_LINES, nowSeconds, type DeploymentStore, type StoredDeployment } from "./deployments.js";
import { AppExchangeServer, type ExchangeTarget } from "./exchange-host.js";
import type { InstanceHostOptions, LogLine } from "./instance.js";
import type { AppManifest } from "./manifest.js";
import { AppConnectionPool } from "./app-http.js";
import { appHostCall, encodeJson, type AppHostCall, type AppHostHeartbeat, type AppHostReply } from "./protocol.js";
import { AppReplica, DEFAULT_REPLICA_POLICY, type ReplicaPolicy, type ReplicaStatus } from "./replica.js";

// An app host: runs deployments' instances on this machine (in the sandbox host process, under
// the same walls), serves HTTP exchanges to them over NATS, and owns the life of the deployments
// it was given: it writes their records (the moves of deployment-states.ts: starting, healthy,
// failed with logs), switches the hosted address to a new deployment once it is healthy, and
// drains the one it replaced.

export interface AppHostOptions {
  hostId: string;
  heartbeatMs: number;
  cpuMhz: number;
  memoryMb: number;
  gpuCount: number;
  instance: InstanceHostOptions;
  /** Where bundles are unpacked (a directory per deployment). */
  bundleRoot: string;
  /** What one bundle may unpack to. */
  bundleBounds: BundleBounds;
  policy: ReplicaPolicy;
  /** After a switch, how long the replaced instance still takes requests (gateways' route caches catch up). */
  switchDelayMs: number;
  /** Longest wait for the replaced instance's exchanges to finish before it is stopped. */
  drainMs: number;
  /** uvicorn's grace after SIGTERM before the instance is killed. */
  graceMs: number;
  /** Requests one instance serves at once (and connections to its socket); those beyond get a busy answer. */
  maxConcurrentPerInstance: number;
  /**
   * First host uid of the per-deployment range (when this process may change uid: root), of
   * `maxDeployments` uids; undefined: instances run as this process's uid.
   */
  uidBase: number | undefined;
  maxDeployments: number;
}

interface LiveDeployment {
  id: string;
  project: string;
  manifest: AppManifest;
  replica: AppReplica | undefined;
  /** Keep-alive connections to its instances' sockets. */
  pool: AppConnectionPool;
  inFlight: number;
  idleWaiters: Array<() => void>;
  bundleDir: string;
  ending: boolean;
  /** Its slot in the uid range (its instances' host uid is uidBase + slot). */
  slot: number | undefined;
}

export class AppHost {
  private readonly live = new Map<string, LiveDeployment>();
  private readonly exchanges: AppExchangeServer;
  private subscription: Subscription | undefined;
  private heartbeatTimer: NodeJS.Timeout | undefined;
  private draining = false;
  private readonly freeSlots: number[];

  constructor(
    private readonly nc: NatsConnection,
    private readonly deployments: DeploymentStore,
    private readonly artifacts: ArtifactStore,
    private readonly secrets: SecretStore,
    private readonly options: AppHostOptions,
    private readonly log: Logger,
  ) {
    this.exchanges = new AppExchangeServer(nc, options.hostId, (id) => this.target(id), log, options.maxConcurrentPerInstance);
    this.freeSlots = Array.from({ length: options.maxDeployments }, (_, i) => options.maxDeployments - 1 - i);
  }

  start(): void {
    // Traversable, not listable: an instance's uid reaches its own bundle and run directory only.
    mkdirSync(this.options.bundleRoot, { recursive: true, mode: 0o711 });
    mkdirSync(this.options.instance.runRoot, { recursive: true, mode: 0o711 });
    chmodSync(this.options.bundleRoot, 0o711);
    chmodSync(this.options.instance.runRoot, 0o711);
    this.exchanges.start();
    this.subscription = this.nc.subscribe(subjects.appHostRpc(this.options.hostId), {
      callback: (err, msg) => {
        if (!err) void this.onCall(msg);
      },
    });
    this.heartbeat();
    this.heartbeatTimer = setInterval(() => this.heartbeat(), this.options.heartbeatMs);
  }

  /** Ends every instance (records say stopped, host_stopped); routes stay for a host that comes back. */
  async stop(): Promise<void> {
    this.draining = true;
    this.heartbeat();
    this.subscription?.unsubscribe();
    this.exchanges.stop();
    await Promise.all([...this.live.values()].map((d) => this.end(d, states.stoppedBy("host_stopped", "the app host shut down"), 0)));
    clearInterval(this.heartbeatTimer);
  }

  private uidOf(d: LiveDeployment): number | undefined {
    return this.options.uidBase === undefined || d.slot === undefined ? undefined : this.options.uidBase + d.slot;
  }

  private target(deploymentId: string): ExchangeTarget | undefined {
    const d = this.live.get(deploymentId);
    const socketPath = d?.replica?.appSocket;
    if (!d || !socketPath) return undefined;
    d.inFlight++;
    let released = false;
    return {
      socketPath,
      pool: d.pool,
      release: () => {
        if (released) return;
        released = true;
        if (--d.inFlight === 0) for (const w of d.idleWaiters.splice(0)) w();
      },
    };
  }

  /** What the live deployments hold of this host's budget. */
  private used(): { cpu: number; memory: number; gpus: number } {
    let cpu = 0;
    let memory = 0;
    let gpus = 0;
    for (const d of this.live.values()) {
      cpu += d.manifest.cpuMhz;
      memory += d.manifest.memorySizeMb;
      gpus += d.manifest.gpuCount;
    }
    return { cpu, memory, gpus };
  }

  private heartbeat(): void {
    const { cpu, memory, gpus } = this.used();
    const beat: AppHostHeartbeat = {
      host_id: this.options.hostId,
      state: this.draining ? "draining" : "ready",
      interval_ms: this.options.heartbeatMs,
      cpu_mhz_total: this.options.cpuMhz,
      cpu_mhz_free: this.options.cpuMhz - cpu,
      memory_mb_total: this.options.memoryMb,
      memory_mb_free: this.options.memoryMb - memory,
      gpu_count: this.options.gpuCount - gpus,
      deployments: [...this.live.values()].map((d) => ({ deployment_id: d.id, state: d.replica?.current.state ?? "starting" })),
    };
    this.nc.publish(subjects.appHostHeartbeat, encodeJson(beat));
  }

  private async onCall(msg: Msg): Promise<void> {
    let call: AppHostCall;
    try {
      call = appHostCall.parseBytes(msg.subject, msg.data);
    } catch (err) {
      return this.reply(msg, { ok: false, message: `bad call: ${(err as Error).message}`, logs: [] });
    }
    try {
      if (call.op === "deploy") {
        if (this.draining) return this.reply(msg, { ok: false, message: "the app host is shutting down", logs: [] });
        // Accepted now; the record tells how it goes.
        this.reply(msg, { ok: true, message: null, logs: [] });
        await this.deploy(call.project, call.deployment_id);
        return;
      }
      if (call.op === "stop") {
        // A user's stop is answered once the instance ended and the record says so; a
        // supersede (from another host) drains in its own time.
        if (call.reason === "superseded") this.reply(msg, { ok: true, message: null, logs: [] });
        await this.stopDeployment(call.project, call.deployment_id, call.reason, call.superseded_by);
        if (call.reason === "user_stop") this.reply(msg, { ok: true, message: null, logs: [] });
        return;
      }
      const d = this.live.get(call.deployment_id);
      this.reply(msg, { ok: true, message: null, logs: d?.replica?.recentLogs() ?? [] });
    } catch (err) {
      this.log.error("app host call failed", { op: call.op, deploymentId: call.deployment_id, err });
    }
  }

  private reply(msg: Msg, reply: AppHostReply): void {
    if (msg.reply) msg.respond(encodeJson(reply));
  }

  private async deploy(project: string, id: string): Promise<void> {
    if (this.live.has(id)) return;
    const record = await this.deployments.get(project, id);
    if (!record || record.deployment.status !== "pending") return;
    const manifest = record.manifest as AppManifest;
    // Gateways place by heartbeats, which lag: the host holds its own budget and refuses past it.
    const used = this.used();
    const over =
      used.cpu + manifest.cpuMhz > this.options.cpuMhz ? "CPU" : used.memory + manifest.memorySizeMb > this.options.memoryMb ? "memory" : used.gpus + manifest.gpuCount > this.options.gpuCount ? "GPUs" : undefined;
    const slot = this.options.uidBase === undefined ? undefined : this.freeSlots.pop();
    if (this.options.uidBase !== undefined && slot === undefined && !over) {
      const ending = states.placementFailed("host_full", "the app host runs as many deployments as it has uids for; deploy again");
      await this.deployments.transition(project, id, (cur) => states.end(cur, ending, nowSeconds()));
      return;
    }
    if (over) {
      if (slot !== undefined) this.freeSlots.push(slot);
      const ending = states.placementFailed("host_full", `the app host had no ${over} left for it; deploy again`);
      await this.deployments.transition(project, id, (cur) => states.end(cur, ending, nowSeconds()));
      return;
    }
    const d: LiveDeployment = {
      id,
      project,
      manifest,
      replica: undefined,
      pool: new AppConnectionPool(this.options.maxConcurrentPerInstance),
      inFlight: 0,
      idleWaiters: [],
      bundleDir: join(this.options.bundleRoot, id),
      ending: false,
      slot,
    };
    this.live.set(id, d);
    const starting = await this.deployments.transition(project, id, states.start);
    if (starting?.deployment.status !== "starting") {
      // Stopped before it started (the stop found it here, or came before it did): it never runs.
      if (!d.ending) {
        this.live.delete(id);
        d.pool.destroy();
        if (d.slot !== undefined) this.freeSlots.push(d.slot);
      }
      return;
    }

    const problem = await this.prepareBundle(project, record, d.bundleDir).catch((err: Error) => ({ reason: "bundle_invalid", message: `the bundle could not be unpacked: ${err.message}` }));
    if (problem) return this.end(d, states.appFailed(problem.reason, problem.message), 0);

    let secretValues: Record<string, string> = {};
    if (manifest.secrets.length > 0) {
      const { values, missing } = await this.secrets.reveal(project, manifest.secrets);
      if (missing.length > 0) return this.end(d, states.appFailed("secret_missing", `secrets not found in the project: ${missing.join(", ")}`), 0);
      secretValues = values;
    }
    if (d.ending) return;
    const replica = new AppReplica(this.options.instance, { bundleDir: d.bundleDir, manifest, env: { ...manifest.env, ...secretValues }, uid: this.uidOf(d) }, id, this.options.policy);
    d.replica = replica;
    replica.onLog((line) => this.publishLog(id, line, false));
    const outcome = await replica.start();
    if (outcome.state !== "healthy") return this.end(d, states.appFailed(outcome.reason ?? "exited_before_healthy", outcome.message), 0);
    replica.onState((s) => void this.onReplicaState(d, s));

    const healthy = await this.deployments.transition(project, id, (cur) => states.serve(cur, outcome.restarts, nowSeconds()));
    if (!healthy || healthy.deployment.status !== "healthy") {
      // Stopped while it started: it never serves.
      return this.end(d, states.stoppedBy("user_stop"), 0);
    }
    // Switch: the hosted address serves this deployment from now on; the one it replaced drains.
    const timeouts = record.deployment.timeouts;
    const previous = await this.deployments.switchRoute(manifest.projectSlug, manifest.organizationSlug, { project, deployment_id: id, host_id: this.options.hostId, sha256: record.deployment.sha256, ...(timeouts ? { timeouts } : {}) });
    this.log.info("deployment healthy", { deploymentId: id, project, replaced: previous?.deployment_id ?? null });
    if (previous && previous.deployment_id !== id) {
      if (previous.host_id === this.options.hostId) void this.stopDeployment(previous.project, previous.deployment_id, "superseded", id);
      else this.nc.publish(subjects.appHostRpc(previous.host_id), encodeJson({ op: "stop", project: previous.project, deployment_id: previous.deployment_id, reason: "superseded", superseded_by: id } satisfies AppHostCall));
    }
  }

  private async onReplicaState(d: LiveDeployment, status: ReplicaStatus): Promise<void> {
    if (d.ending) return;
    if (status.state === "failed") return this.end(d, states.appFailed(status.reason ?? "crash_loop", status.message), 0);
    if (status.state === "healthy") await this.deployments.transition(d.project, d.id, (cur) => states.restarted(cur, status.restarts)).catch(() => undefined);
  }

  private async stopDeployment(project: string, id: string, reason: "user_stop" | "superseded", by: string | null): Promise<void> {
    const d = this.live.get(id);
    const ending = reason === "superseded" ? states.supersededBy(by) : states.stoppedBy("user_stop");
    if (!d) {
      await this.deployments.transition(project, id, (cur) => states.end(cur, ending, nowSeconds()));
      return;
    }
    if (reason === "user_stop") await this.deployments.dropRoute(d.manifest.projectSlug, d.manifest.organizationSlug, id);
    await this.end(d, ending, reason === "superseded" ? this.options.drainMs : 0);
  }

  /**
   * Ends a live deployment once: drains it (`drainMs` > 0: it keeps taking requests for the
   * switch delay, then its exchanges get up to `drainMs` to finish), stops its instance, writes
   * how it ended (with its last logs when it failed) and frees its bundle.
   */
  private async end(d: LiveDeployment, how: states.Ending, drainMs: number): Promise<void> {
    if (d.ending) return;
    d.ending = true;
    if (drainMs > 0) {
      await sleep(this.options.switchDelayMs);
      if (d.inFlight > 0) await Promise.race([new Promise<void>((resolve) => d.idleWaiters.push(resolve)), sleep(drainMs)]);
    }
    const logs = d.replica?.recentLogs() ?? [];
    await d.replica?.stop(this.options.graceMs);
    this.live.delete(d.id);
    d.pool.destroy();
    if (d.slot !== undefined) this.freeSlots.push(d.slot);
    rmSync(d.bundleDir, { recursive: true, force: true });
    // A failed deployment keeps its last lines, the evidence of why.
    const lastLogs = logs.slice(-LAST_LOG_LINES).map((l) => l.line);
    await this.deployments.transition(d.project, d.id, (cur) => states.end(cur, how, nowSeconds(), lastLogs)).catch((err) => this.log.error("deployment record update failed", { deploymentId: d.id, err }));
    this.publishLog(d.id, { at: Date.now(), stream: "stderr", line: `[tributary] deployment ${how.status}${how.reason ? ` (${how.reason})` : ""}` }, true);
    if (how.status === "failed") this.log.warn("deployment failed", { deploymentId: d.id, reason: how.reason, message: how.message });
    this.heartbeat();
  }

  private publishLog(id: string, line: LogLine, end: boolean): void {
    this.nc.publish(subjects.appLogs(id), encodeJson({ ...line, end }));
  }

  /**
   * Unpacks the bundle (tar.gz) behind the walls, streamed from the artifact store through its
   * bounds (BoundedTar) into tar; a problem (its reason and words), or undefined. A refused bundle
   * leaves nothing behind.
   */
  private async prepareBundle(project: string, record: StoredDeployment, dir: string): Promise<{ reason: "bundle_invalid" | "bundle_too_large"; message: string } | undefined> {
    mkdirSync(dir, { recursive: true, mode: 0o755 });
    const bounds = this.options.bundleBounds;
    // tar runs walled in too: whatever the archive holds (links, .. paths), it writes only below the bundle.
    const argv = walledCommand(this.options.instance.isolation, { memoryMb: 256, diskMb: Math.ceil(bounds.maxBytes / 1024 / 1024), cpuMhz: 1000, pids: 16, openFiles: 256 }, undefined, {
      mounts: ["--bind", dir, "/bundle"],
      env: { HOME: "/home/untar" },
      workdir: "/home/untar",
      // Readable by the instance's own uid whatever modes the archive carries (a 0700 top directory is common).
      argv: ["/bin/sh", "-c", "tar -xf - -C /bundle --no-same-owner --no-same-permissions && chmod -R a+rX,go-w /bundle"],
    });
    const tar = spawn(argv[0]!, argv.slice(1), { stdio: ["pipe", "ignore", "pipe"], env: {}, timeout: 60_000 });
    let stderr = "";
    tar.stderr!.setEncoding("utf8").on("data", (c: string) => {
      if (stderr.length < 4096) stderr += c;
    });
    const exited = new Promise<number | null>((resolve) => {
      tar.on("error", (err) => {
        stderr += err.message;
        resolve(null);
      });
      tar.on("exit", (code) => resolve(code));
    });
    const bounded = new BoundedTar(bounds);
    const fed = await pipeline(Readable.from(this.artifacts.content(project, record.deployment.artifact_id)), createGunzip(), bounded, tar.stdin!).then(
      () => undefined,
      (err: Error) => err,
    );
    const errorCode = fed && "code" in fed ? String(fed.code) : undefined;
    if (fed && errorCode !== "EPIPE") {
      // Refused while unpacking (or the store failed under it): tar stops where it is, and what it wrote goes.
      tar.kill("SIGKILL");
      await exited;
      rmSync(dir, { recursive: true, force: true });
      if (fed instanceof BundleRefused) return { reason: fed.reason, message: fed.message };
      if (errorCode?.startsWith("Z_")) return { reason: "bundle_invalid", message: "the bundle is not a gzip-compressed tar archive" };
      throw fed;
    }
    const code = await exited;
    if (code !== 0) {
      rmSync(dir, { recursive: true, force: true });
      return { reason: "bundle_invalid", message: `tar failed (${code}): ${stderr.trim().slice(0, 400)}` };
    }
    this.log.info("bundle unpacked", { deploymentId: record.deployment.id, files: bounded.entries, bytes: bounded.bytes });
    const modulePath = record.manifest.entrypoint.split(":")[0]!.split(".");
    const file = join(dir, ...modulePath);
    if (!existsSync(`${file}.py`) && !existsSync(join(file, "__init__.py")))
      return { reason: "bundle_invalid", message: `the entrypoint's module ${modulePath.join(".")} is not in the bundle (no ${modulePath.join("/")}.py or ${modulePath.join("/")}/__init__.py)` };
    return undefined;
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

export { DEFAULT_REPLICA_POLICY };
