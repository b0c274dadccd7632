// Hosted apps that heal: how long a deployed app is out after kill -9 of its app host, with one
// app host (a new one started at once, as `tributary start` or Kubernetes restarts a process) and
// with two (min_instances: 2, one instance on each); and the cold start of a scale-to-zero
// app's first request. Default settings (app host heartbeats every 1 s, lost after 5 s of
// silence; the reconciler's round 1 s), but scaling down waits 2 s so the cold starts come quickly.
//
//   node dist/bench/app-healing.js [--trials 10] [--cold 10]
import { loadavg } from "node:os";
import { appDir, hosted, localManifest, OK_APP, uploadBundle, waitForDeployment } from "../test/harness/apps.js";
import { startSandboxHost, type SandboxHost } from "../test/harness/processes.js";
import { markdownTable, machineLine, writeResults } from "./lib/table.js";
import { startActorHost, startGateway, startNats, TEST_KEY } from "./lib/processes.js";
import { fmt, percentile } from "./lib/stats.js";

const args = process.argv.slice(2);
const arg = (name: string, fallback: number) => {
  const at = args.indexOf(`--${name}`);
  return at >= 0 ? Number(args[at + 1]) : fallback;
};
const trials = arg("trials", 10);
const coldTrials = arg("cold", 10);

const ADDRESS = "default-project.local.apps.localhost";
/** Probe loops: sequential GETs, this many at once. */
const LOOPS = 4;

const loadStart = loadavg()[0]!;
const nats = await startNats();
const actors = await startActorHost(nats.url, { TRIBUTARY_APP_SCALE_DOWN_DELAY_MS: "2000" });
const gateway = await startGateway(nats.url);
const hostEnv = { TRIBUTARY_APP_PLATFORM_URL: gateway.url, TRIBUTARY_SANDBOX_HEARTBEAT_MS: "1000", TRIBUTARY_APP_MEMORY_MB: "2048", TRIBUTARY_APP_CPU_MHZ: "4000", TRIBUTARY_SANDBOX_EGRESS: "off" };
const hosts: SandboxHost[] = [];
const api = async (path: string, init: RequestInit = {}) => (await fetch(gateway.url + path, { ...init, headers: { authorization: `Bearer ${TEST_KEY}`, "content-type": "application/json" } })).json() as Promise<any>;
const appHostOf = (host: SandboxHost) => `ah${host.hostId.slice(2)}`;

let version = 0;
/** A new deployment of the app (a changed bundle each time), healthy; its id. */
async function deploy(scaling: string): Promise<string> {
  const artifact = await uploadBundle(gateway.url, TEST_KEY, appDir(undefined, { "app.py": OK_APP, "tributary.yaml": localManifest(500, scaling), VERSION: `${++version}\n` }));
  const created = await api("/v1/apps/deployments", { method: "POST", body: JSON.stringify({ artifact_id: artifact }) });
  await waitForDeployment(gateway.url, TEST_KEY, created.id, ["healthy"], 60_000);
  return created.id;
}

async function until(id: string, done: (d: any) => boolean, timeoutMs = 120_000): Promise<number> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    if (done(await api(`/v1/apps/deployments/${id}`))) return performance.now();
    if (performance.now() > deadline) throw new Error(`deployment ${id} did not get there in time`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
const healthy = (d: any) => d.instances.filter((i: any) => i.status === "healthy");

interface Trial {
  /** Kill -9 → the first 200 to a request sent after the kill. */
  answering: number;
  /** The slowest request that was in flight at the kill or sent after it, until recovery. */
  slowest: number;
  failed: number;
  /** What the failed requests got. */
  failures: string[];
  requests: number;
  /** Kill → the record shows the desired count of healthy instances again. */
  desired: number;
  /** Kill → the replacement app host ready (its process started at the kill). */
  hostReady: number;
}

/** Kills `victim` under LOOPS request loops, starts a replacement host at once, and times the recovery of deployment `id`. */
async function killTrial(id: string, victim: SandboxHost, wanted: number): Promise<Trial> {
  const samples: Array<{ sent: number; done: number; status: number; body: string }> = [];
  let stop = false;
  const loops = Array.from({ length: LOOPS }, async () => {
    while (!stop) {
      const sent = performance.now();
      const res = await hosted(gateway.port, ADDRESS, "/", { key: TEST_KEY }).catch((err: Error) => ({ status: 0, body: err.message }));
      samples.push({ sent, done: performance.now(), status: res.status, body: res.body });
    }
  });
  await new Promise((r) => setTimeout(r, 500));
  const killedAt = performance.now();
  await victim.kill();
  const replacement = startSandboxHost(nats.url, hostEnv).then((h) => ({ h, readyAt: performance.now() }));
  const backAt = await until(id, (d) => healthy(d).length >= wanted && d.instances.every((i: any) => i.host !== appHostOf(victim)));
  let firstAnswer: number | undefined;
  while ((firstAnswer = samples.find((s) => s.sent > killedAt && s.status === 200)?.done) === undefined) await new Promise((r) => setTimeout(r, 50));
  const { h, readyAt } = await replacement;
  hosts.splice(hosts.indexOf(victim), 1, h);
  await new Promise((r) => setTimeout(r, 500));
  stop = true;
  await Promise.all(loops);
  const around = samples.filter((s) => s.done > killedAt);
  return {
    answering: firstAnswer - killedAt,
    slowest: Math.max(...around.map((s) => s.done - s.sent)),
    failed: around.filter((s) => s.status !== 200).length,
    failures: around.filter((s) => s.status !== 200).map((s) => `${s.status} ${s.body.slice(0, 200)} (sent ${Math.round(s.sent - killedAt)} ms after the kill, ${Math.round(s.done - s.sent)} ms)`),
    requests: around.length,
    desired: backAt - killedAt,
    hostReady: readyAt - killedAt,
  };
}

const s = (ms: number) => fmt(ms / 1000, 2);
function rows(label: string, results: Trial[]): Array<Array<string | number>> {
  const row = (what: string, values: number[]) => [label, what, s(percentile(values, 50)), s(Math.max(...values))];
  return [
    row("kill -9 → answering again (a request sent after the kill answered)", results.map((r) => r.answering)),
    row("slowest request across the kill", results.map((r) => r.slowest)),
    row("kill -9 → desired instances healthy again", results.map((r) => r.desired)),
    row("kill -9 → the replacement app host ready", results.map((r) => r.hostReady)),
  ];
}

try {
  hosts.push(await startSandboxHost(nats.url, hostEnv));

  // One app host: its replacement (a new process, a new host id) takes the instance back.
  const one: Trial[] = [];
  const single = await deploy("");
  for (let i = 0; i < trials; i++) {
    one.push(await killTrial(single, hosts[0]!, 1));
    process.stderr.write(`one host, trial ${i + 1}: ${JSON.stringify(one.at(-1))}\n`);
  }

  // Two app hosts, min_instances 2: a fresh deployment per trial puts one instance on each.
  hosts.push(await startSandboxHost(nats.url, hostEnv));
  const two: Trial[] = [];
  for (let i = 0; i < trials; i++) {
    const id = await deploy("min_instances: 2\n");
    await until(id, (d) => new Set(healthy(d).map((x: any) => x.host)).size === 2);
    two.push(await killTrial(id, hosts[i % 2]!, 2));
    process.stderr.write(`two hosts, trial ${i + 1}: ${JSON.stringify(two.at(-1))}\n`);
  }

  // Scale from zero: min_instances 0, idle until scaled to zero, then one request.
  const cold: number[] = [];
  const warm: number[] = [];
  const zero = await deploy("min_instances: 0\n");
  for (let i = 0; i < coldTrials; i++) {
    await until(zero, (d) => d.desired_instances === 0 && d.instances.length === 0);
    // Its last instance drains and stops (heartbeats say so within a second).
    await new Promise((r) => setTimeout(r, 2_500));
    const started = performance.now();
    const res = await hosted(gateway.port, ADDRESS, "/", { key: TEST_KEY });
    if (res.status !== 200) throw new Error(`cold request: ${res.status} ${res.body}`);
    cold.push(performance.now() - started);
    const again = performance.now();
    await hosted(gateway.port, ADDRESS, "/", { key: TEST_KEY });
    warm.push(performance.now() - again);
  }

  for (const r of gateway.logs.filter((r) => String(r.msg).startsWith("DEBUG") || r.level === "warn" || r.level === "error")) process.stderr.write(`GW ${JSON.stringify(r)}\n`);
  const failed = [...one, ...two].reduce((n, r) => n + r.failed, 0);
  const requests = [...one, ...two].reduce((n, r) => n + r.requests, 0);
  writeResults("app-healing.md", "Hosted apps: kill -9 of an app host, and scale from zero", [
    machineLine(),
    `Load average (1 min): ${fmt(loadStart, 2)} at the start, ${fmt(loadavg()[0]!, 2)} at the end.`,
    `A small ASGI app (cpu_mhz 500, 96 MB) under ${LOOPS} loops of sequential GETs through its hosted address. Each trial kills -9 an app host running an instance and at once starts a new app host process (a new host id), as a supervisor restarts a process. Default timings: app hosts beat every 1 s and are lost after 5 s of silence (TRIBUTARY_APP_HOST_TIMEOUT_MS); the reconciler's round is 1 s. With one host, the deployment's instance is placed again once the old host is judged lost and the new one is heard; with two (min_instances 2, a fresh deployment per trial so each host runs one instance), the other instance serves meanwhile and the lost one is placed again. ${trials} trials each; \`node dist/bench/app-healing.js --trials ${trials} --cold ${coldTrials}\`.`,
    markdownTable(["app hosts", "measure", "p50 s", "max s"], [...rows("1", one), ...rows("2", two)]),
    `Failed requests across all kills: ${failed} of ${requests} (one host: ${one.reduce((n, r) => n + r.failed, 0)}; two hosts: ${two.reduce((n, r) => n + r.failed, 0)})${failed > 0 ? `: ${[...one, ...two].flatMap((r) => r.failures).join("; ")}` : ""}. Requests are held while no instance serves (up to TRIBUTARY_APPS_COLD_START_TIMEOUT_MS, 60 s), and a GET caught on the lost host is sent again to another instance once its host is judged lost.`,
    `Scale from zero (min_instances 0; scaling down waits 2 s here): the first request to an app with no instance, from the gateway holding it to its answer (demand, placement, bundle fetched and unpacked behind the walls, uvicorn up, the host's heartbeat), ${coldTrials} trials, against the next request, warm:`,
    markdownTable(["request", "n", "p50 s", "max s"], [
      ["cold: the first, no instance running", coldTrials, s(percentile(cold, 50)), s(Math.max(...cold))],
      ["warm: the one after it", coldTrials, fmt(percentile(warm, 50) / 1000, 4), fmt(Math.max(...warm) / 1000, 4)],
    ]),
    `\`node dist/bench/app-healing.js --trials ${trials} --cold ${coldTrials}\``,
  ]);
} finally {
  for (const h of hosts) await h.kill();
  await gateway.kill();
  await actors.kill();
  await nats.stop();
}
