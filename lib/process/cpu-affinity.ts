import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { availableParallelism } from "node:os";

// CPU placement of the stack's processes on one machine. A CPU llama runner's decode loop is a
// serial chain (JS thread -> decode on a worker thread -> sampling -> JS thread) that runs about
// one core flat out; when the gateway, the actor host and nats-server are scheduled onto that
// core, every hand-off waits its turn and the whole batch slows down (measured: batch throughput
// 0.79 of the in-process engine with the processes floating over 2 cores, 1.00 with the runner
// on a core of its own). So by default each CPU runner gets `threads` CPUs to itself and the
// other processes share the rest, when the machine has CPUs to spare. On Kubernetes the same
// comes from Guaranteed pods and the kubelet's static CPU manager policy instead.

/** What one runner process needs: `cpus` dedicated CPUs (0 for GPU and sim runners: no pinning). */
export interface RunnerCpuDemand {
  name: string;
  cpus: number;
}

export interface CpuPlan {
  /** Dedicated CPUs of each pinned runner, by name. */
  runners: Map<string, number[]>;
  /** CPUs of everything else (gateway, actor host, nats-server). */
  services: number[];
}

/** A plan, or why there is none. */
export type CpuPlanResult = { plan: CpuPlan } | { plan: undefined; reason: string };

/** Parses a Linux CPU list ("0-3,6"). Throws on malformed text. */
export function parseCpuList(text: string): number[] {
  const cpus = new Set<number>();
  for (const part of text.split(",").map((p) => p.trim()).filter(Boolean)) {
    const m = /^(\d+)(?:-(\d+))?$/.exec(part);
    if (!m) throw new Error(`"${text}" is not a CPU list (expected e.g. "1", "2-3" or "0,2-5")`);
    const from = Number(m[1]);
    const to = m[2] === undefined ? from : Number(m[2]);
    if (to < from) throw new Error(`"${part}" in "${text}" is a descending range`);
    for (let c = from; c <= to; c++) cpus.add(c);
  }
  if (cpus.size === 0) throw new Error(`"${text}" names no CPU`);
  return [...cpus].sort((a, b) => a - b);
}

export function formatCpuList(cpus: readonly number[]): string {
  const sorted = [...cpus].sort((a, b) => a - b);
  const parts: string[] = [];
  for (let i = 0; i < sorted.length; ) {
    let j = i;
    while (j + 1 < sorted.length && sorted[j + 1] === sorted[j]! + 1) j++;
    parts.push(i === j ? `${sorted[i]}` : `${sorted[i]}-${sorted[j]}`);
    i = j + 1;
  }
  return parts.join(",");
}

/** The CPUs this process may run on (its affinity mask, e.g. a container's cpuset). */
export function allowedCpus(): number[] {
  try {
    const list = /Cpus_allowed_list:\s*(\S+)/.exec(readFileSync("/proc/self/status", "utf8"))?.[1];
    if (list) return parseCpuList(list);
  } catch {
    // not Linux: fall through
  }
  return Array.from({ length: availableParallelism() }, (_, i) => i);
}

/**
 * Places runners on CPUs. `setting` is TRIBUTARY_RUNNER_CPUS:
 * - "auto": each runner that needs CPUs gets that many of its own, from the highest-numbered
 *   down (CPU 0 takes most interrupts), when at least one CPU is left for the other processes;
 * - "own": each runner gets that many CPUs of its own, from the highest-numbered down (wrapping
 *   round when they need more than there are), and the other processes float over every CPU;
 * - "off": no pinning;
 * - a CPU list: every runner that needs CPUs shares that list, the other processes get the rest.
 */
export function planCpus(setting: string, allowed: readonly number[], demands: readonly RunnerCpuDemand[]): CpuPlanResult {
  const pinnable = demands.filter((d) => d.cpus > 0);
  if (setting === "off") return { plan: undefined, reason: "TRIBUTARY_RUNNER_CPUS=off" };
  if (pinnable.length === 0) return { plan: undefined, reason: "no runner decodes on the CPU" };
  if (setting === "auto") {
    const needed = pinnable.reduce((sum, d) => sum + d.cpus, 0);
    if (needed >= allowed.length)
      return { plan: undefined, reason: `the CPU runners need ${needed} CPUs and ${allowed.length} are available: none would be left for the gateway, actor host and nats-server` };
    const free = [...allowed].sort((a, b) => b - a);
    const runners = new Map(pinnable.map((d) => [d.name, free.splice(0, d.cpus).sort((a, b) => a - b)]));
    return { plan: { runners, services: free.sort((a, b) => a - b) } };
  }
  if (setting === "own") {
    // Every runner on CPUs of its own, round the machine from the top; the other processes on every CPU.
    const order = [...allowed].sort((a, b) => b - a);
    let next = 0;
    const runners = new Map(pinnable.map((d) => [d.name, Array.from({ length: Math.min(d.cpus, order.length) }, () => order[next++ % order.length]!).sort((a, b) => a - b)]));
    return { plan: { runners, services: [...allowed].sort((a, b) => a - b) } };
  }
  const chosen = parseCpuList(setting);
  const outside = chosen.filter((c) => !allowed.includes(c));
  if (outside.length > 0) throw new Error(`TRIBUTARY_RUNNER_CPUS names CPUs this machine does not offer: ${formatCpuList(outside)} (available: ${formatCpuList(allowed)})`);
  const services = allowed.filter((c) => !chosen.includes(c));
  if (services.length === 0) throw new Error(`TRIBUTARY_RUNNER_CPUS=${setting} leaves no CPU for the gateway, actor host and nats-server`);
  return { plan: { runners: new Map(pinnable.map((d) => [d.name, chosen])), services } };
}

let tasksetPath: string | null | undefined;

/** Path of util-linux's taskset, or null when it is not installed. */
export function taskset(): string | null {
  if (tasksetPath === undefined) {
    try {
      execFileSync("taskset", ["-V"], { stdio: "ignore" });
      tasksetPath = "taskset";
    } catch {
      tasksetPath = null;
    }
  }
  return tasksetPath;
}

/** The command line that runs `command` on `cpus` (unchanged without CPUs or without taskset). */
export function onCpus(command: string, args: readonly string[], cpus: readonly number[] | undefined): { command: string; args: string[] } {
  const tool = cpus && cpus.length > 0 ? taskset() : null;
  if (!tool || !cpus) return { command, args: [...args] };
  // taskset execs the command: the child's pid, signals and exit code are the command's own.
  return { command: tool, args: ["-c", formatCpuList(cpus), command, ...args] };
}
