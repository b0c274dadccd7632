// Sandbox density: what an idle default sandbox (`{}`: 1,000 MHz, 512 MB, a 512 MB workspace)
// really costs in memory, with 20 and with 50 of them on one host, against the 1 GiB it reserves.
//
//   npm run build && node dist/bench/sandbox-density.js [--levels 20,50]
//
// Starts nats-server, an actor host, one sandbox host (real bubblewrap, per-sandbox uids and
// cgroups where this machine allows) and a gateway. The host is offered 64 GiB and a CPU
// over-commit of 64 so that admission never stops a level: this measures use, not admission.
// For each level: the sandboxes are created (10 at a time), each answers an exec, then after 2 s
// idle, per sandbox:
//   - RSS of their processes (every process of the sandboxes' uids: bwrap, its init, the agent),
//     shared pages (python's, libc's) counted in each;
//   - PSS of the same processes: shared pages split among their users (the honest per-process figure);
//   - their memory cgroups' usage (memory.usage_in_bytes / memory.current): what the kernel charges
//     them, page tables and kernel memory included;
//   - the sandbox host process's RSS growth over the level's start;
//   - MemAvailable's fall over the level's start (the whole machine: noisy on a shared one).
// The baseline of the last two is measured in the same run, just before the level's sandboxes start.
// Writes bench/results/sandbox-density.md.
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { loadavg } from "node:os";
import { parseArgs } from "node:util";
import { startActorHost, startGateway, startNats, TEST_KEY } from "./lib/processes.js";
import { startSandboxHost } from "../test/harness/processes.js";
import { fmt } from "./lib/stats.js";
import { machineLine, markdownTable, writeResults } from "./lib/table.js";

const { values: args } = parseArgs({ options: { levels: { type: "string", default: "20,50" } } });
const levels = args.levels.split(",").map(Number);
const UID_BASE = 245_000;
const MAX = 128;
const CGROUP = `tributary-bench-density-${process.pid}`;

const nats = await startNats();
const actors = await startActorHost(nats.url);
const host = await startSandboxHost(nats.url, {
  TRIBUTARY_SANDBOX_UID_BASE: String(UID_BASE),
  TRIBUTARY_SANDBOX_MAX: String(MAX),
  TRIBUTARY_SANDBOX_CPU_MHZ: "0",
  TRIBUTARY_SANDBOX_CPU_OVERCOMMIT: "64",
  TRIBUTARY_SANDBOX_MEMORY_MB: String(64 * 1024),
  TRIBUTARY_SANDBOX_CGROUP: CGROUP,
  TRIBUTARY_SANDBOX_EGRESS: "off",
  TRIBUTARY_APP_HOST: "off",
});
const gateway = await startGateway(nats.url, { TRIBUTARY_SANDBOX_MAX_PER_PROJECT: "1000" });
const headers = { authorization: `Bearer ${TEST_KEY}`, "content-type": "application/json" };
const post = async (path: string, body: unknown) => (await fetch(gateway.url + path, { method: "POST", headers, body: JSON.stringify(body) })).json() as Promise<any>;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const kib = (text: string, field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(text)?.[1] ?? 0);
const memAvailableKib = () => kib(readFileSync("/proc/meminfo", "utf8"), "MemAvailable");
const rssKib = (pid: number) => kib(readFileSync(`/proc/${pid}/status`, "utf8"), "VmRSS");

/** RSS and PSS (KiB) of every process running as one of the sandboxes' uids, and how many. */
function sandboxProcesses(): { processes: number; rss: number; pss: number } {
  const out = { processes: 0, rss: 0, pss: 0 };
  for (const pid of readdirSync("/proc").filter((p) => /^\d+$/.test(p))) {
    try {
      const status = readFileSync(`/proc/${pid}/status`, "utf8");
      const uid = Number(/^Uid:\s+(\d+)/m.exec(status)![1]);
      if (uid < UID_BASE || uid >= UID_BASE + MAX) continue;
      out.processes++;
      out.rss += kib(status, "VmRSS");
      out.pss += kib(readFileSync(`/proc/${pid}/smaps_rollup`, "utf8"), "Pss");
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

/** The directory holding the sandboxes' memory cgroups (v1 or v2), if they have any. */
function memoryCgroupParent(): { dir: string; file: string } | undefined {
  const v1 = join("/sys/fs/cgroup/memory", CGROUP);
  if (existsSync(v1)) return { dir: v1, file: "memory.usage_in_bytes" };
  const own = /^0::(.*)$/m.exec(readFileSync(`/proc/${host.child.pid}/cgroup`, "utf8"))?.[1];
  const v2 = own === undefined ? undefined : join("/sys/fs/cgroup", own, CGROUP);
  return v2 && existsSync(v2) ? { dir: v2, file: "memory.current" } : undefined;
}

/** Bytes the sandboxes' memory cgroups are charged, and how many groups. */
function cgroupUsage(ids: string[]): { groups: number; bytes: number } | undefined {
  const parent = memoryCgroupParent();
  if (!parent) return undefined;
  let bytes = 0;
  let groups = 0;
  for (const id of ids) {
    try {
      bytes += Number(readFileSync(join(parent.dir, id, parent.file), "utf8"));
      groups++;
    } catch {
      // no group for it
    }
  }
  return { groups, bytes };
}

interface Level {
  count: number;
  processes: number;
  rssMib: number;
  pssMib: number;
  cgroupMib: number | undefined;
  hostRssMib: number;
  memAvailableMib: number;
}

async function level(count: number): Promise<Level> {
  await sleep(2_000);
  const availableBefore = memAvailableKib();
  const hostBefore = rssKib(host.child.pid!);
  const ids: string[] = [];
  for (let i = 0; i < count; i += 10) {
    const wave = await Promise.all(Array.from({ length: Math.min(10, count - i) }, () => post("/v1/sandboxes", {})));
    for (const s of wave) {
      if (s.status !== "running") throw new Error(`a sandbox did not start: ${JSON.stringify(s)}`);
      ids.push(s.id);
    }
  }
  const answers = await Promise.all(ids.map((id) => post(`/v1/sandboxes/${id}/exec`, { command: ["/bin/echo", "ok"] })));
  if (answers.some((a) => a.stdout !== "ok\n")) throw new Error("an exec did not answer");
  await sleep(2_000);
  const procs = sandboxProcesses();
  const cgroup = cgroupUsage(ids);
  const result: Level = {
    count,
    processes: procs.processes,
    rssMib: procs.rss / 1024 / count,
    pssMib: procs.pss / 1024 / count,
    cgroupMib: cgroup && cgroup.groups === count ? cgroup.bytes / 1024 / 1024 / count : undefined,
    hostRssMib: (rssKib(host.child.pid!) - hostBefore) / 1024 / count,
    memAvailableMib: (availableBefore - memAvailableKib()) / 1024 / count,
  };
  for (let i = 0; i < ids.length; i += 10) await Promise.all(ids.slice(i, i + 10).map((id) => fetch(`${gateway.url}/v1/sandboxes/${id}`, { method: "DELETE", headers })));
  return result;
}

try {
  await post("/v1/sandboxes", {}).then((s) => fetch(`${gateway.url}/v1/sandboxes/${s.id}`, { method: "DELETE", headers })); // warm-up
  const results: Level[] = [];
  for (const count of levels) results.push(await level(count));
  const mib = (n: number | undefined) => (n === undefined ? "—" : fmt(n));
  const at = (n: number) => results.find((r) => r.count === n) ?? results[results.length - 1]!;
  const big = at(Math.max(...levels));
  writeResults("sandbox-density.md", "Sandbox density: memory per idle default sandbox", [
    `${machineLine()} Load average during the run: ${loadavg().map((l) => l.toFixed(1)).join(", ")} (a machine shared with other work: MemAvailable moves with it).`,
    markdownTable(
      ["idle sandboxes", "processes", "RSS MiB each", "PSS MiB each", "cgroup MiB each", "host RSS added MiB each", "MemAvailable fall MiB each", "reserved MiB each"],
      results.map((r) => [r.count, r.processes, mib(r.rssMib), mib(r.pssMib), mib(r.cgroupMib), mib(r.hostRssMib), mib(r.memAvailableMib), 1024]),
    ),
    `Each default sandbox reserves 1,024 MiB (512 MB of memory and a 512 MB workspace, both RAM: memory is a hard limit). ` +
      `Idle, at ${big.count}, one uses ${mib(big.pssMib)} MiB by PSS (${mib(big.rssMib)} by RSS, shared pages counted in each), ` +
      `${big.cgroupMib === undefined ? "no cgroup figure (no memory cgroups here)" : `${mib(big.cgroupMib)} MiB charged to its cgroup`}, ` +
      `and the machine's MemAvailable fell ${mib(big.memAvailableMib)} MiB per sandbox: ` +
      `about ${big.memAvailableMib > 0 ? Math.round(1024 / big.memAvailableMib) : "—"} times less than it reserves. ` +
      `So on a host where sandboxes sit idle, their \`memory_mb\` and \`disk_mb\` requests, not their use, bound how many fit.`,
    `Command: \`node dist/bench/sandbox-density.js --levels ${levels.join(",")}\``,
  ]);
} finally {
  await gateway.kill();
  await host.kill();
  await actors.kill();
  await nats.stop();
}
