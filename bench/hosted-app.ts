// A hosted app's small JSON route through gateway -> NATS -> app host -> uvicorn (walled in,
// on its Unix socket), against the same app on Debian's uvicorn called directly (TCP, no
// walls), at 1, 16 and 64 concurrent keep-alive clients; and the time from `tributary deploy`
// to healthy for the example chat app.
//
//   node dist/bench/hosted-app.js [--seconds 5] [--deploys 5]
import { execFile, spawn } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { Agent, request } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { appDir, EXAMPLE_APP, uploadBundle, waitForDeployment } from "../test/harness/apps.js";
import { startSandboxHost } from "../test/harness/processes.js";
import { markdownTable, machineLine, writeResults } from "./lib/table.js";
import { cpuMs, repoRoot, startActorHost, startGateway, startNats, TEST_KEY } from "./lib/processes.js";
import { fmt, percentile } from "./lib/stats.js";

const args = process.argv.slice(2);
const arg = (name: string, fallback: number) => {
  const at = args.indexOf(`--${name}`);
  return at >= 0 ? Number(args[at + 1]) : fallback;
};
const seconds = arg("seconds", 5);
const deploys = arg("deploys", 5);
const CONCURRENCY = [1, 16, 64];
const ADDRESS = "default-project.local.apps.localhost";

const JSON_APP = `
import json
BODY = json.dumps({"ok": True, "items": list(range(8))}).encode()
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(BODY)).encode())]})
    await send({"type": "http.response.body", "body": BODY})
`;
const MANIFEST = "entrypoint: app:app\norganization_slug: local\nproject: Default project\nproject_slug: default-project\ncpu_mhz: 2000\ngpu_count: 0\nmemory_size_mb: 256\n";

interface Load {
  rps: number;
  p50: number;
  p99: number;
  errors: number;
}

/** `clients` keep-alive loops of GET / for `seconds` (after a 1 s warm-up); latencies in ms. */
async function load(port: number, host: string | undefined, clients: number): Promise<Load> {
  const agent = new Agent({ keepAlive: true, maxSockets: clients });
  const headers: Record<string, string> = { authorization: `Bearer ${TEST_KEY}` };
  if (host) headers.host = host;
  const once = () =>
    new Promise<number>((resolve) => {
      const started = performance.now();
      const req = request({ host: "127.0.0.1", port, path: "/", agent, headers }, (res) => {
        res.resume();
        res.on("end", () => resolve(res.statusCode === 200 ? performance.now() - started : -1));
      });
      req.on("error", () => resolve(-1));
      req.end();
    });
  const run = async (ms: number, record: boolean) => {
    const latencies: number[] = [];
    let errors = 0;
    const until = performance.now() + ms;
    await Promise.all(
      Array.from({ length: clients }, async () => {
        while (performance.now() < until) {
          const l = await once();
          if (!record) continue;
          if (l < 0) errors++;
          else latencies.push(l);
        }
      }),
    );
    return { latencies, errors };
  };
  await run(1_000, false);
  const { latencies, errors } = await run(seconds * 1_000, true);
  agent.destroy();
  return { rps: latencies.length / seconds, p50: percentile(latencies, 50), p99: percentile(latencies, 99), errors };
}

const nats = await startNats();
const actors = await startActorHost(nats.url);
const secrets = { TRIBUTARY_SECRETS_KEY: "k1:" + Buffer.alloc(32, 3).toString("base64") };
const gateway = await startGateway(nats.url, secrets);
const host = await startSandboxHost(nats.url, { ...secrets, TRIBUTARY_APP_PLATFORM_URL: gateway.url, TRIBUTARY_APP_SWITCH_DELAY_MS: "200", TRIBUTARY_APP_CPU_MHZ: "4000" });
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

  const rows: Array<Array<string | number>> = [];
  const cpuRows: Array<Array<string | number>> = [];
  const pids = { gateway: gateway.child.pid!, "nats-server": nats.child.pid!, "app host (sandbox host)": host.child.pid!, "uvicorn (direct)": uvicorn.pid! };
  const cpu = () => Object.fromEntries(Object.entries(pids).map(([name, pid]) => [name, cpuMs(pid)]));
  for (const clients of CONCURRENCY) {
    const before = cpu();
    const d = await load(directPort, undefined, clients);
    const between = cpu();
    const h = await load(gateway.port, ADDRESS, clients);
    const after = cpu();
    if (clients === 16)
      for (const name of Object.keys(pids))
        cpuRows.push([name, fmt(((between[name]! - before[name]!) * 1000) / (d.rps * (seconds + 1)), 0), fmt(((after[name]! - between[name]!) * 1000) / (h.rps * (seconds + 1)), 0)]);
    rows.push([clients, fmt(d.rps, 0), fmt(h.rps, 0), fmt(h.rps / d.rps, 2), fmt(d.p50, 2), fmt(h.p50, 2), fmt(h.p50 - d.p50, 2), fmt(d.p99, 2), fmt(h.p99, 2), d.errors + h.errors]);
    process.stderr.write(`${clients} clients: direct ${fmt(d.rps, 0)} req/s p50 ${fmt(d.p50, 2)} ms; hosted ${fmt(h.rps, 0)} req/s p50 ${fmt(h.p50, 2)} ms\n`);
  }

  // Deploy to healthy: the example chat app with `tributary deploy`, a changed bundle each time.
  await api("/v1/secrets", { method: "POST", body: JSON.stringify({ name: "PLATFORM_API_KEY", value: TEST_KEY }) });
  const times: number[] = [];
  for (let i = 0; i < deploys; i++) {
    const app = appDir(EXAMPLE_APP, { VERSION: `${i}\n` });
    const started = performance.now();
    const code = await new Promise<number>((resolve) =>
      execFile(process.execPath, [join(repoRoot, "dist", "cli", "main.js"), "deploy", app, "--url", gateway.url, "--key", TEST_KEY], (err) => resolve(err ? 1 : 0)),
    );
    if (code !== 0) throw new Error("tributary deploy failed");
    times.push(performance.now() - started);
  }

  writeResults("hosted-app.md", "Hosted apps: the relay's cost, and deploy to healthy", [
    machineLine(),
    `A plain ASGI app answering a 60-byte JSON body, deployed (cpu_mhz 2000: two cores' quota, no throttling here) and called through its hosted address (gateway -> NATS -> app host -> uvicorn on its Unix socket, behind bubblewrap), against the same app on the same uvicorn (Debian's 0.17.6) called directly over TCP. Keep-alive clients in the bench process, ${seconds} s per point after a 1 s warm-up; \`node dist/bench/hosted-app.js --seconds ${seconds}\`.`,
    markdownTable(["clients", "direct req/s", "hosted req/s", "ratio", "direct p50 ms", "hosted p50 ms", "p50 added ms", "direct p99 ms", "hosted p99 ms", "errors"], rows),
    "Targets: ratio >= 0.8, p50 added <= 1 ms.",
    "CPU per request at 16 clients (µs, warm-up included; the walled uvicorn's own CPU is not sampled, it matches the direct one's):",
    markdownTable(["process", "direct run", "hosted run"], cpuRows),
    markdownTable(["measure", "n", "p50 s", "max s"], [["`tributary deploy examples/chat-app` (a changed bundle) to healthy: pack, upload, unpack, uvicorn up", deploys, fmt(percentile(times, 50) / 1000, 2), fmt(Math.max(...times) / 1000, 2)]]),
  ]);
} finally {
  uvicorn.kill();
  await host.kill();
  await gateway.kill();
  await actors.kill();
  await nats.stop();
}
