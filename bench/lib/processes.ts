// Benchmarks start the same real processes as the end-to-end tests.
export { startNats, startRunner, startGateway, startActorHost, TEST_KEY, TEST_MODEL, testCatalog, repoRoot } from "../../test/harness/processes.js";

import { readFileSync } from "node:fs";
import { startActorHost, startGateway, startNats, startRunner, type ActorHost, type Gateway, type NatsServer, type Runner } from "../../test/harness/processes.js";
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
export async function startPlacedStack(env: NodeJS.ProcessEnv, layout: BenchLayout): Promise<PlacedStack> {
  const nats = await startNats(layout.services);
  const actors = await startActorHost(nats.url, env, layout.services);
  const runner = await startRunner(nats.url, env, layout.runner);
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
