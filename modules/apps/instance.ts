import { spawn, type ChildProcess } from "node:child_process";
import { chmodSync, chownSync, mkdirSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { request } from "node:http";
import { connect, createServer, type Server, type Socket } from "node:net";
import { join } from "node:path";
import { inCgroup, SandboxCgroup, walledCommand, type CgroupMode, type IsolationOptions, type SandboxLimits } from "../sandboxes/mod.js";
import { LAUNCHER_SOURCE } from "./launcher-source.js";
import type { AppManifest } from "./manifest.js";

// One app instance: uvicorn serving the app's entrypoint behind the sandbox's walls. It has no
// network at all: uvicorn listens on a Unix socket in a directory bind-mounted from the host
// (the host's side of the exchange connects to it), and the app reaches the platform through a
// second Unix socket in the same directory, which the host forwards to the gateway and nowhere
// else. The bundle is mounted read-only at /app.

/** Where the instance's run directory (its two sockets) appears inside. */
export const RUN_DIR_INSIDE = "/run/tributary";
export const APP_DIR_INSIDE = "/app";
export const APP_SOCKET = "app.sock";
export const PLATFORM_SOCKET = "platform.sock";
/** The app's private writable home (a tmpfs that counts in its memory group). */
const WORKDIR_MB = 16;
const LOG_LINES_KEPT = 200;
const MAX_LOG_LINE_BYTES = 8192;

export interface InstanceHostOptions {
  isolation: IsolationOptions;
  cgroups: CgroupMode;
  /** The clock one core counts as, in MHz: cpu_mhz / coreMhz of one core is the CPU quota. */
  coreMhz: number;
  /** Host directory under which each instance gets its run directory. */
  runRoot: string;
  /** The gateway the platform socket forwards to. */
  platform: { host: string; port: number };
}

export interface InstanceSpec {
  /** Unique per start (names the cgroup and the run directory). */
  instanceId: string;
  bundleDir: string;
  manifest: AppManifest;
  /** The manifest's env, its secrets' values and the platform's variables, merged by the caller. */
  env: Record<string, string>;
  /** Host uid to run as (per-instance uids when the host is root); undefined: this process's. */
  uid: number | undefined;
}

export interface InstanceExit {
  code: number | null;
  signal: NodeJS.Signals | null;
  /** The kernel killed a process of the instance for exceeding its memory limit. */
  oom: boolean;
}

export interface LogLine {
  at: number;
  stream: "stdout" | "stderr";
  line: string;
}

/** The limits an instance runs under, from its manifest. */
export function instanceLimits(manifest: AppManifest): SandboxLimits {
  return { memoryMb: manifest.memorySizeMb, diskMb: WORKDIR_MB, cpuMhz: manifest.cpuMhz, pids: 256, openFiles: 4096 };
}

/** The platform's variables every instance gets. */
export function platformEnv(manifest: AppManifest): Record<string, string> {
  return {
    TRIBUTARY_BASE_URL: "http://platform/v1",
    TRIBUTARY_PLATFORM_SOCKET: `${RUN_DIR_INSIDE}/${PLATFORM_SOCKET}`,
    TRIBUTARY_ORGANIZATION_SLUG: manifest.organizationSlug,
    TRIBUTARY_PROJECT_SLUG: manifest.projectSlug,
  };
}

/** The walled command line of an instance: uvicorn (launcher.py) on the app socket, the bundle read-only. */
export function instanceCommand(options: InstanceHostOptions, spec: InstanceSpec, runDir: string): string[] {
  const env = {
    ...spec.env,
    ...platformEnv(spec.manifest),
    HOME: "/home/app",
    PYTHONDONTWRITEBYTECODE: "1",
    PYTHONUNBUFFERED: "1",
  };
  return walledCommand(options.isolation, instanceLimits(spec.manifest), spec.uid, {
    mounts: ["--ro-bind", spec.bundleDir, APP_DIR_INSIDE, "--bind", runDir, RUN_DIR_INSIDE],
    env,
    workdir: "/home/app",
    chdir: APP_DIR_INSIDE,
    // uvicorn, with the app's root_path taken per request from the gateway's prefix header (launcher.py).
    argv: [options.isolation.python, "-c", LAUNCHER_SOURCE, spec.manifest.entrypoint, `${RUN_DIR_INSIDE}/${APP_SOCKET}`, APP_DIR_INSIDE],
  });
}

/**
 * A running instance: its process tree, cgroup, platform forwarder and recent log lines.
 * `exited` resolves once the process tree is gone and the host's resources are freed.
 */
export class AppInstance {
  readonly runDir: string;
  readonly appSocket: string;
  private readonly child: ChildProcess;
  private readonly cgroup: SandboxCgroup | undefined;
  private readonly forwarder: Server;
  private readonly forwarded = new Set<Socket>();
  private readonly logs: LogLine[] = [];
  private readonly logListeners = new Set<(line: LogLine) => void>();
  readonly exited: Promise<InstanceExit>;
  private stopping = false;

  constructor(private readonly options: InstanceHostOptions, readonly spec: InstanceSpec) {
    this.runDir = join(options.runRoot, spec.instanceId);
    this.appSocket = join(this.runDir, APP_SOCKET);
    mkdirSync(this.runDir, { recursive: true, mode: 0o700 });
    if (spec.uid !== undefined) chownSync(this.runDir, spec.uid, spec.uid);
    this.forwarder = this.forwardPlatform(join(this.runDir, PLATFORM_SOCKET));
    this.cgroup = SandboxCgroup.create(options.cgroups, `app-${spec.instanceId}`, instanceLimits(spec.manifest), options.coreMhz);
    const argv = inCgroup(this.cgroup?.procsFiles ?? [], instanceCommand(options, spec, this.runDir));
    this.child = spawn(argv[0]!, argv.slice(1), { stdio: ["ignore", "pipe", "pipe"], env: {} });
    this.collect("stdout", this.child.stdout!);
    this.collect("stderr", this.child.stderr!);
    this.exited = new Promise((resolve) => {
      const done = (code: number | null, signal: NodeJS.Signals | null) => {
        const oom = (this.cgroup?.oomKills() ?? 0) > 0;
        void this.cleanup().then(() => resolve({ code, signal, oom }));
      };
      this.child.once("exit", done);
      this.child.once("error", (err) => {
        this.addLog("stderr", `could not start: ${err.message}`);
        done(null, null);
      });
    });
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  get alive(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  /** The last log lines (at most 200). */
  recentLogs(): LogLine[] {
    return [...this.logs];
  }

  onLog(listener: (line: LogLine) => void): () => void {
    this.logListeners.add(listener);
    return () => this.logListeners.delete(listener);
  }

  /**
   * Resolves true once uvicorn answers an HTTP request on its socket (any status: the app is
   * imported and its lifespan startup ran), false at the deadline or when the instance ends.
   */
  async waitHealthy(timeoutMs: number, signal?: AbortSignal): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    let ended = false;
    void this.exited.then(() => (ended = true));
    while (!ended && !signal?.aborted && Date.now() < deadline) {
      if (await probe(this.appSocket, Math.min(2_000, Math.max(100, deadline - Date.now())))) return true;
      await new Promise((r) => setTimeout(r, 100));
    }
    return false;
  }

  /**
   * Stops the instance: SIGTERM to its processes inside the walls (uvicorn stops accepting and
   * finishes the exchanges it holds), SIGKILL of the whole tree after `graceMs`.
   */
  async stop(graceMs: number): Promise<InstanceExit> {
    this.stopping = true;
    if (this.alive) {
      const bwrapPid = this.child.pid;
      for (const pid of bwrapPid === undefined ? [] : descendants(bwrapPid)) if (commOf(pid) !== "bwrap") tryKill(pid, "SIGTERM");
      const killTimer = setTimeout(() => this.kill(), graceMs);
      const exit = await this.exited;
      clearTimeout(killTimer);
      return exit;
    }
    return this.exited;
  }

  /** Kills the tree now (bwrap's --die-with-parent takes everything inside with it). */
  kill(): void {
    this.stopping = true;
    if (this.alive) this.child.kill("SIGKILL");
  }

  get stopRequested(): boolean {
    return this.stopping;
  }

  private forwardPlatform(path: string): Server {
    const server = createServer((inside) => {
      // Each connection from the app goes to the gateway, and only there; pipe() applies
      // backpressure both ways, so neither side makes this process buffer without bound.
      const outside = connect(this.options.platform.port, this.options.platform.host);
      this.forwarded.add(inside);
      const close = () => {
        inside.destroy();
        outside.destroy();
        this.forwarded.delete(inside);
      };
      inside.on("error", close).on("close", close);
      outside.on("error", close).on("close", close);
      inside.pipe(outside);
      outside.pipe(inside);
    });
    server.listen(path, () => {
      try {
        chmodSync(path, this.spec.uid === undefined ? 0o600 : 0o666);
      } catch {
        // the instance already ended and its directory went
      }
    });
    server.on("error", (err) => this.addLog("stderr", `platform socket: ${err.message}`));
    return server;
  }

  private collect(stream: "stdout" | "stderr", source: NodeJS.ReadableStream): void {
    let partial = "";
    source.setEncoding("utf8");
    source.on("data", (chunk: string) => {
      const text = partial + chunk;
      const lines = text.split("\n");
      partial = lines.pop() ?? "";
      if (partial.length > MAX_LOG_LINE_BYTES) {
        lines.push(partial);
        partial = "";
      }
      for (const line of lines) this.addLog(stream, line);
    });
    source.on("end", () => {
      if (partial) this.addLog(stream, partial);
    });
  }

  private addLog(stream: "stdout" | "stderr", line: string): void {
    const entry = { at: Date.now(), stream, line: line.length > MAX_LOG_LINE_BYTES ? line.slice(0, MAX_LOG_LINE_BYTES) : line };
    this.logs.push(entry);
    if (this.logs.length > LOG_LINES_KEPT) this.logs.shift();
    for (const listener of this.logListeners) listener(entry);
  }

  private async cleanup(): Promise<void> {
    for (const s of this.forwarded) s.destroy();
    await new Promise<void>((resolve) => this.forwarder.close(() => resolve()));
    await this.cgroup?.remove();
    rmSync(this.runDir, { recursive: true, force: true });
  }
}

/** One HTTP request on a Unix socket: true when any response head arrives in time. */
export function probe(socketPath: string, timeoutMs: number): Promise<boolean> {
  return new Promise((resolve) => {
    const req = request({ socketPath, path: "/", method: "GET", headers: { "user-agent": "tributary-health" }, timeout: timeoutMs }, (res) => {
      // The head is the answer: the body (maybe a long stream) is not read.
      res.destroy();
      resolve(true);
    });
    req.on("timeout", () => req.destroy());
    req.on("error", () => resolve(false));
    req.end();
  });
}

/** Every process below `root` (from /proc: parent links). */
function descendants(root: number): number[] {
  const children = new Map<number, number[]>();
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, "utf8");
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      const list = children.get(ppid) ?? [];
      list.push(Number(name));
      children.set(ppid, list);
    } catch {
      // gone meanwhile
    }
  }
  const out: number[] = [];
  const queue = [root];
  while (queue.length > 0) {
    const pid = queue.shift()!;
    for (const child of children.get(pid) ?? []) {
      out.push(child);
      queue.push(child);
    }
  }
  return out;
}

function commOf(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/comm`, "utf8").trim();
  } catch {
    return "";
  }
}

function tryKill(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(pid, signal);
  } catch {
    // already gone
  }
}
