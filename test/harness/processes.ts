import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { natsServerConfig } from "../../cli/embedded-nats.js";
import { natsClientOptions } from "../../lib/nats/connection.js";
import { ensureNkeyIdentities, nkeyUsers } from "../../lib/nats/identities.js";
import { natsAuthorizationBlock, type NatsIdentity } from "../../lib/nats/permissions.js";
import { onCpus } from "../../lib/process/cpu-affinity.js";

// Real processes for tests: nats-server, runner and gateway processes started from dist/,
// each waited for through what it logs. Every process is killed at the end of the test.

export const repoRoot = fileURLToPath(new URL("../../..", import.meta.url));
export const testCatalog = join(repoRoot, "catalog", "test.yaml");

export interface Proc {
  child: ChildProcess;
  /** Log records (parsed JSON lines of stderr) seen so far. */
  logs: Array<Record<string, unknown>>;
  /** Resolves with the first log record matching `pred` (already seen or future). */
  waitForLog(pred: (rec: Record<string, unknown>) => boolean, timeoutMs?: number): Promise<Record<string, unknown>>;
  /** SIGTERM and wait for exit. */
  stop(timeoutMs?: number): Promise<number | null>;
  /** SIGKILL and wait for exit. */
  kill(): Promise<void>;
  exited: Promise<number | null>;
}

const all = new Set<ChildProcess>();
process.on("exit", () => {
  for (const c of all) c.kill("SIGKILL");
});
// A test killed by tap's timeout (SIGTERM) or by hand leaves no servers behind either.
// (A script with its own handler for the signal, such as bench/cluster.ts, stops them itself.)
for (const signal of ["SIGTERM", "SIGINT"] as const)
  process.once(signal, () => {
    if (process.listenerCount(signal) === 0) process.exit(signal === "SIGTERM" ? 143 : 130);
  });

/** Starts a child process (on `cpus` when given: benchmarks place processes as `tributary start` does). */
export function startProcess(command: string, args: string[], env: NodeJS.ProcessEnv, name: string, cpus?: readonly number[]): Proc {
  // BENCH_CPU_PROF_DIR: every Node process writes a V8 CPU profile under <dir>/<name>/ when it
  // exits normally (stop(), not kill()): for profiling a bench.
  const profDir = process.env.BENCH_CPU_PROF_DIR;
  if (profDir && command === process.execPath) args = ["--cpu-prof", `--cpu-prof-dir=${join(profDir, name)}`, ...args];
  // BENCH_NODE_ARGS_<NAME> (NAME: gateway, runner, actors, ...): extra Node/V8 flags for that
  // process, space-separated, for profiling a bench (e.g. --log-deopt --logfile=...).
  const extraArgs = process.env[`BENCH_NODE_ARGS_${name.toUpperCase().replace(/[^A-Z0-9]/g, "_")}`];
  if (extraArgs && command === process.execPath) args = [...extraArgs.split(" ").filter(Boolean), ...args];
  const line = onCpus(command, args, cpus);
  const child = spawn(line.command, line.args, { env: { ...process.env, ...env }, stdio: ["ignore", "ignore", "pipe"] });
  all.add(child);
  const logs: Array<Record<string, unknown>> = [];
  const waiters: Array<{ pred: (r: Record<string, unknown>) => boolean; resolve: (r: Record<string, unknown>) => void }> = [];
  const raw: string[] = [];
  createInterface({ input: child.stderr! }).on("line", (line) => {
    raw.push(line);
    if (raw.length > 200) raw.shift();
    if (process.env.TEST_VERBOSE) process.stderr.write(`[${name}] ${line}\n`);
    let rec: Record<string, unknown>;
    try {
      rec = JSON.parse(line) as Record<string, unknown>;
    } catch {
      rec = { msg: line };
    }
    logs.push(rec);
    for (const w of [...waiters]) if (w.pred(rec)) {
      waiters.splice(waiters.indexOf(w), 1);
      w.resolve(rec);
    }
  });
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => {
    all.delete(child);
    resolve(code);
  }));
  return {
    child,
    logs,
    exited,
    waitForLog(pred, timeoutMs = 30_000) {
      const seen = logs.find(pred);
      if (seen) return Promise.resolve(seen);
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`${name}: timed out waiting for a log line; last output:\n${raw.slice(-20).join("\n")}`)), timeoutMs);
        const onExit = () => reject(new Error(`${name} exited while waiting for a log line; last output:\n${raw.slice(-20).join("\n")}`));
        void exited.then(onExit);
        waiters.push({ pred, resolve: (r) => {
          clearTimeout(timer);
          resolve(r);
        } });
      });
    },
    async stop(timeoutMs = 30_000) {
      if (child.exitCode !== null) return child.exitCode;
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
      const code = await exited;
      clearTimeout(timer);
      return code;
    },
    async kill() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill("SIGKILL");
      await exited;
    },
  };
}

export interface NatsServer extends Proc {
  url: string;
  storeDir: string;
  /** The environment that gives a process `identity`'s credentials on this server. */
  env(identity: NatsIdentity): Record<string, string>;
  /** A connection as `identity` (default `admin`: tests that inspect or tamper with state). */
  connect(identity?: NatsIdentity): Promise<NatsConnection>;
}

// Servers started here run with authorization on, as `tributary start` does: each process gets
// its own identity's nkey. The processes' starters find the credentials by the server's URL.
const credentialsByUrl = new Map<string, (identity: NatsIdentity) => Record<string, string>>();

/** Records the credentials of the harness's server(s) reached at `natsUrl` (a cluster registers each URL). */
export function registerCredentials(natsUrl: string, env: (identity: NatsIdentity) => Record<string, string>): void {
  credentialsByUrl.set(natsUrl, env);
}

/** The credentials of `identity` on the harness's server(s) at `natsUrl` (none for a server started elsewhere). */
export function identityEnv(natsUrl: string, identity: NatsIdentity): Record<string, string> {
  return credentialsByUrl.get(natsUrl)?.(identity) ?? {};
}

/** Identities (nkey seeds) in `dir`, with the authorization block and environment of each. */
export function testIdentities(dir: string) {
  const identities = ensureNkeyIdentities(join(dir, "identities"));
  return {
    authorization: natsAuthorizationBlock(nkeyUsers(identities.values())),
    env: (identity: NatsIdentity): Record<string, string> => ({ TRIBUTARY_NATS_NKEY_FILE: identities.get(identity)!.seedFile }),
  };
}

/** Connects to `natsUrl` as `identity` (its credentials from the harness). */
export function connectAs(natsUrl: string, identity: NatsIdentity = "admin"): Promise<NatsConnection> {
  return connect({ servers: natsUrl.split(","), noAsyncTraces: true, ...natsClientOptions(identity, identityEnv(natsUrl, identity)) });
}

export async function startNats(cpus?: readonly number[], options: { auth?: boolean } = {}): Promise<NatsServer> {
  const storeDir = mkdtempSync(join(tmpdir(), "tributary-nats-"));
  const config = join(storeDir, "nats-server.conf");
  const identities = options.auth === false ? undefined : testIdentities(storeDir);
  writeFileSync(config, natsServerConfig(-1, join(storeDir, "jetstream"), { authorization: identities?.authorization }));
  const proc = startProcess("nats-server", ["-c", config], {}, "nats", cpus);
  const rec = await proc.waitForLog((r) => typeof r.msg === "string" && r.msg.includes("Listening for client connections on"));
  const port = /:(\d+)\s*$/.exec(rec.msg as string)![1];
  const stop = proc.stop;
  const url = `nats://127.0.0.1:${port}`;
  const env = (identity: NatsIdentity) => identities?.env(identity) ?? {};
  credentialsByUrl.set(url, env);
  return {
    ...proc,
    url,
    storeDir,
    env,
    connect: (identity) => connectAs(url, identity),
    async stop(timeoutMs) {
      const code = await stop(timeoutMs);
      credentialsByUrl.delete(url);
      rmSync(storeDir, { recursive: true, force: true });
      return code;
    },
  };
}

// BENCH_STACK_DIST: the build whose processes are started (a baseline's dist, copied aside, for
// a benchmark comparing it with this build under the same load generator); this build's dist when unset.
const dist = (path: string) => join(process.env.BENCH_STACK_DIST ?? join(repoRoot, "dist"), path);

export interface Runner extends Proc {
  runnerId: string;
}

/** A runner of the test catalog, with the one libuv pool thread `tributary start` gives runners of one decode thread. */
export async function startRunner(natsUrl: string, env: NodeJS.ProcessEnv = {}, cpus?: readonly number[]): Promise<Runner> {
  const base = { NATS_URL: natsUrl, TRIBUTARY_CATALOG: testCatalog, UV_THREADPOOL_SIZE: "1", ...identityEnv(natsUrl, "runner") };
  const proc = startProcess(process.execPath, [dist("runners/main.js")], { ...base, ...env }, "runner", cpus);
  const rec = await proc.waitForLog((r) => r.msg === "runner ready");
  return { ...proc, runnerId: rec.runnerId as string };
}

export interface ActorHost extends Proc {
  /** host:port of its admin gRPC service (a free port unless env says otherwise). */
  adminAddr: string;
}

/** The platform actor host (budgets, coordinators, stores, the admin service). */
export async function startActorHost(natsUrl: string, env: NodeJS.ProcessEnv = {}, cpus?: readonly number[]): Promise<ActorHost> {
  const proc = startProcess(
    process.execPath,
    [dist("actors/main.js")],
    { NATS_URL: natsUrl, TRIBUTARY_CATALOG: testCatalog, TRIBUTARY_ADMIN_ADDR: "127.0.0.1:0", TRIBUTARY_ADMIN_TOKEN: TEST_ADMIN_TOKEN, ...identityEnv(natsUrl, "actors"), ...env },
    "actors",
    cpus,
  );
  await proc.waitForLog((r) => r.msg === "actor host ready");
  const admin = proc.logs.find((r) => r.msg === "admin service listening");
  return { ...proc, adminAddr: (admin?.address as string | undefined) ?? "" };
}

export interface Gateway extends Proc {
  port: number;
  url: string;
  baseURL: string;
}

export async function startGateway(natsUrl: string, env: NodeJS.ProcessEnv = {}, cpus?: readonly number[]): Promise<Gateway> {
  const proc = startProcess(
    process.execPath,
    [dist("gateway/main.js")],
    { NATS_URL: natsUrl, TRIBUTARY_CATALOG: testCatalog, TRIBUTARY_PORT: "0", TRIBUTARY_API_KEY: TEST_KEY, ...identityEnv(natsUrl, "gateway"), ...env },
    "gateway",
    cpus,
  );
  const rec = await proc.waitForLog((r) => r.msg === "gateway listening");
  const port = rec.port as number;
  return { ...proc, port, url: `http://127.0.0.1:${port}`, baseURL: `http://127.0.0.1:${port}/v1` };
}

export interface SandboxHost extends Proc {
  hostId: string;
}

/** A sandbox host (real bubblewrap). Tests give it a small, fixed capacity. */
export async function startSandboxHost(natsUrl: string, env: NodeJS.ProcessEnv = {}): Promise<SandboxHost> {
  const proc = startProcess(
    process.execPath,
    [dist("sandbox-host/main.js")],
    { NATS_URL: natsUrl, TRIBUTARY_SANDBOX_HEARTBEAT_MS: "250", TRIBUTARY_SANDBOX_CPU_MHZ: "4000", TRIBUTARY_SANDBOX_MEMORY_MB: "4096", TRIBUTARY_SANDBOX_CGROUP: `tributary-test-${process.pid}`, ...identityEnv(natsUrl, "sandbox-host"), ...env },
    "sandbox-host",
  );
  const rec = await proc.waitForLog((r) => r.msg === "sandbox host ready");
  return { ...proc, hostId: rec.hostId as string };
}

export const TEST_KEY = "sk-test-tributary";
export const TEST_ADMIN_TOKEN = "tadm-test-tributary";
export const TEST_MODEL = "test/stories-260k";
