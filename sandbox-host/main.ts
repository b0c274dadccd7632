// The sandbox host process: runs sandboxes (bubblewrap-isolated process trees) on this machine
// for the gateways, announcing its capacity in heartbeats. Refuses to start when it cannot
// isolate (no user namespaces, no bubblewrap): it never runs code unconfined.
//   node dist/sandbox-host/main.js
import { availableParallelism, hostname, tmpdir, totalmem } from "node:os";
import { join } from "node:path";
import { appHostConfig, commonConfig, readConfig, sandboxHostConfig, secretsConfig } from "../lib/config.js";
import { randomToken } from "../lib/ids.js";
import { createLogger } from "../lib/log.js";
import { connectNats, DEFAULT_NATS_URL } from "../lib/nats/connection.js";
import { endWithParent, exitIfStartFails, onShutdown } from "../lib/process/lifecycle.js";
import {
  DEFAULT_EGRESS_DENY,
  detectCgroups,
  egressUnavailable,
  hostAddressCidrs,
  parseCidrList,
  probeEgress,
  probeIsolation,
  SandboxHost,
  SandboxStore,
  WORK_DIR_PREFIX,
  type EgressOptions,
  type IsolationOptions,
} from "../modules/sandboxes/mod.js";
import { loadKeyRing, SecretStore } from "../modules/secrets/mod.js";
import { AppHost, DEFAULT_REPLICA_POLICY, DeploymentStore } from "../modules/apps/mod.js";
import { ArtifactStore } from "../modules/artifacts/mod.js";

const hostId = `sh${randomToken(10)}`;
const log = createLogger("sandbox-host", { pid: process.pid, hostId });

async function main(): Promise<void> {
  const common = readConfig(commonConfig);
  const config = readConfig(sandboxHostConfig);
  const secretSettings = readConfig(secretsConfig);
  // Per-sandbox uids need the right to change uid; otherwise every sandbox runs as this process's uid.
  const root = process.getuid?.() === 0;
  const uidBase = root ? config.uidBase : undefined;
  const isolation = { bwrap: config.bwrap, python: config.python, perSandboxUid: root };
  probeIsolation(isolation, uidBase);
  const cgroups = config.cgroups === "off" ? ({ version: "none", reason: "TRIBUTARY_SANDBOX_CGROUPS=off" } as const) : detectCgroups(config.cgroupName);
  if (cgroups.version === "none" && config.cgroups === "required") throw new Error(`TRIBUTARY_SANDBOX_CGROUPS=required, but ${cgroups.reason}`);
  if (cgroups.version === "none") log.warn("sandboxes run without cgroups: memory and CPU are bounded per process only (prlimit)", { reason: cgroups.reason });

  const egress = await egressSettings(config, isolation, uidBase);
  const nc = await connectNats(common.natsUrl || DEFAULT_NATS_URL, `tributary-sandbox-host-${hostname()}-${process.pid}`, log, "sandbox-host");
  const store = await SandboxStore.open(nc);
  const secrets = await SecretStore.open(nc, loadKeyRing(secretSettings.masterKey, secretSettings.previousKeys, common.home));
  const host = new SandboxHost(nc, store, secrets, {
    hostId,
    heartbeatMs: config.heartbeatMs,
    maxSandboxes: config.maxSandboxes,
    cpuMhz: config.cpuMhz > 0 ? config.cpuMhz : availableParallelism() * config.coreMhz,
    cpuOvercommit: config.cpuOvercommit,
    coreMhz: config.coreMhz,
    memoryMb: config.memoryMb > 0 ? config.memoryMb : Math.floor(totalmem() / 1024 / 1024 / 2),
    uidBase,
    isolation,
    cgroups,
    egress,
    workDir: join(config.workDir || tmpdir(), `${WORK_DIR_PREFIX}${hostId}`),
  }, log);
  host.start();

  // The app host: deployments' instances under the same walls, on this host's own budget.
  const apps = readConfig(appHostConfig);
  let appHost: AppHost | undefined;
  if (apps.enabled === "on") {
    const platform = new URL(apps.platformUrl);
    appHost = new AppHost(nc, await DeploymentStore.open(nc), await ArtifactStore.open(nc), secrets, {
      hostId: `ah${hostId.slice(2)}`,
      heartbeatMs: config.heartbeatMs,
      cpuMhz: apps.cpuMhz > 0 ? apps.cpuMhz : config.cpuMhz > 0 ? config.cpuMhz : availableParallelism() * config.coreMhz,
      memoryMb: apps.memoryMb > 0 ? apps.memoryMb : config.memoryMb > 0 ? config.memoryMb : Math.floor(totalmem() / 1024 / 1024 / 2),
      gpuCount: apps.gpus,
      instance: {
        isolation,
        cgroups,
        coreMhz: config.coreMhz,
        // Unix socket paths are limited to 107 bytes: the run directories stay short, under /tmp.
        runRoot: join(tmpdir(), `tributary-apps-${hostId}`, "run"),
        platform: { host: platform.hostname, port: Number(platform.port || (platform.protocol === "https:" ? 443 : 80)) },
      },
      // Beside them (not in TRIBUTARY_HOME, which other uids may not traverse): instances' uids read their bundles.
      bundleRoot: join(tmpdir(), `tributary-apps-${hostId}`, "bundles"),
      bundleBounds: { maxBytes: apps.bundleMaxBytes, maxEntries: apps.bundleMaxFiles },
      policy: { ...DEFAULT_REPLICA_POLICY, healthTimeoutMs: apps.healthTimeoutMs, maxRestarts: apps.maxRestarts },
      switchDelayMs: apps.switchDelayMs,
      drainMs: apps.drainMs,
      graceMs: apps.graceMs,
      maxConcurrentPerInstance: apps.maxConcurrentPerInstance,
      // Its own uids, after the sandboxes' range: an app never shares a uid with a sandbox.
      uidBase: uidBase === undefined ? undefined : uidBase + config.maxSandboxes,
      maxInstances: config.maxSandboxes,
    }, log);
    appHost.start();
  }
  log.info("sandbox host ready", { cgroups: cgroups.version, perSandboxUid: root, maxSandboxes: config.maxSandboxes, egress: egress !== undefined, egressDeny: egress?.deny.length, appHost: appHost ? `ah${hostId.slice(2)}` : null });

  onShutdown(log, async () => {
    await appHost?.stop();
    await host.stop();
    await nc.drain().catch(() => {});
  });
}

/** Egress for this host: its deny list, or undefined when it offers none (off, or auto on a machine that cannot). */
async function egressSettings(
  config: { egress: "auto" | "on" | "off"; egressDeny: string; egressDenyHost: "on" | "off"; slirp4netns: string; python: string },
  isolation: IsolationOptions,
  uid: number | undefined,
): Promise<EgressOptions | undefined> {
  if (config.egress === "off") return undefined;
  let configured: string[];
  try {
    configured = config.egressDeny.split(/[\s,]+/).filter(Boolean).flatMap((entry) => (entry === "default" ? DEFAULT_EGRESS_DENY : parseCidrList(entry)));
  } catch (err) {
    throw new Error(`TRIBUTARY_SANDBOX_EGRESS_DENY: ${(err as Error).message}`);
  }
  const deny = [...new Set([...configured, ...(config.egressDenyHost === "on" ? hostAddressCidrs() : [])])];
  const options: EgressOptions = { slirp4netns: config.slirp4netns, python: config.python, deny };
  // A real egress sandbox, started and ended: a host that offers egress can give it.
  const why = egressUnavailable(options) ?? (await probeEgress(isolation, uid, options));
  if (why === undefined) return options;
  if (config.egress === "on") throw new Error(`TRIBUTARY_SANDBOX_EGRESS=on, but ${why}`);
  log.warn("sandboxes are offered no network egress here", { reason: why });
  return undefined;
}

endWithParent(log);
exitIfStartFails(log, "sandbox host", main());
