import { allowedCpus, formatCpuList, planCpus } from "../../lib/process/cpu-affinity.js";

/** Where a benchmark's processes run: the placement `tributary start` picks for one CPU runner. */
export interface BenchLayout {
  runner: readonly number[] | undefined;
  services: readonly number[] | undefined;
  /** For the results: "runner on CPU 1, the rest on CPU 0" or why nothing is pinned. */
  description: string;
}

/** TRIBUTARY_RUNNER_CPUS applies here as in `tributary start` (default "auto"). */
export function benchLayout(runnerThreads: number): BenchLayout {
  const result = planCpus(process.env.TRIBUTARY_RUNNER_CPUS ?? "auto", allowedCpus(), [{ name: "runner", cpus: runnerThreads }]);
  if (!result.plan) return { runner: undefined, services: undefined, description: `processes not pinned (${result.reason})` };
  const runner = result.plan.runners.get("runner")!;
  return {
    runner,
    services: result.plan.services,
    description: `runner on CPU ${formatCpuList(runner)}, gateway, actor host and nats-server on CPU ${formatCpuList(result.plan.services)} (as \`tributary start\` places them; TRIBUTARY_RUNNER_CPUS=off to float)`,
  };
}
