// Benchmarks start the same real processes as the end-to-end tests.
export { startNats, startRunner, startGateway, startActorHost, TEST_KEY, TEST_MODEL, testCatalog, repoRoot } from "../../test/harness/processes.js";

import { readFileSync } from "node:fs";

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
