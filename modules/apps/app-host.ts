import { spawn } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { createGunzip } from "node:zlib";
import type { Msg, NatsConnection, Subscription } from "@nats-io/transport-node";
import type { Logger } from "../../lib/log.js";
import { isTransientForSetup } from "../../lib/nats/outage.js";
import { retryJetStreamSetup, type SetupRetryPolicy } from "../../lib/nats/setup-retry.js";
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
import { appHostCall, encodeJson, endedEvent, refusal, type AppHostCall, type AppHostHeartbeat, type AppHostReply, type HostInstanceState } from "./protocol.js";
import { AppReplica, DEFAULT_REPLICA_POLICY, type ReplicaPolicy, type ReplicaStatus } from "./replica.js";

// An app host: runs instances of deployments on this machine (in the sandbox host process, under
// the same walls), serves HTTP exchanges to them over NATS, and says in its heartbeats what it
// runs (each instance's state and load). The reconciler places instances here (start_instance)
// and retires them; this host reports each one's health in its deployment's record (the moves of
// deployment-states.ts: starting, healthy, restarts), switches the hosted address to a deployment
// whose first instance answers and drains the one it replaced, and ends a deployment whose app
// fails for a reason of its own (crash loop, memory, health check, bundle, secrets). Its own end
// ends no deployment: the reconciler places its instances elsewhere, or here again once it is back.

/**
 * How long an instance's start waits out the stores it reads (bundle, secrets) failing over: a
 * JetStream stream elects a leader in seconds, but a node back from a partition can keep them
 * electing for half a minute and more.
 */
const STORE_OUTAGE_RETRY: SetupRetryPolicy = { initialBackoffMs: 250, maxBackoffMs: 5_000, giveUpAfterMs: 90_000 };

export interface AppHostOptions {
  hostId: string;
  heartbeatMs: number;
  cpuMhz: number;
  memoryMb: number;
  gpuCount: number;
  instance: InstanceHostOptions;
  /** Where bundles are unpacked (a directory per instance). */
  bundleRoot: string;
  /** What one bundle may unpack to. */
  bundleBounds: BundleBounds;
  policy: ReplicaPolicy;
  /** After an instance is told to stop (a redeploy switched, scaled down), how long it still takes requests (gateways catch up). */
  switchDelayMs: number;
  /** Longest wait for a stopping instance's exchanges to finish before it is stopped. */
  drainMs: number;
  /** uvicorn's grace after SIGTERM before the instance is killed. */
  graceMs: number;
  /** Requests one instance serves at once (and connections to its socket); those beyond get a busy answer. */
  maxConcurrentPerInstance: number;
  /**
   * First host uid of the per-instance range (when this process may change uid: root), of
   * `maxInstances` uids; undefined: instances run as this process's uid.
   */
  uidBase: number | undefined;
  maxInstances: number;
}

interface LiveInstance {
  id: string;
  deploymentId: string;
  project: string;
  manifest: AppManifest;
  replica: AppReplica | undefined;
  /** Keep-alive connections to its socket. */
  pool: AppConnectionPool;
  inFlight: number;
  /** Requests in flight integrated over time since the last regular heartbeat (ms), and when it last changed. */
  loadArea: number;
  loadSince: number;
  /** Requests in flight on average over the last heartbeat interval. */
  load: number;
  idleWaiters: Array<() => void>;
  bundleDir: string;
  /** running; stopping (told to stop: drains, then ends). */
  stopping: boolean;
  /** performance.now() from which a stopping instance takes no new exchange. */
  refuseFrom: number;
  /** Its slot in the uid range (its host uid is uidBase + slot). */
  slot: number | undefined;
  /** Its replica's restarts already added to the deployment's count. */
  restartsCounted: number;
}

/** How an instance stops: drained (its requests finish first) or at once (SIGTERM: uvicorn finishes what it holds). */
type StopHow = { drain: boolean; why: string };

export class AppHost {
  private readonly live = new Map<string, LiveInstance>();
  private readonly exchanges: AppExchangeServer;
  private subscription: Subscription | undefined;
  private heartbeatTimer: NodeJS.Timeout | undefined;
  private lastBeat = performance.now();
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
    this.exchanges = new AppExchangeServer(nc, options.hostId, (deploymentId, instanceId) => this.target(deploymentId, instanceId), log, options.maxConcurrentPerInstance);
    this.freeSlots = Array.from({ length: options.maxInstances }, (_, i) => options.maxInstances - 1 - i);
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
    this.heartbeatTimer = setInterval(() => this.heartbeat(true), this.options.heartbeatMs);
  }

  /**
   * Stops every instance, and takes them out of their records: the reconciler places them on
   * another host at once (their deployments stay as they were: this host's end is not theirs).
   */
  async stop(): Promise<void> {
    this.draining = true;
    this.heartbeat();
    this.subscription?.unsubscribe();
    this.exchanges.stop();
    const instances = [...this.live.values()];
    await Promise.all(instances.map((i) => this.stopInstance(i, { drain: false, why: "its app host shut down" })));
    await Promise.all(instances.map((i) => this.deployments.transition(i.project, i.deploymentId, (cur) => states.dropInstance(cur, i.id)).catch(() => undefined)));
    clearInterval(this.heartbeatTimer);
  }

  private uidOf(i: LiveInstance): number | undefined {
    return this.options.uidBase === undefined || i.slot === undefined ? undefined : this.options.uidBase + i.slot;
  }

  /** The instance an exchange goes to: the one the gateway chose, else the least busy of the deployment's here. */
  private target(deploymentId: string, instanceId: string): ExchangeTarget | undefined {
    let chosen = instanceId ? this.live.get(instanceId) : undefined;
    if (!instanceId)
      for (const i of this.live.values()) if (i.deploymentId === deploymentId && this.serves(i) && (!chosen || i.inFlight < chosen.inFlight)) chosen = i;
    if (!chosen || chosen.deploymentId !== deploymentId || !this.serves(chosen)) return undefined;
    const instance = chosen;
    const socketPath = instance.replica!.appSocket!;
    this.countInFlight(instance, +1);
    let released = false;
    return {
      socketPath,
      pool: instance.pool,
      release: () => {
        if (released) return;
        released = true;
        this.countInFlight(instance, -1);
        if (instance.inFlight === 0) for (const w of instance.idleWaiters.splice(0)) w();
      },
    };
  }

  /** Takes new exchanges: answering, and not stopping (or within the switch delay of its stop). */
  private serves(i: LiveInstance): boolean {
    return i.replica?.appSocket !== undefined && (!i.stopping || performance.now() < i.refuseFrom);
  }

  private countInFlight(i: LiveInstance, delta: number): void {
    const now = performance.now();
    i.loadArea += i.inFlight * (now - i.loadSince);
    i.loadSince = now;
    i.inFlight += delta;
  }

  /** What the instances here hold of this host's budget. */
  private used(): { cpu: number; memory: number; gpus: number } {
    let cpu = 0;
    let memory = 0;
    let gpus = 0;
    for (const i of this.live.values()) {
      cpu += i.manifest.cpuMhz;
      memory += i.manifest.memorySizeMb;
      gpus += i.manifest.gpuCount;
    }
    return { cpu, memory, gpus };
  }

  /**
   * Says what runs here. `regular` (the timer's): each instance's load is measured anew, its
   * requests in flight on average since the last regular heartbeat, rounded up (a request of a
   * fraction of a millisecond still counts: it keeps a scale-to-zero app running); a heartbeat
   * sent at once on a change repeats the last measure.
   */
  private heartbeat(regular = false): void {
    const { cpu, memory, gpus } = this.used();
    const now = performance.now();
    const interval = Math.max(1, now - this.lastBeat);
    if (regular) this.lastBeat = now;
    const instances: AppHostHeartbeat["instances"] = [];
    for (const i of this.live.values()) {
      if (regular) {
        i.loadArea += i.inFlight * (now - i.loadSince);
        i.loadSince = now;
        i.load = Math.ceil((i.loadArea / interval) * 1000) / 1000;
        i.loadArea = 0;
      }
      const state: HostInstanceState = i.stopping ? "stopping" : i.replica?.current.state === "healthy" ? "healthy" : "starting";
      instances.push({ instance_id: i.id, project: i.project, deployment_id: i.deploymentId, state, in_flight: i.inFlight, load: i.load });
    }
    const beat: AppHostHeartbeat = {
      host_id: this.options.hostId,
      state: this.draining ? "draining" : "ready",
      interval_ms: this.options.heartbeatMs,
      cpu_mhz_total: this.options.cpuMhz,
      cpu_mhz_free: this.options.cpuMhz - cpu,
      memory_mb_total: this.options.memoryMb,
      memory_mb_free: this.options.memoryMb - memory,
      gpu_count: this.options.gpuCount - gpus,
      instances,
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
      switch (call.op) {
        case "start_instance": {
          const admitted = await this.admit(call.project, call.deployment_id, call.instance_id);
          if (typeof admitted === "string") return this.reply(msg, { ok: false, message: admitted, logs: [] });
          // Accepted now; the record tells how it goes.
          this.reply(msg, { ok: true, message: null, logs: [] });
          if (admitted) await this.runInstance(admitted.instance, admitted.record);
          return;
        }
        case "stop_instance": {
          const instance = this.live.get(call.instance_id);
          this.reply(msg, { ok: true, message: null, logs: [] });
          if (instance?.deploymentId === call.deployment_id) await this.stopInstance(instance, { drain: true, why: call.reason === "retired" ? "scaled down" : "no deployment wants it" });
          return;
        }
        case "stop": {
          // A user's stop is answered once its instances here ended; other ends drain in their own time.
          if (call.reason !== "user_stop") this.reply(msg, { ok: true, message: null, logs: [] });
          await this.stopDeployment(call.deployment_id, call.reason);
          if (call.reason === "user_stop") this.reply(msg, { ok: true, message: null, logs: [] });
          return;
        }
        case "logs": {
          const lines = [...this.live.values()].filter((i) => i.deploymentId === call.deployment_id).flatMap((i) => i.replica?.recentLogs() ?? []);
          return this.reply(msg, { ok: true, message: null, logs: lines.sort((a, b) => a.at - b.at) });
        }
      }
    } catch (err) {
      this.log.error("app host call failed", { op: call.op, deploymentId: call.deployment_id, err });
    }
  }

  private reply(msg: Msg, reply: AppHostReply): void {
    if (msg.reply) msg.respond(encodeJson(reply));
  }

  /**
   * Takes an instance the reconciler placed here, within this host's own budget (the reconciler
   * places by heartbeats, which lag): the instance and its record, null when it runs here
   * already, or why not (the reconciler places it elsewhere).
   */
  private async admit(project: string, deploymentId: string, instanceId: string): Promise<{ instance: LiveInstance; record: StoredDeployment } | null | string> {
    if (this.draining) return refusal("host_draining", "the app host is shutting down");
    if (this.live.has(instanceId)) return null;
    const record = await this.deployments.get(project, deploymentId);
    if (!record || states.isFinal(record.deployment.status) || !record.deployment.instances.some((i) => i.id === instanceId)) return refusal("unwanted", "the deployment does not want this instance");
    if (this.draining) return refusal("host_draining", "the app host is shutting down");
    if (this.live.has(instanceId)) return null;
    const manifest = record.manifest as AppManifest;
    const used = this.used();
    const over =
      used.cpu + manifest.cpuMhz > this.options.cpuMhz ? "CPU" : used.memory + manifest.memorySizeMb > this.options.memoryMb ? "memory" : used.gpus + manifest.gpuCount > this.options.gpuCount ? "GPUs" : undefined;
    if (over) return refusal("host_full", `the app host has no ${over} left for it`);
    const slot = this.options.uidBase === undefined ? undefined : this.freeSlots.pop();
    if (this.options.uidBase !== undefined && slot === undefined) return refusal("host_full", "the app host runs as many instances as it has uids for");
    const now = performance.now();
    const instance: LiveInstance = {
      id: instanceId,
      deploymentId,
      project,
      manifest,
      replica: undefined,
      pool: new AppConnectionPool(this.options.maxConcurrentPerInstance),
      inFlight: 0,
      loadArea: 0,
      loadSince: now,
      load: 0,
      idleWaiters: [],
      bundleDir: join(this.options.bundleRoot, instanceId),
      stopping: false,
      refuseFrom: Infinity,
      slot,
      restartsCounted: 0,
    };
    this.live.set(instanceId, instance);
    this.heartbeat();
    return { instance, record };
  }

  /**
   * Runs an instance placed here (startInstance). A failure that is not the deployment's own (the
   * stores it reads out of reach past STORE_OUTAGE_RETRY, its record not writable) gives this
   * instance up, not the deployment: the reconciler places another once this host reports it gone.
   */
  private async runInstance(instance: LiveInstance, record: StoredDeployment): Promise<void> {
    try {
      await this.startInstance(instance, record);
    } catch (err) {
      this.log.warn("app instance could not start; giving it up", { deploymentId: instance.deploymentId, instanceId: instance.id, err });
      await this.stopInstance(instance, { drain: false, why: `it could not start: ${(err as Error).message}` });
    }
  }

  /** Marks the instance starting in its record, unpacks the bundle, starts uvicorn and reports how it goes. */
  private async startInstance(instance: LiveInstance, record: StoredDeployment): Promise<void> {
    const { project, deploymentId, manifest } = instance;
    const starting = await this.deployments.transition(project, deploymentId, (cur) => states.instanceStarting(cur, instance.id));
    if (!starting?.deployment.instances.some((i) => i.id === instance.id)) return this.stopInstance(instance, { drain: false, why: "its deployment no longer wants it" });

    // The artifact store failing over (a stream electing a leader after a partition) is waited
    // out, and past that throws (the instance is given up); anything else wrong with the bundle
    // fails the deployment.
    const problem = await retryJetStreamSetup(`bundle of ${deploymentId}`, () => this.prepareBundle(project, record, instance.bundleDir), { policy: STORE_OUTAGE_RETRY, log: this.log }).catch((err: Error) => {
      if (isTransientForSetup(err)) throw err;
      return { reason: "bundle_invalid" as const, message: `the bundle could not be unpacked: ${err.message}` };
    });
    if (instance.stopping) return;
    if (problem) return this.failDeployment(instance, states.appFailed(problem.reason, problem.message));

    let secretValues: Record<string, string> = {};
    if (manifest.secrets.length > 0) {
      const { values, missing } = await retryJetStreamSetup(`secrets of ${deploymentId}`, () => this.secrets.reveal(project, manifest.secrets), { policy: STORE_OUTAGE_RETRY, log: this.log });
      if (missing.length > 0) return this.failDeployment(instance, states.appFailed("secret_missing", `secrets not found in the project: ${missing.join(", ")}`));
      secretValues = values;
    }
    if (instance.stopping) return;
    const replica = new AppReplica(this.options.instance, { bundleDir: instance.bundleDir, manifest, env: { ...manifest.env, ...secretValues }, uid: this.uidOf(instance) }, instance.id, this.options.policy);
    instance.replica = replica;
    replica.onLog((line) => this.publishLog(deploymentId, line, false));
    const outcome = await replica.start();
    // Stopped meanwhile: its stop took care of it.
    if (instance.stopping) return;
    if (outcome.state !== "healthy") return this.failDeployment(instance, states.appFailed(outcome.reason ?? "exited_before_healthy", outcome.message));
    replica.onState((status) => void this.onReplicaState(instance, status));
    await this.reportHealthy(instance, outcome.restarts);
  }

  private async onReplicaState(instance: LiveInstance, status: ReplicaStatus): Promise<void> {
    if (instance.stopping) return;
    if (status.state === "failed") return this.failDeployment(instance, states.appFailed(status.reason ?? "crash_loop", status.message));
    if (status.state === "starting") {
      this.heartbeat();
      await this.deployments.transition(instance.project, instance.deploymentId, (cur) => states.instanceStarting(cur, instance.id)).catch(() => undefined);
    }
    if (status.state === "healthy") await this.reportHealthy(instance, status.restarts).catch((err) => this.log.warn("app instance report failed", { instanceId: instance.id, err }));
  }

  /**
   * The instance answers: its record says so (with its restarts since the last report), and the
   * first instance of a deployment to answer switches its hosted address to it, the deployment
   * it replaced ending as superseded. An instance its record no longer lists stops.
   */
  private async reportHealthy(instance: LiveInstance, restarts: number): Promise<void> {
    const { project, deploymentId, manifest } = instance;
    const counted = restarts - instance.restartsCounted;
    // Gateways hear it first (a request waiting for a cold start goes at once), then the record says so.
    this.heartbeat();
    let first = false;
    const result = await this.deployments.apply(project, deploymentId, (cur) => {
      first = cur.status !== "healthy";
      const healthy = states.instanceHealthy(cur, instance.id, nowSeconds());
      return healthy && (states.restarted(healthy, counted) ?? healthy);
    });
    if (!result?.changed) return this.stopInstance(instance, { drain: false, why: "its deployment no longer wants it" });
    instance.restartsCounted = restarts;
    if (!first) return;
    // The address serves this deployment from now on (unless a newer one serves it already).
    const { sha256, timeouts } = result.value.deployment;
    const switched = await this.deployments.switchRoute(manifest.projectSlug, manifest.organizationSlug, { project, deployment_id: deploymentId, sha256, ...(timeouts ? { timeouts } : {}) });
    if ("newer" in switched) {
      this.log.info("deployment healthy after a newer one: it is superseded", { deploymentId, by: switched.newer.deployment_id });
      return this.endDeployment(project, deploymentId, states.supersededBy(switched.newer.deployment_id), "superseded");
    }
    const previous = switched.previous;
    this.log.info("deployment healthy", { deploymentId, project, replaced: previous?.deployment_id ?? null });
    if (previous && previous.deployment_id !== deploymentId) await this.endDeployment(previous.project, previous.deployment_id, states.supersededBy(deploymentId), "superseded");
  }

  /**
   * Ends a deployment (its record first, then its instances: here, and on the other hosts its
   * record placed them on). `lastLogs`: the evidence a failed one keeps.
   */
  private async endDeployment(project: string, deploymentId: string, ending: states.Ending, reason: "superseded" | "failed", lastLogs: string[] = []): Promise<void> {
    let placed: string[] = [];
    await this.deployments
      .apply(project, deploymentId, (cur) => {
        placed = cur.instances.map((i) => i.host);
        return states.end(cur, ending, nowSeconds(), lastLogs);
      })
      .catch((err) => this.log.error("deployment record update failed", { deploymentId, err }));
    for (const hostId of new Set(placed))
      if (hostId !== this.options.hostId) this.nc.publish(subjects.appHostRpc(hostId), encodeJson({ op: "stop", project, deployment_id: deploymentId, reason } satisfies AppHostCall));
    await this.stopDeployment(deploymentId, reason);
  }

  /** The app failed for a reason of its own: the deployment fails, with the instance's last log lines. */
  private async failDeployment(instance: LiveInstance, ending: states.Ending): Promise<void> {
    const lastLogs = (instance.replica?.recentLogs() ?? []).slice(-LAST_LOG_LINES).map((l) => l.line);
    if (ending.status === "failed") this.log.warn("deployment failed", { deploymentId: instance.deploymentId, instanceId: instance.id, reason: ending.reason, message: ending.message });
    await this.endDeployment(instance.project, instance.deploymentId, ending, "failed", lastLogs);
  }

  /** Its record ended (or ends now): its instances here stop; followers of its logs hear the end. */
  private async stopDeployment(deploymentId: string, reason: "user_stop" | "superseded" | "failed"): Promise<void> {
    const instances = [...this.live.values()].filter((i) => i.deploymentId === deploymentId);
    const how = { drain: reason === "superseded", why: reason === "superseded" ? "a newer deployment serves its address" : reason === "failed" ? "its deployment failed" : "its deployment was stopped" };
    await Promise.all(instances.map((i) => this.stopInstance(i, how)));
    this.nc.publish(subjects.appLogs(deploymentId), endedEvent(reason === "user_stop" ? "stopped" : reason));
  }

  /**
   * Stops an instance once: drained (it says `stopping` at once, still takes requests for the
   * switch delay, then its exchanges get up to `drainMs`), or at once; then frees its resources.
   */
  private async stopInstance(instance: LiveInstance, how: StopHow): Promise<void> {
    if (instance.stopping) return;
    instance.stopping = true;
    instance.refuseFrom = performance.now() + (how.drain ? this.options.switchDelayMs : 0);
    this.heartbeat();
    if (how.drain) {
      await sleep(this.options.switchDelayMs);
      if (instance.inFlight > 0) await Promise.race([new Promise<void>((resolve) => instance.idleWaiters.push(resolve)), sleep(this.options.drainMs)]);
    }
    await instance.replica?.stop(this.options.graceMs);
    this.live.delete(instance.id);
    instance.pool.destroy();
    if (instance.slot !== undefined) this.freeSlots.push(instance.slot);
    rmSync(instance.bundleDir, { recursive: true, force: true });
    this.publishLog(instance.deploymentId, { at: Date.now(), stream: "stderr", line: `[tributary] instance ${instance.id} stopped: ${how.why}` }, false);
    this.heartbeat();
  }

  private publishLog(deploymentId: string, line: LogLine, end: boolean): void {
    this.nc.publish(subjects.appLogs(deploymentId), encodeJson({ ...line, end }));
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
