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
  /**
   * Resolves with the first log record matching `pred` (already seen or future); rejects, with
   * the last lines of output, when the process exits first or after `timeoutMs` (default 30 s).
   */
  waitForLog(pred: (rec: Record<string, unknown>) => boolean, timeoutMs?: number): Promise<Record<string, unknown>>;
  /** The last `lines` lines of its stderr (default 20). */
  output(lines?: number): string;
  /** SIGTERM and wait for exit. */
  stop(timeoutMs?: number): Promise<number | null>;
  /** SIGKILL and wait for exit. */
  kill(): Promise<void>;
  exited: Promise<number | null>;
}

/**
 * The environment of a child the harness starts: this process's, without the test runner's
 * instrumentation. Inside a tap test, NODE_OPTIONS carries tap's process-info import hooks; a
 * child that inherits them starts 2.6-4x slower (a stack 9 s -> 24 s) although coverage is off.
 * TRIBUTARY_TEST_CHILD_COVERAGE=1 keeps them, for a run that measures the children's coverage.
 */
export function childEnv(env: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  const inherited: NodeJS.ProcessEnv = { ...process.env };
  if (process.env.TRIBUTARY_TEST_CHILD_COVERAGE !== "1") {
    for (const name of Object.keys(inherited)) if (name.startsWith("_TAPJS_PROCESSINFO_")) delete inherited[name];
    const options = withoutTapHooks(inherited.NODE_OPTIONS ?? "");
    if (options) inherited.NODE_OPTIONS = options;
    else delete inherited.NODE_OPTIONS;
  }
  return { ...inherited, ...env };
}

/** NODE_OPTIONS without the options that load tap's modules (`--import=...@tapjs/...`, `--loader=...`). */
export function withoutTapHooks(nodeOptions: string): string {
  const words = nodeOptions.match(/"[^"]*"|'[^']*'|\S+/g) ?? [];
  const isTapHook = (word: string) => /^["']?--(import|loader|experimental-loader|require)[= ]/.test(word) && /[\\/]@tapjs[\\/]/.test(word);
  return words.filter((word) => !isTapHook(word)).join(" ");
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

/** Where a process runs besides its CPUs: `exec`, a command prefix it runs under (`ip netns exec <ns>`: a network-namespace host). */
export interface Placement {
  exec?: readonly string[];
}

/**
 * Starts a child process (on `cpus` when given: benchmarks place processes as `tributary start`
 * does; under `placement.exec` when given). A prefix must exec the command (as `ip netns exec`
 * and taskset do), so that the child's pid is the process's own and stop/kill reach it.
 */
export function startProcess(command: string, args: string[], env: NodeJS.ProcessEnv, name: string, cpus?: readonly number[], placement: Placement = {}): Proc {
  // BENCH_CPU_PROF_DIR: every Node process writes a V8 CPU profile under <dir>/<name>/ when it
  // exits normally (stop(), not kill()): for profiling a bench.
  const profDir = process.env.BENCH_CPU_PROF_DIR;
  if (profDir && command === process.execPath) args = ["--cpu-prof", `--cpu-prof-dir=${join(profDir, name)}`, ...args];
  // BENCH_NODE_ARGS_<NAME> (NAME: gateway, runner, actors, ...): extra Node/V8 flags for that
  // process, space-separated, for profiling a bench (e.g. --log-deopt --logfile=...).
  const extraArgs = process.env[`BENCH_NODE_ARGS_${name.toUpperCase().replace(/[^A-Z0-9]/g, "_")}`];
  if (extraArgs && command === process.execPath) args = [...extraArgs.split(" ").filter(Boolean), ...args];
  const onCpu = onCpus(command, args, cpus);
  const line = placement.exec?.length ? { command: placement.exec[0]!, args: [...placement.exec.slice(1), onCpu.command, ...onCpu.args] } : onCpu;
  const child = spawn(line.command, line.args, { env: childEnv(env), stdio: ["ignore", "ignore", "pipe"] });
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
  // A child's "exit" can come before the last of its stderr has been read: a failure waits for
  // the end of its output (briefly: a descendant may hold the pipe open) to report its last lines.
  const outputEnded = new Promise<void>((resolve) => child.stderr!.once("close", () => resolve()));
  const output = (lines = 20) => raw.slice(-lines).join("\n");
  return {
    child,
    logs,
    exited,
    output,
    waitForLog(pred, timeoutMs = 30_000) {
      const seen = logs.find(pred);
      if (seen) return Promise.resolve(seen);
      return new Promise((resolve, reject) => {
        let settled = false;
        const settle = () => {
          settled = true;
          clearTimeout(timer);
          const i = waiters.indexOf(waiter);
          if (i >= 0) waiters.splice(i, 1);
        };
        const fail = (what: string) => {
          if (settled) return;
          settle();
          reject(new Error(`${name} ${what}; last output:\n${output()}`));
        };
        const timer = setTimeout(() => fail(`timed out after ${timeoutMs} ms waiting for a log line`), timeoutMs);
        const waiter = { pred, resolve: (r: Record<string, unknown>) => {
          if (settled) return;
          settle();
          resolve(r);
        } };
        waiters.push(waiter);
        void exited
          .then(() => Promise.race([outputEnded, new Promise((r) => setTimeout(r, 1_000).unref())]))
          .then(() => fail(`exited (${child.signalCode ?? `code ${child.exitCode}`}) while waiting for a log line`));
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

type LogPredicate = (rec: Record<string, unknown>) => boolean;

/**
 * Waits for `proc`'s record saying it is ready (`name`: the process, for the error). Fails with
 * its last output, the process killed, when it exits first, when it logs a record `failed`
 * matches (a failure it would only retry), or after `timeoutMs` (default 30 s).
 */
export async function untilReady(proc: Proc, name: string, ready: LogPredicate, options: { timeoutMs?: number; failed?: LogPredicate } = {}): Promise<Record<string, unknown>> {
  const { failed } = options;
  try {
    const rec = await proc.waitForLog((r) => ready(r) || failed?.(r) === true, options.timeoutMs ?? 30_000);
    if (ready(rec)) return rec;
    const err = rec.err as { message?: unknown } | string | undefined;
    const why = typeof err === "object" && err !== null ? err.message : err;
    throw new Error(`${name} did not start: "${String(rec.msg)}"${why === undefined ? "" : ` (${String(why)})`}; last output:\n${proc.output()}`);
  } catch (err) {
    await proc.kill();
    throw err;
  }
}

export interface NatsServer extends Proc {
  url: string;
  storeDir: string;
  /** The environment that gives a process `identity`'s credentials on this server. */
  env(identity: NatsIdentity): Record<string, string>;
  /** A connection as `identity` (default `admin`: tests that inspect or tamper with state). */
  connect(identity?: NatsIdentity): Promise<NatsConnection>;
  /** SIGTERM, keeping its store (and identities) for a server started on `storeDir` after it: a restart. */
  stopKeepingStore(timeoutMs?: number): Promise<number | null>;
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

/**
 * A nats-server with JetStream in a fresh store directory, or in `storeDir`: the store of a
 * server stopped with stopKeepingStore (the same streams, buckets and identities, on a new port).
 */
export async function startNats(cpus?: readonly number[], options: { auth?: boolean; storeDir?: string } = {}): Promise<NatsServer> {
  const storeDir = options.storeDir ?? mkdtempSync(join(tmpdir(), "tributary-nats-"));
  const config = join(storeDir, "nats-server.conf");
  const identities = options.auth === false ? undefined : testIdentities(storeDir);
  writeFileSync(config, natsServerConfig(-1, join(storeDir, "jetstream"), { authorization: identities?.authorization }));
  const proc = startProcess("nats-server", ["-c", config], {}, "nats", cpus);
  const rec = await untilReady(proc, "nats-server", (r) => typeof r.msg === "string" && r.msg.includes("Listening for client connections on"));
  const port = /:(\d+)\s*$/.exec(rec.msg as string)![1];
  const stop = proc.stop;
  const url = `nats://127.0.0.1:${port}`;
  const env = (identity: NatsIdentity) => identities?.env(identity) ?? {};
  credentialsByUrl.set(url, env);
  let storeHandedOn = false;
  return {
    ...proc,
    url,
    storeDir,
    env,
    connect: (identity) => connectAs(url, identity),
    async stop(timeoutMs) {
      const code = await stop(timeoutMs);
      credentialsByUrl.delete(url);
      if (!storeHandedOn) rmSync(storeDir, { recursive: true, force: true });
      return code;
    },
    async stopKeepingStore(timeoutMs) {
      storeHandedOn = true;
      const code = await stop(timeoutMs);
      credentialsByUrl.delete(url);
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

/**
 * How long startRunner waits for its model by default: loading a ~500 MB model (its sha256
 * first) on a slow, busy machine can take minutes. Under tap's timeout of a test file (240 s), so
 * that a test fails with the runner's output rather than at tap's timeout.
 */
export const RUNNER_READY_TIMEOUT_MS = 180_000;

/**
 * A runner of the test catalog, with the one libuv pool thread `tributary start` gives runners
 * decoding on the CPU. Fails (the runner killed, its last output in the error) when it exits before
 * it is ready, at its first failed model load (a missing file, a wrong sha256: the runner would
 * retry it forever), or after `readyTimeoutMs` (default RUNNER_READY_TIMEOUT_MS).
 */
export async function startRunner(natsUrl: string, env: NodeJS.ProcessEnv = {}, cpus?: readonly number[], options: { readyTimeoutMs?: number } & Placement = {}): Promise<Runner> {
  const base = { NATS_URL: natsUrl, TRIBUTARY_CATALOG: testCatalog, UV_THREADPOOL_SIZE: "1", ...identityEnv(natsUrl, "runner") };
  const proc = startProcess(process.execPath, [dist("runners/main.js")], { ...base, ...env }, "runner", cpus, options);
  const rec = await untilReady(proc, "runner", (r) => r.msg === "runner ready", {
    timeoutMs: options.readyTimeoutMs ?? RUNNER_READY_TIMEOUT_MS,
    failed: (r) => r.msg === "model load failed; retrying",
  });
  return { ...proc, runnerId: rec.runnerId as string };
}

export interface ActorHost extends Proc {
  /** host:port of its admin gRPC service (a free port unless env says otherwise). */
  adminAddr: string;
}

/** The platform actor host (budgets, coordinators, stores, the admin service). */
export async function startActorHost(natsUrl: string, env: NodeJS.ProcessEnv = {}, cpus?: readonly number[], placement: Placement = {}): Promise<ActorHost> {
  const proc = startProcess(
    process.execPath,
    [dist("actors/main.js")],
    { NATS_URL: natsUrl, TRIBUTARY_CATALOG: testCatalog, TRIBUTARY_ADMIN_ADDR: "127.0.0.1:0", TRIBUTARY_ADMIN_TOKEN: TEST_ADMIN_TOKEN, ...identityEnv(natsUrl, "actors"), ...env },
    "actors",
    cpus,
    placement,
  );
  await untilReady(proc, "actor host", (r) => r.msg === "actor host ready");
  const admin = proc.logs.find((r) => r.msg === "admin service listening");
  return { ...proc, adminAddr: (admin?.address as string | undefined) ?? "" };
}

export interface Gateway extends Proc {
  port: number;
  url: string;
  baseURL: string;
}

/** A gateway; `placement.host`: the address it listens on (default loopback), a namespace host's front address. */
export async function startGateway(natsUrl: string, env: NodeJS.ProcessEnv = {}, cpus?: readonly number[], placement: Placement & { host?: string } = {}): Promise<Gateway> {
  const host = placement.host ?? "127.0.0.1";
  const proc = startProcess(
    process.execPath,
    [dist("gateway/main.js")],
    { NATS_URL: natsUrl, TRIBUTARY_CATALOG: testCatalog, TRIBUTARY_HOST: host, TRIBUTARY_PORT: "0", TRIBUTARY_API_KEY: TEST_KEY, ...identityEnv(natsUrl, "gateway"), ...env },
    "gateway",
    cpus,
    placement,
  );
  const rec = await untilReady(proc, "gateway", (r) => r.msg === "gateway listening");
  const port = rec.port as number;
  return { ...proc, port, url: `http://${host}:${port}`, baseURL: `http://${host}:${port}/v1` };
}

export interface SandboxHost extends Proc {
  hostId: string;
}

/** A sandbox host (real bubblewrap; it also hosts app instances). Tests give it a small, fixed capacity. */
export async function startSandboxHost(natsUrl: string, env: NodeJS.ProcessEnv = {}, placement: Placement = {}): Promise<SandboxHost> {
  const proc = startProcess(
    process.execPath,
    [dist("sandbox-host/main.js")],
    { NATS_URL: natsUrl, TRIBUTARY_SANDBOX_HEARTBEAT_MS: "250", TRIBUTARY_SANDBOX_CPU_MHZ: "4000", TRIBUTARY_SANDBOX_MEMORY_MB: "4096", TRIBUTARY_SANDBOX_CGROUP: `tributary-test-${process.pid}`, ...identityEnv(natsUrl, "sandbox-host"), ...env },
    "sandbox-host",
    undefined,
    placement,
  );
  const rec = await untilReady(proc, "sandbox host", (r) => r.msg === "sandbox host ready");
  return { ...proc, hostId: rec.hostId as string };
}

export const TEST_KEY = "sk-test-tributary";
export const TEST_ADMIN_TOKEN = "tadm-test-tributary";
export const TEST_MODEL = "test/stories-260k";
