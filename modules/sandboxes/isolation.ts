import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, rmdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";

// How one sandbox is walled in on this machine: bubblewrap's namespaces and mounts, the resource
// limits of its processes (prlimit), its own host uid (setpriv), and a cgroup per sandbox where
// the machine lets this process create one (v1 or v2, detected). docs/platform.md's table
// ("What is enforced where") says which wall holds what.

export interface SandboxLimits {
  memoryMb: number;
  diskMb: number;
  cpuMhz: number;
  /** Processes (threads included) of the sandbox. */
  pids: number;
  openFiles: number;
}

export interface IsolationOptions {
  bwrap: string;
  python: string;
  /** Run sandboxes as per-sandbox host uids (only when this process may change uid: root). */
  perSandboxUid: boolean;
}

/** Directories of the host's system seen read-only inside (those that exist). */
const SYSTEM_DIRS = ["/usr", "/etc/alternatives", "/etc/ssl", "/etc/ca-certificates"];
const SYSTEM_FILES = ["/etc/ld.so.cache", "/etc/localtime", "/etc/mime.types"];

/** What one sandbox gets beyond the common walls. */
export interface SandboxMounts {
  /** Egress: bwrap reports the sandbox's pid on fd 3 (its network namespace gets a user-mode stack). */
  reportPid?: boolean;
  /** Egress: the resolv.conf bound in (naming slirp4netns's DNS forwarder). */
  egressResolvConf?: string;
  /** An /etc/hosts naming localhost (glibc does not resolve it without one). */
  hostsFile?: string;
  /** A host directory bound read-only at /workspace/input (a job's input files). */
  inputDir?: string;
}

/** What runs inside the walls, and what it sees besides the read-only system. */
export interface WalledProgram {
  /** Extra bwrap arguments (mounts, --info-fd) placed after the workdir and /tmp, before the root is made read-only. */
  mounts: string[];
  /** Environment variables (after --clearenv; PATH is always set). */
  env: Record<string, string>;
  /** The writable home and working directory, a tmpfs of limits.diskMb ("/workspace" for sandboxes). */
  workdir: string;
  /** Working directory of the program (default: workdir). */
  chdir?: string;
  argv: string[];
}

/** The command line that starts a sandbox's agent: prlimit -> setpriv -> bwrap -> python agent. */
export function sandboxCommand(options: IsolationOptions, limits: SandboxLimits, uid: number | undefined, agentSource: string, mounts: SandboxMounts = {}): string[] {
  // Bound after the workspace's tmpfs, so the mount point is made in it; read-only, and the files
  // belong to the host's uid: the sandbox can neither change nor add to them.
  const extra: string[] = [];
  if (mounts.inputDir !== undefined) extra.push("--ro-bind", mounts.inputDir, "/workspace/input");
  if (mounts.egressResolvConf !== undefined) extra.push("--ro-bind", mounts.egressResolvConf, "/etc/resolv.conf");
  if (mounts.hostsFile !== undefined) extra.push("--ro-bind", mounts.hostsFile, "/etc/hosts");
  if (mounts.reportPid) extra.push("--info-fd", "3");
  return walledCommand(options, limits, uid, { mounts: extra, env: { HOME: "/workspace" }, workdir: "/workspace", argv: [options.python, "-I", "-S", "-c", agentSource] });
}

/**
 * Any program behind a sandbox's walls (the sandbox agent, an app instance): prlimit -> setpriv ->
 * bwrap with every namespace unshared (no network: a program reaches out only through Unix
 * sockets bind-mounted into it, or the user-mode stack an egress sandbox gets), the host's system
 * read-only, a private tmpfs workdir and /tmp.
 */
export function walledCommand(options: IsolationOptions, limits: SandboxLimits, uid: number | undefined, program: WalledProgram): string[] {
  const bwrap = [
    options.bwrap,
    "--unshare-all",
    "--unshare-user",
    "--new-session",
    "--die-with-parent",
    "--disable-userns",
    "--hostname", "sandbox",
    "--uid", "1000",
    "--gid", "1000",
    "--clearenv",
    "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin",
  ];
  for (const [name, value] of Object.entries(program.env)) bwrap.push("--setenv", name, value);
  for (const dir of SYSTEM_DIRS) if (existsSync(dir)) bwrap.push("--ro-bind", dir, dir);
  for (const file of SYSTEM_FILES) if (existsSync(file)) bwrap.push("--ro-bind", file, file);
  // Debian's merged /usr: the top-level names are links into it.
  for (const [link, target] of [["/bin", "usr/bin"], ["/sbin", "usr/sbin"], ["/lib", "usr/lib"], ["/lib64", "usr/lib64"]] as const)
    if (existsSync(join("/", target))) bwrap.push("--symlink", target, link);
  bwrap.push(
    "--proc", "/proc",
    "--dev", "/dev",
    "--size", String(limits.diskMb * 1024 * 1024), "--perms", "0700", "--tmpfs", program.workdir,
    "--size", String(64 * 1024 * 1024), "--tmpfs", "/tmp",
    ...program.mounts,
    // The root (a tmpfs bwrap made) and everything on it read-only; the workdir, /tmp and writable binds stay writable.
    "--remount-ro", "/",
    "--chdir", program.chdir ?? program.workdir,
    "--", ...program.argv,
  );
  const prlimit = [
    "prlimit",
    `--nproc=${limits.pids}`,
    `--nofile=${limits.openFiles}`,
    `--fsize=${limits.diskMb * 1024 * 1024}`,
    "--core=0",
    "--",
  ];
  const setpriv =
    uid === undefined
      ? ["setpriv", "--no-new-privs", "--"]
      : ["setpriv", `--reuid=${uid}`, `--regid=${uid}`, "--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"];
  return [...prlimit, ...setpriv, ...bwrap];
}

/**
 * Checks that sandboxes can be made here: runs `true` in a sandbox built as real ones are.
 * Throws a readable error when namespaces cannot be created (the host must not start then).
 */
export function probeIsolation(options: IsolationOptions, uid: number | undefined): void {
  const argv = sandboxCommand(options, { memoryMb: 64, diskMb: 1, cpuMhz: 100, pids: 64, openFiles: 64 }, uid, "pass");
  const result = spawnSync(argv[0]!, argv.slice(1), { encoding: "utf8", timeout: 10_000, stdio: ["ignore", "pipe", "pipe"] });
  if (result.error) throw new Error(`sandbox isolation is unavailable: cannot run ${argv[0]}: ${result.error.message} (install bubblewrap and util-linux)`);
  if (result.status !== 0)
    throw new Error(
      `sandbox isolation is unavailable: bubblewrap could not create its namespaces (exit ${result.status}): ${result.stderr.trim().slice(0, 400)}. ` +
        "Unprivileged user namespaces must be enabled (sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces > 0; on Kubernetes see k8s/README.md). Refusing to run code unconfined.",
    );
}

export type CgroupMode = { version: 1; root: string; parent: string } | { version: 2; parent: string } | { version: "none"; reason: string };

const V1_CONTROLLERS = ["memory", "cpu", "pids"] as const;

/** Detects the cgroup hierarchy and makes this host's parent group; "none" when neither can be written. */
export function detectCgroups(name: string, root = "/sys/fs/cgroup"): CgroupMode {
  try {
    if (existsSync(join(root, "cgroup.controllers"))) {
      // v2: sandboxes go below this process's own group (delegated to it), in `name`.
      const own = /^0::(.*)$/m.exec(readFileSync("/proc/self/cgroup", "utf8"))?.[1] ?? "/";
      const base = join(root, own);
      const parent = join(base, name);
      mkdirSync(parent, { recursive: true });
      const available = readFileSync(join(parent, "cgroup.controllers"), "utf8");
      for (const c of ["memory", "cpu", "pids"]) if (!available.split(/\s+/).includes(c)) return { version: "none", reason: `cgroup v2 controller ${c} is not delegated here` };
      writeFileSync(join(parent, "cgroup.subtree_control"), "+memory +cpu +pids");
      return { version: 2, parent };
    }
    if (existsSync(join(root, "memory", "memory.limit_in_bytes"))) {
      for (const c of V1_CONTROLLERS) mkdirSync(join(root, c, name), { recursive: true });
      return { version: 1, root, parent: name };
    }
    return { version: "none", reason: "no cgroup v1 or v2 hierarchy found" };
  } catch (err) {
    return { version: "none", reason: `cgroups are not writable: ${(err as Error).message}` };
  }
}

/**
 * How `cpu_mhz` bounds a sandbox's CPU: a CFS quota of `cpu_mhz / coreMhz` cores per 100 ms period
 * (its ceiling, busy host or idle), and a weight in proportion (its share when sandboxes together
 * want more than the host has: hosts admit more `cpu_mhz` than they have CPU). Default weights are
 * one core's: v1 `cpu.shares` 1024, v2 `cpu.weight` 100.
 */
export function cpuControls(cpuMhz: number, coreMhz: number): { period: number; quota: number; shares: number; weight: number } {
  const period = 100_000;
  const cores = cpuMhz / coreMhz;
  return {
    period,
    quota: Math.max(1_000, Math.round(cores * period)),
    shares: Math.max(2, Math.round(cores * 1024)),
    weight: Math.min(10_000, Math.max(1, Math.round(cores * 100))),
  };
}

/** One sandbox's cgroup (a group per v1 controller, or one v2 group). */
export class SandboxCgroup {
  private constructor(private readonly mode: CgroupMode, private readonly dirs: string[]) {}

  /** Creates the group with the sandbox's limits; undefined when the host has no cgroups. */
  static create(mode: CgroupMode, sandboxId: string, limits: SandboxLimits, coreMhz: number): SandboxCgroup | undefined {
    const { period, quota, shares, weight } = cpuControls(limits.cpuMhz, coreMhz);
    // The workspace is a tmpfs: its pages count in the memory group too.
    const memoryBytes = (limits.memoryMb + limits.diskMb) * 1024 * 1024;
    if (mode.version === 1) {
      const dir = (c: string) => join(mode.root, c, mode.parent, sandboxId);
      const dirs = V1_CONTROLLERS.map(dir);
      for (const d of dirs) mkdirSync(d, { recursive: true });
      writeFileSync(join(dir("memory"), "memory.limit_in_bytes"), String(memoryBytes));
      try {
        writeFileSync(join(dir("memory"), "memory.memsw.limit_in_bytes"), String(memoryBytes));
      } catch {
        // no swap accounting: the memory limit alone holds
      }
      writeFileSync(join(dir("cpu"), "cpu.cfs_period_us"), String(period));
      writeFileSync(join(dir("cpu"), "cpu.cfs_quota_us"), String(quota));
      writeFileSync(join(dir("cpu"), "cpu.shares"), String(shares));
      writeFileSync(join(dir("pids"), "pids.max"), String(limits.pids));
      return new SandboxCgroup(mode, dirs);
    }
    if (mode.version === 2) {
      const d = join(mode.parent, sandboxId);
      mkdirSync(d, { recursive: true });
      writeFileSync(join(d, "memory.max"), String(memoryBytes));
      try {
        writeFileSync(join(d, "memory.swap.max"), "0");
      } catch {
        // no swap controller
      }
      writeFileSync(join(d, "cpu.max"), `${quota} ${period}`);
      writeFileSync(join(d, "cpu.weight"), String(weight));
      writeFileSync(join(d, "pids.max"), String(limits.pids));
      return new SandboxCgroup(mode, [d]);
    }
    return undefined;
  }

  /** The cgroup.procs files a process writes its pid into to join the group (before it forks). */
  get procsFiles(): string[] {
    return this.dirs.map((d) => join(d, "cgroup.procs"));
  }

  /** OOM kills in the group so far. */
  oomKills(): number {
    try {
      const file = this.mode.version === 1 ? join(this.dirs[0]!, "memory.oom_control") : join(this.dirs[0]!, "memory.events");
      return Number(/oom_kill (\d+)/.exec(readFileSync(file, "utf8"))?.[1] ?? 0);
    } catch {
      return 0;
    }
  }

  /** Removes the group (after its processes ended; retried briefly while the kernel lets go). */
  async remove(): Promise<void> {
    for (const d of this.dirs)
      for (let i = 0; i < 20; i++) {
        try {
          rmdirSync(d);
          break;
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code === "ENOENT") break;
          await new Promise((r) => setTimeout(r, 50));
        }
      }
  }
}

/** Wraps `argv` so the process joins the cgroups before anything forks: sh writes its pid, then execs. */
export function inCgroup(procsFiles: readonly string[], argv: readonly string[]): string[] {
  if (procsFiles.length === 0) return [...argv];
  return ["/bin/sh", "-c", 'while [ "$1" != "--" ]; do echo $$ > "$1" || exit 97; shift; done; shift; exec "$@"', "sh", ...procsFiles, "--", ...argv];
}
