// A hosted app's small JSON route through gateway -> NATS -> app host -> uvicorn (walled in,
// on its Unix socket), against the same app on Debian's uvicorn called directly (TCP, no
// walls), at 1, 16 and 64 concurrent keep-alive clients; and the time from `tributary deploy`
// to healthy for the example chat app.
//
//   node dist/bench/hosted-app.js [--seconds 5] [--rounds 2] [--deploys 5] [--clients 1,16,64] [--profile DIR]
import { execFile, spawn } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { availableParallelism, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { appDir, EXAMPLE_APP, uploadBundle, waitForDeployment } from "../test/harness/apps.js";
import { startSandboxHost } from "../test/harness/processes.js";
import { JSON_APP, keepAliveLoops } from "./lib/json-app.js";
import { markdownTable, machineLine, writeResults } from "./lib/table.js";
import { cpuMs, cpuProfileEnv, repoRoot, startActorHost, startGateway, startNats, TEST_KEY } from "./lib/processes.js";
import { fmt, percentile } from "./lib/stats.js";

const args = process.argv.slice(2);
const arg = (name: string, fallback: number) => {
  const at = args.indexOf(`--${name}`);
  return at >= 0 ? Number(args[at + 1]) : fallback;
};
const text = (name: string) => {
  const at = args.indexOf(`--${name}`);
  return at >= 0 ? args[at + 1] : undefined;
};
const seconds = arg("seconds", 5);
const deploys = arg("deploys", 5);
const rounds = arg("rounds", 2);
const CONCURRENCY = (text("clients") ?? "1,16,64").split(",").map(Number);
/** --profile DIR: the gateway and the app host write V8 CPU profiles of each hosted round there (bench/lib/cpu-profile.ts). */
const profileDir = text("profile");

const ADDRESS = "default-project.local.apps.localhost";
const MANIFEST = "entrypoint: app:app\norganization_slug: local\nproject: Default project\nproject_slug: default-project\ncpu_mhz: 2000\ngpu_count: 0\nmemory_size_mb: 256\n";

interface Load {
  latencies: number[];
  errors: number;
  /** CPU ms of each sampled process over the recorded part (warm-up excluded). */
  cpu: Record<string, number>;
  /** How long the recorded part took (ms). */
  wallMs: number;
}

/** `clients` keep-alive loops of GET / for `seconds` (after a 1 s warm-up); latencies in ms. */
async function load(port: number, host: string | undefined, clients: number, cpu: () => Record<string, number>, toggleProfiles?: () => void): Promise<Load> {
  const headers: Record<string, string> = { authorization: `Bearer ${TEST_KEY}` };
  if (host) headers.host = host;
  const loops = keepAliveLoops(port, clients, headers);
  await loops.run(1_000);
  const before = cpu();
  const startedAt = performance.now();
  toggleProfiles?.();
  const { latencies, errors } = await loops.run(seconds * 1_000);
  toggleProfiles?.();
  const after = cpu();
  const wallMs = performance.now() - startedAt;
  // The profiled processes write their profiles meanwhile, outside the measured part.
  if (toggleProfiles) await new Promise((r) => setTimeout(r, 1_000));
  loops.close();
  return { latencies, errors, wallMs, cpu: Object.fromEntries(Object.keys(after).map((name) => [name, after[name]! - before[name]!])) };
}

/** The walled uvicorn: the process under the app host whose command line runs uvicorn on a Unix socket. */
function walledUvicorn(hostPid: number): number | undefined {
  const parent = new Map<number, number>();
  for (const entry of readdirSync("/proc")) {
    const pid = Number(entry);
    if (!Number.isInteger(pid)) continue;
    try {
      parent.set(pid, Number(readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ")[1]));
    } catch {
      // gone meanwhile
    }
  }
  for (const pid of parent.keys()) {
    let cmdline: string;
    try {
      cmdline = readFileSync(`/proc/${pid}/cmdline`, "utf8");
    } catch {
      continue;
    }
    if (!cmdline.includes("uvicorn") || !cmdline.includes("--uds") || cmdline.startsWith("bwrap") || cmdline.includes("/bwrap")) continue;
    for (let at = parent.get(pid); at !== undefined && at > 1; at = parent.get(at)) if (at === hostPid) return pid;
  }
  return undefined;
}

const loadStart = loadavg()[0]!;
const profileEnv = cpuProfileEnv(profileDir);
const nats = await startNats();
const actors = await startActorHost(nats.url);
const secrets = { TRIBUTARY_SECRETS_KEY: "k1:" + Buffer.alloc(32, 3).toString("base64") };
const gateway = await startGateway(nats.url, { ...secrets, ...profileEnv });
const host = await startSandboxHost(nats.url, { ...secrets, ...profileEnv, TRIBUTARY_APP_PLATFORM_URL: gateway.url, TRIBUTARY_APP_SWITCH_DELAY_MS: "200", TRIBUTARY_APP_CPU_MHZ: "4000" });
const api = (path: string, init: RequestInit = {}) => fetch(gateway.url + path, { ...init, headers: { authorization: `Bearer ${TEST_KEY}`, "content-type": "application/json" } });
const direct = mkdtempSync(join(tmpdir(), "bench-direct-"));
writeFileSync(join(direct, "app.py"), JSON_APP);
const directPort = 20_000 + Math.floor(Math.random() * 20_000);
const uvicorn = spawn("/usr/bin/python3", ["-m", "uvicorn", "app:app", "--host", "127.0.0.1", "--port", String(directPort), "--no-access-log"], { cwd: direct, stdio: "ignore" });
try {
  // The JSON app, deployed.
  const dir = appDir(undefined, { "app.py": JSON_APP, "tributary.yaml": MANIFEST });
  const artifact = await uploadBundle(gateway.url, TEST_KEY, dir);
  const created = (await (await api("/v1/apps/deployments", { method: "POST", body: JSON.stringify({ artifact_id: artifact }) })).json()) as { id: string };
  await waitForDeployment(gateway.url, TEST_KEY, created.id, ["healthy"]);
  for (let i = 0; i < 50; i++) {
    const ok = await fetch(`http://127.0.0.1:${directPort}/`).then((r) => r.ok).catch(() => false);
    if (ok) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  const walled = walledUvicorn(host.child.pid!);
  if (walled === undefined) throw new Error("the deployed app's uvicorn was not found under the app host");

  // CPU of every process on the path (ms), the load generator (this process) included: it shares the machine.
  const pids: Record<string, number> = { gateway: gateway.child.pid!, "nats-server": nats.child.pid!, "app host": host.child.pid!, "uvicorn (walled, hosted)": walled, "uvicorn (direct)": uvicorn.pid! };
  const cpu = () => {
    const sample: Record<string, number> = Object.fromEntries(Object.entries(pids).map(([name, pid]) => [name, cpuMs(pid)]));
    const own = process.cpuUsage();
    sample["load generator"] = (own.user + own.system) / 1000;
    return sample;
  };
  const names = [...Object.keys(pids), "load generator"];
  // What each process spends with no request at all (heartbeats, watchers, timers), per second:
  // taken off the loaded figures, which then hold what the requests cost.
  const idleFrom = cpu();
  const idleStarted = performance.now();
  await new Promise((r) => setTimeout(r, 4_000));
  const idleTo = cpu();
  const idleSeconds = (performance.now() - idleStarted) / 1000;
  const background = Object.fromEntries(names.map((n) => [n, (idleTo[n]! - idleFrom[n]!) / idleSeconds]));
  const profileToggle = () => {
    process.kill(gateway.child.pid!, "SIGUSR2");
    process.kill(host.child.pid!, "SIGUSR2");
  };
  const STACK = ["gateway", "nats-server", "app host", "uvicorn (walled, hosted)"];

  const rows: Array<Array<string | number>> = [];
  const perRequest = new Map<number, { direct: Record<string, number>; hosted: Record<string, number> }>();
  for (const clients of CONCURRENCY) {
    const runs = { direct: { latencies: [] as number[], errors: 0, cpu: {} as Record<string, number>, rps: [] as number[] }, hosted: { latencies: [] as number[], errors: 0, cpu: {} as Record<string, number>, rps: [] as number[] } };
    // Alternating rounds (direct first in odd rounds, hosted first in even ones): a neighbour's
    // burst on this shared machine lands on both sides alike.
    for (let round = 0; round < rounds; round++) {
      const order = round % 2 === 0 ? (["direct", "hosted"] as const) : (["hosted", "direct"] as const);
      for (const mode of order) {
        const r = mode === "direct" ? await load(directPort, undefined, clients, cpu) : await load(gateway.port, ADDRESS, clients, cpu, profileDir ? profileToggle : undefined);
        const into = runs[mode];
        into.latencies.push(...r.latencies);
        into.errors += r.errors;
        into.rps.push(r.latencies.length / seconds);
        for (const name of names) into.cpu[name] = (into.cpu[name] ?? 0) + Math.max(0, r.cpu[name]! - (background[name]! * r.wallMs) / 1000);
      }
    }
    const d = runs.direct;
    const h = runs.hosted;
    const dRps = d.latencies.length / (seconds * rounds);
    const hRps = h.latencies.length / (seconds * rounds);
    const ratios = h.rps.map((x, i) => x / d.rps[i]!);
    perRequest.set(clients, {
      direct: Object.fromEntries(names.map((n) => [n, (d.cpu[n]! * 1000) / Math.max(1, d.latencies.length)])),
      hosted: Object.fromEntries(names.map((n) => [n, (h.cpu[n]! * 1000) / Math.max(1, h.latencies.length)])),
    });
    const [p50d, p50h] = [percentile(d.latencies, 50), percentile(h.latencies, 50)];
    rows.push([clients, fmt(dRps, 0), fmt(hRps, 0), `${fmt(hRps / dRps, 2)} (${fmt(Math.min(...ratios), 2)}–${fmt(Math.max(...ratios), 2)})`, fmt(p50d, 2), fmt(p50h, 2), fmt(p50h - p50d, 2), fmt(percentile(d.latencies, 99), 2), fmt(percentile(h.latencies, 99), 2), d.errors + h.errors]);
    process.stderr.write(`${clients} clients: direct ${fmt(dRps, 0)} req/s p50 ${fmt(p50d, 2)} ms; hosted ${fmt(hRps, 0)} req/s p50 ${fmt(p50h, 2)} ms\n`);
  }

  const cpuHeader = ["process", ...CONCURRENCY.flatMap((c) => [`${c} direct`, `${c} hosted`])];
  const sum = (rec: Record<string, number>, which: readonly string[]) => which.reduce((a, n) => a + rec[n]!, 0);
  const cpuRows: Array<Array<string | number>> = names.map((n) => [n, ...CONCURRENCY.flatMap((c) => [fmt(perRequest.get(c)!.direct[n]!, 0), fmt(perRequest.get(c)!.hosted[n]!, 0)])]);
  cpuRows.push(["all but the load generator", ...CONCURRENCY.flatMap((c) => [fmt(sum(perRequest.get(c)!.direct, names.slice(0, -1)), 0), fmt(sum(perRequest.get(c)!.hosted, names.slice(0, -1)), 0)])]);

  // The ceiling the CPU figures allow on this machine: each side's best throughput is bounded by
  // its busiest single process (one core each) and by all its processes together (every core).
  const cores = availableParallelism();
  const at = perRequest.get(CONCURRENCY.includes(16) ? 16 : CONCURRENCY[CONCURRENCY.length - 1]!)!;
  const bound = (rec: Record<string, number>, procs: readonly string[]) => Math.min(1e6 / Math.max(...procs.map((n) => rec[n]!)), (cores * 1e6) / sum(rec, procs));
  const directAlone = bound(at.direct, ["uvicorn (direct)"]);
  const hostedAlone = bound(at.hosted, STACK);
  const directWithClient = bound(at.direct, ["uvicorn (direct)", "load generator"]);
  const hostedWithClient = bound(at.hosted, [...STACK, "load generator"]);
  const ceiling = [
    `Ceiling on this ${cores}-core machine from the CPU per request at ${CONCURRENCY.includes(16) ? 16 : CONCURRENCY[CONCURRENCY.length - 1]} clients (each side bounded by its busiest process, one core, and by the sum of its processes over ${cores} cores):`,
    markdownTable(["load generator", "direct req/s bound", "hosted req/s bound", "best ratio"], [
      ["elsewhere (not counted)", fmt(directAlone, 0), fmt(hostedAlone, 0), fmt(hostedAlone / directAlone, 2)],
      ["on this machine (counted, as here)", fmt(directWithClient, 0), fmt(hostedWithClient, 0), fmt(hostedWithClient / directWithClient, 2)],
    ]),
  ];

  // Deploy to healthy: the example chat app with `tributary deploy`, a changed bundle each time.
  const times: number[] = [];
  if (deploys > 0) await api("/v1/secrets", { method: "POST", body: JSON.stringify({ name: "PLATFORM_API_KEY", value: TEST_KEY }) });
  for (let i = 0; i < deploys; i++) {
    const app = appDir(EXAMPLE_APP, { VERSION: `${i}\n` });
    const started = performance.now();
    const code = await new Promise<number>((resolve) =>
      execFile(process.execPath, [join(repoRoot, "dist", "cli", "main.js"), "deploy", app, "--url", gateway.url, "--key", TEST_KEY], (err) => resolve(err ? 1 : 0)),
    );
    if (code !== 0) throw new Error("tributary deploy failed");
    times.push(performance.now() - started);
  }

  if (!profileDir)
    writeResults("hosted-app.md", "Hosted apps: the relay's cost, and deploy to healthy", [
      machineLine(),
      `Load average (1 min): ${fmt(loadStart, 2)} at the start, ${fmt(loadavg()[0]!, 2)} at the end.`,
      `A plain ASGI app answering a 60-byte JSON body, deployed (cpu_mhz 2000: two cores' quota, no throttling here) and called through its hosted address (gateway -> NATS -> app host -> uvicorn on its Unix socket, behind bubblewrap), against the same app on the same uvicorn (Debian's 0.17.6) called directly over TCP. Keep-alive clients in the bench process; per point ${rounds} alternating rounds of ${seconds} s each side, each after a 1 s warm-up; \`node dist/bench/hosted-app.js --seconds ${seconds} --rounds ${rounds}\`.`,
      markdownTable(["clients", "direct req/s", "hosted req/s", "ratio (rounds' range)", "direct p50 ms", "hosted p50 ms", "p50 added ms", "direct p99 ms", "hosted p99 ms", "errors"], rows),
      "Targets: ratio >= 0.8, p50 added <= 1 ms.",
      `CPU per request (µs, from /proc over the recorded seconds, warm-up excluded, less each process's background measured idle for 4 s before the load: ${names.map((n) => `${n} ${fmt(background[n]!, 1)} ms/s`).join(", ")}; the load generator is this bench process):`,
      markdownTable(cpuHeader, cpuRows),
      ...ceiling,
      ...(deploys > 0 ? [markdownTable(["measure", "n", "p50 s", "max s"], [["`tributary deploy examples/chat-app` (a changed bundle) to healthy: pack, upload, unpack, uvicorn up", deploys, fmt(percentile(times, 50) / 1000, 2), fmt(Math.max(...times) / 1000, 2)]])] : []),
    ]);
  process.stdout.write([markdownTable(cpuHeader, cpuRows), ...ceiling].join("\n\n") + "\n");
} finally {
  uvicorn.kill();
  await host.kill();
  await gateway.kill();
  await actors.kill();
  await nats.stop();
}
