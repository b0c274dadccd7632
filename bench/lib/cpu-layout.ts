import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { allowedCpus, formatCpuList, planCpus, taskset } from "../../lib/process/cpu-affinity.js";

/** The CPUs this process was started with (placeSelf narrows them for a while). */
const startCpus = allowedCpus();

/** Where a benchmark's processes run: the placement `tributary start` picks for one CPU runner. */
export interface BenchLayout {
  runner: readonly number[] | undefined;
  services: readonly number[] | undefined;
  /** For the results: "runner on CPU 1, the rest on CPU 0" or why nothing is pinned. */
  description: string;
}

/** TRIBUTARY_RUNNER_CPUS (or `setting`) applies here as in `tributary start` (default "auto"). */
export function benchLayout(runnerThreads: number, setting?: string): BenchLayout {
  const result = planCpus(setting ?? process.env.TRIBUTARY_RUNNER_CPUS ?? "auto", startCpus, [{ name: "runner", cpus: runnerThreads }]);
  if (!result.plan) return { runner: undefined, services: undefined, description: `processes not pinned (${result.reason})` };
  const runner = result.plan.runners.get("runner")!;
  return {
    runner,
    services: result.plan.services,
    description: `runner on CPU ${formatCpuList(runner)}, gateway, actor host and nats-server on CPU ${formatCpuList(result.plan.services)} (as \`tributary start\` places them; TRIBUTARY_RUNNER_CPUS=off to float)`,
  };
}

/** Every CPU this process was started with: where a child that may use them all must be placed explicitly while placeSelf has narrowed this process (a child inherits its parent's CPUs). */
export function everyCpu(): readonly number[] {
  return startCpus;
}

/** The CPUs a process may run on, as Linux lists them ("0-1"); "?" where that cannot be read. */
export function cpusOf(pid: number): string {
  try {
    return /Cpus_allowed_list:\s*(\S+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? "?";
  } catch {
    return "?";
  }
}

/**
 * Runs this process (every thread of it) on `cpus`, or on every CPU it may use when undefined.
 * The in-process baselines run on the runner's CPUs, so that both sides of a ratio decode under
 * the same placement.
 */
export function placeSelf(cpus: readonly number[] | undefined): void {
  if (!taskset()) return;
  execFileSync("taskset", ["-a", "-p", "-c", formatCpuList(cpus ?? startCpus), String(process.pid)], { stdio: "ignore" });
}
