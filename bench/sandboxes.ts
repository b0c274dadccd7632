// Sandboxes: time from POST /v1/sandboxes to the first exec's output, the round trip of `true` in
// a running sandbox, and what an idle sandbox costs in memory.
//
//   npm run build && node dist/bench/sandboxes.js [--starts 40] [--execs 300] [--idle 40]
//
// Starts and idle cost are measured twice in the same run: network "none" and network "egress"
// (the same path plus slirp4netns attached to the sandbox's namespace before its first call).
//
// Starts nats-server, an actor host, one sandbox host (real bubblewrap, cgroups where writable)
// and a gateway. Starts are sequential (one sandbox at a time, each stopped after its exec), so
// the figure is the path's own latency. Baseline in the same run: `bwrap ... /bin/true` spawned
// directly by this process (the floor any bubblewrap sandbox pays). Idle cost: the host's
// sandboxes' RSS (every process of their uids) divided by their count. Writes bench/results/sandboxes.md.
import { spawnSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { loadavg } from "node:os";
import { parseArgs } from "node:util";
import { startActorHost, startGateway, startNats, TEST_KEY } from "./lib/processes.js";
import { startSandboxHost } from "../test/harness/processes.js";
import { fmt, percentile } from "./lib/stats.js";
import { machineLine, markdownTable, writeResults } from "./lib/table.js";

const { values: args } = parseArgs({ options: { starts: { type: "string", default: "40" }, execs: { type: "string", default: "300" }, idle: { type: "string", default: "40" } } });
const UID_BASE = 240_000;

const nats = await startNats();
const actors = await startActorHost(nats.url);
const host = await startSandboxHost(nats.url, { TRIBUTARY_SANDBOX_UID_BASE: String(UID_BASE), TRIBUTARY_SANDBOX_CPU_MHZ: "200000", TRIBUTARY_SANDBOX_MEMORY_MB: "65536", TRIBUTARY_SANDBOX_MAX: "128", TRIBUTARY_SANDBOX_EGRESS: "on" });
const gateway = await startGateway(nats.url, { TRIBUTARY_SANDBOX_MAX_PER_PROJECT: "1000" });
const headers = { authorization: `Bearer ${TEST_KEY}`, "content-type": "application/json" };
const post = async (path: string, body: unknown) => (await fetch(gateway.url + path, { method: "POST", headers, body: JSON.stringify(body) })).json() as Promise<any>;
const small = { memory_mb: 64, disk_mb: 16, cpu_mhz: 500 };

try {
  // Baseline: bubblewrap alone.
  const bwrapMs: number[] = [];
  for (let i = 0; i < 20; i++) {
    const t0 = performance.now();
    spawnSync("bwrap", ["--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--proc", "/proc", "--dev", "/dev", "/bin/true"]);
    bwrapMs.push(performance.now() - t0);
  }

  await post("/v1/sandboxes", small).then((s) => post(`/v1/sandboxes/${s.id}/stop`, {})); // warm-up
  await post("/v1/sandboxes", { ...small, network: "egress" }).then((s) => post(`/v1/sandboxes/${s.id}/stop`, {}));
  const starts = async (network: "none" | "egress") => {
    const ms: number[] = [];
    for (let i = 0; i < Number(args.starts); i++) {
      const t0 = performance.now();
      const s = await post("/v1/sandboxes", { ...small, network });
      const out = await post(`/v1/sandboxes/${s.id}/exec`, { command: ["/bin/echo", "ready"] });
      ms.push(performance.now() - t0);
      if (out.stdout !== "ready\n") throw new Error(`unexpected exec result ${JSON.stringify(out)}`);
      await post(`/v1/sandboxes/${s.id}/stop`, {});
    }
    return ms;
  };
  // Alternating halves would mix warm caches; one after the other keeps each figure its own path's.
  const startMs = await starts("none");
  const egressStartMs = await starts("egress");

  const running = await post("/v1/sandboxes", small);
  const execMs: number[] = [];
  for (let i = 0; i < Number(args.execs); i++) {
    const t0 = performance.now();
    await post(`/v1/sandboxes/${running.id}/exec`, { command: ["/bin/true"] });
    execMs.push(performance.now() - t0);
  }
  await post(`/v1/sandboxes/${running.id}/stop`, {});

  /** Idle sandboxes of one kind: their processes' RSS (the sandboxes' uids, and slirp4netns children of the host). */
  const idleCost = async (network: "none" | "egress") => {
    const idle: string[] = [];
    for (let i = 0; i < Number(args.idle); i++) idle.push((await post("/v1/sandboxes", { ...small, network })).id);
    await new Promise((r) => setTimeout(r, 1_000));
    let rssKb = 0;
    let processes = 0;
    let stackKb = 0;
    for (const pid of readdirSync("/proc").filter((p) => /^\d+$/.test(p))) {
      try {
        const status = readFileSync(`/proc/${pid}/status`, "utf8");
        const uid = Number(/^Uid:\s+(\d+)/m.exec(status)![1]);
        const ppid = Number(/^PPid:\s+(\d+)/m.exec(status)![1]);
        const rss = Number(/^VmRSS:\s+(\d+)/m.exec(status)?.[1] ?? 0);
        if (ppid === host.child.pid && readFileSync(`/proc/${pid}/cmdline`, "utf8").includes("slirp4netns")) {
          stackKb += rss;
          continue;
        }
        if (uid < UID_BASE || uid >= UID_BASE + 128) continue;
        rssKb += rss;
        processes++;
      } catch {
        // gone
      }
    }
    for (const id of idle) await post(`/v1/sandboxes/${id}/stop`, {});
    return { count: idle.length, processes, mibEach: rssKb / 1024 / Math.max(1, idle.length), stackMibEach: stackKb / 1024 / Math.max(1, idle.length) };
  };
  const idleNone = await idleCost("none");
  const idleEgress = await idleCost("egress");

  const row = (name: string, xs: number[], target: string) => [name, xs.length, fmt(percentile(xs, 50)), fmt(percentile(xs, 99)), target];
  writeResults("sandboxes.md", "Sandboxes: start, exec round trip, idle cost", [
    `${machineLine()} Load average during the run: ${loadavg().map((l) => l.toFixed(1)).join(", ")} (a machine shared with other test suites: read the figures as upper bounds).`,
    markdownTable(["measure", "n", "p50 ms", "p99 ms", "target"], [
      row("`bwrap /bin/true` spawned directly (baseline)", bwrapMs, "—"),
      row("POST /v1/sandboxes → first exec's output", startMs, "p50 <= 150 ms"),
      row('same, `network: "egress"` (slirp4netns attached first)', egressStartMs, "—"),
      row("exec of `/bin/true` in a running sandbox (HTTP round trip)", execMs, "p50 <= 10 ms"),
    ]),
    `Idle sandboxes: ${idleNone.count} held, ${idleNone.processes} processes of theirs, ${fmt(idleNone.mibEach)} MiB RSS each (bwrap's init, bwrap and the Python agent; shared pages counted in each). ` +
      `At that figure a 2-core, 8 GiB machine holds about ${Math.floor((8 * 1024) / Math.max(1, idleNone.mibEach))} idle sandboxes by memory (their memory_mb reservations aside).`,
    `Idle egress sandboxes: ${idleEgress.count} held, ${fmt(idleEgress.mibEach)} MiB RSS each for the sandbox's own processes plus ${fmt(idleEgress.stackMibEach)} MiB for its slirp4netns.`,
  ]);
} finally {
  await gateway.kill();
  await host.kill();
  await actors.kill();
  await nats.stop();
}
