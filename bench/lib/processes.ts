// Benchmarks start the same real processes as the end-to-end tests.
export { startNats, startRunner, startGateway, startActorHost, TEST_KEY, TEST_MODEL, testCatalog, repoRoot } from "../../test/harness/processes.js";

import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { parseCpuList } from "../../lib/process/cpu-affinity.js";
import { freePort } from "../../test/harness/cluster.js";
import { repoRoot, startActorHost, startGateway, startNats, startRunner, TEST_KEY, type ActorHost, type Gateway, type NatsServer, type Runner } from "../../test/harness/processes.js";
import type { BenchLayout } from "./cpu-layout.js";

/** The whole stack of one model runner, each process where `layout` puts it. */
export interface PlacedStack {
  nats: NatsServer;
  actors: ActorHost;
  runner: Runner;
  gateway: Gateway;
  /** Stops every process, gateway first: with SIGTERM and their drain when `graceful`, else SIGKILL. */
  close(graceful?: boolean): Promise<void>;
}

/** Starts nats-server, the actor host, one runner and the gateway, placed as `tributary start` places them. */
export async function startPlacedStack(env: NodeJS.ProcessEnv, layout: BenchLayout, runnerEnv: NodeJS.ProcessEnv = {}): Promise<PlacedStack> {
  const nats = await startNats(layout.services);
  const actors = await startActorHost(nats.url, env, layout.services);
  const runner = await startRunner(nats.url, { ...env, ...runnerEnv }, layout.runner);
  const gateway = await startGateway(nats.url, env, layout.services);
  return {
    nats,
    actors,
    runner,
    gateway,
    async close(graceful = false) {
      for (const p of [gateway, runner, actors]) await (graceful ? p.stop() : p.kill());
      await nats.stop();
    },
  };
}

/**
 * The environment that makes a Node process of the stack profile itself (bench/lib/cpu-profile.ts:
 * SIGUSR2 starts and stops V8's CPU profiler) into `dir`; nothing without a directory.
 */
export function cpuProfileEnv(dir: string | undefined): NodeJS.ProcessEnv {
  return dir ? { NODE_OPTIONS: `--import ${join(repoRoot, "dist", "bench", "lib", "cpu-profile.js")}`, TRIBUTARY_BENCH_PROFILE_DIR: dir } : {};
}

/** Runs `source` as an ES module in a new Node process (from the repository root, so its imports resolve); resolves once it writes its first line to stdout ("ready"). */
export function startNodeSource(source: string, args: string[]): Promise<ChildProcess> {
  const child = spawn(process.execPath, ["--input-type=module", "-e", source, ...args], { cwd: repoRoot, stdio: ["ignore", "pipe", "inherit"] });
  return new Promise((resolve, reject) => {
    child.stdout!.once("data", () => resolve(child));
    child.once("exit", (code) => reject(new Error(`exited ${code}`)));
  });
}

/** Resident memory of a process in MiB (Linux /proc). */
export function rssMiB(pid: number): number {
  try {
    const status = readFileSync(`/proc/${pid}/status`, "utf8");
    const kb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? NaN);
    return kb / 1024;
  } catch {
    return NaN;
  }
}

/** CPU time (user+system) of a process in ms, from /proc/<pid>/stat. */
export function cpuMs(pid: number): number {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
    const ticks = Number(fields[11]) + Number(fields[12]);
    return (ticks * 1000) / 100;
  } catch {
    return NaN;
  }
}

/**
 * CPU time of a process in ms split by where it went (Linux /proc): user and system time of its
 * main thread (for Node, the event loop: JS, uWS, syscalls) and of all its other threads
 * together (for Node, V8's GC and compiler helpers and libuv's pool; for nats-server, Go's).
 */
export interface CpuSplit {
  mainUser: number;
  mainSys: number;
  otherUser: number;
  otherSys: number;
}

export function cpuSplit(pid: number): CpuSplit {
  const split: CpuSplit = { mainUser: 0, mainSys: 0, otherUser: 0, otherSys: 0 };
  let tids: string[];
  try {
    tids = readdirSync(`/proc/${pid}/task`);
  } catch {
    return split;
  }
  for (const tid of tids) {
    try {
      const fields = readFileSync(`/proc/${pid}/task/${tid}/stat`, "utf8").split(") ")[1]!.split(" ");
      const user = (Number(fields[11]) * 1000) / 100;
      const sys = (Number(fields[12]) * 1000) / 100;
      if (tid === String(pid)) {
        split.mainUser += user;
        split.mainSys += sys;
      } else {
        split.otherUser += user;
        split.otherSys += sys;
      }
    } catch {
      // The thread ended between the listing and the read: its time is in the process's total.
    }
  }
  return split;
}

/** What was spent between two splits. */
export function cpuSplitSince(before: CpuSplit, after: CpuSplit): CpuSplit {
  return { mainUser: after.mainUser - before.mainUser, mainSys: after.mainSys - before.mainSys, otherUser: after.otherUser - before.otherUser, otherSys: after.otherSys - before.otherSys };
}

/** `tributary start` as a user runs it, with the layout it picks (runners, threads, CPU placement). */
export interface StartedTributary {
  port: number;
  /** The supervisor's pid (its children: nats-server, actor host, runners, gateway). */
  pid: number;
  /** The supervisor's `runner layout` record: runners and threads per model, and why. */
  layout: { library?: string; models?: Record<string, { runners: number; threads: number; class: string }> };
  /** The CPUs of the gateway, actor host and nats-server when pinned (the load client joins them). */
  services: number[] | undefined;
  /** "runner ... on CPU 1, the rest on CPU 0" or why nothing is pinned, from the supervisor's log. */
  placement: string;
  close(): Promise<void>;
}

/**
 * Runs `node dist/cli/main.js start` with its own TRIBUTARY_HOME (a temporary directory), the
 * embedded nats-server on a free port, the gateway on a free port, no sandbox host, and waits
 * until `model` answers a one-token request.
 */
export async function startTributary(env: NodeJS.ProcessEnv, model: string): Promise<StartedTributary> {
  const home = mkdtempSync(join(tmpdir(), "tributary-bench-home-"));
  const child = spawn(process.execPath, [join(repoRoot, "dist/cli/main.js"), "start"], {
    env: {
      ...process.env, ...env, TRIBUTARY_HOME: home, TRIBUTARY_API_KEY: TEST_KEY, TRIBUTARY_PORT: "0", TRIBUTARY_NATS_PORT: String(await freePort()),
      TRIBUTARY_ADMIN_ADDR: `127.0.0.1:${await freePort()}`, TRIBUTARY_START_SANDBOX_HOST: "off", NATS_URL: "", TRIBUTARY_LOG_LEVEL: "info",
      // Requests cut off at the end of a measurement need not hold up the shutdown.
      TRIBUTARY_DRAIN_TIMEOUT_MS: "2000",
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  let layout: StartedTributary["layout"] = {};
  let services: number[] | undefined;
  let placement = "";
  let stderrTail = "";
  createInterface({ input: child.stderr! }).on("line", (line) => {
    stderrTail = (stderrTail + line + "\n").slice(-4000);
    try {
      const r = JSON.parse(line) as { msg?: string; runners?: Record<string, string>; others?: string; reason?: string } & StartedTributary["layout"];
      if (r.msg === "runner layout") layout = { library: r.library, models: r.models };
      if (r.msg === "processes pinned to CPUs") {
        services = parseCpuList(r.others!);
        placement = `${Object.entries(r.runners ?? {}).map(([name, cpus]) => `${name} on CPU ${cpus}`).join(", ")}; gateway, actor host and nats-server on CPU ${r.others}`;
      }
      if (r.msg === "processes are not pinned to CPUs") placement = `nothing pinned (${r.reason})`;
    } catch {
      // nats-server's own lines
    }
  });
  let stdout = "";
  child.stdout!.on("data", (d: Buffer) => (stdout += d.toString()));
  const close = async () => {
    // Every process of this stack, to be sure none outlives it (a supervisor killed at the
    // timeout leaves its children).
    const tree = descendants(child.pid!);
    if (child.exitCode === null) {
      child.kill("SIGINT");
      const timer = setTimeout(() => child.kill("SIGKILL"), 20_000);
      await exited;
      clearTimeout(timer);
    }
    for (const pid of tree)
      try {
        if (readFileSync(`/proc/${pid}/cmdline`, "utf8").includes(home) || readFileSync(`/proc/${pid}/environ`, "utf8").includes(home)) process.kill(pid, "SIGKILL");
      } catch {
        // gone
      }
    rmSync(home, { recursive: true, force: true, maxRetries: 10, retryDelay: 100 });
  };
  try {
    const deadline = Date.now() + 180_000;
    let port = 0;
    for (;;) {
      if (child.exitCode !== null) throw new Error(`tributary start exited (${child.exitCode}): ${stderrTail}`);
      if (Date.now() > deadline) throw new Error(`tributary start: ${model} did not answer within 180 s: ${stderrTail}`);
      port ||= Number(/Tributary is up: http:\/\/[^:]+:(\d+)/.exec(stdout)?.[1] ?? 0);
      if (port) {
        const ok = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
          method: "POST",
          headers: { "content-type": "application/json", authorization: `Bearer ${TEST_KEY}` },
          body: JSON.stringify({ model, messages: [{ role: "user", content: "hi" }], max_tokens: 1 }),
        }).then((r) => r.ok, () => false);
        if (ok) return { port, pid: child.pid!, layout, services, placement, close };
      }
      await new Promise((r) => setTimeout(r, 300));
    }
  } catch (err) {
    await close();
    throw err;
  }
}

/** Every process under `pid`, from /proc/<pid>/task/<tid>/children. */
export function descendants(pid: number): number[] {
  const out: number[] = [];
  try {
    for (const tid of readdirSync(`/proc/${pid}/task`))
      for (const c of readFileSync(`/proc/${pid}/task/${tid}/children`, "utf8").split(" ").filter(Boolean)) out.push(Number(c), ...descendants(Number(c)));
  } catch {
    // gone
  }
  return out;
}
