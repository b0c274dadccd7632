import t from "tap";
import { startStack } from "../../harness/stack.js";
import { startSandboxHost, TEST_KEY } from "../../harness/processes.js";
import { appDir, hosted, uploadBundle, waitForDeployment } from "../../harness/apps.js";

// What a deployment refuses and how it fails: each manifest rule at deploy time, an instance lost
// mid-request (a clean 502, then a restart), an app beyond its memory (stopped, reported), an
// app that never answers (failed with its logs), a slow client, and last a lost app host.
// A lost app host is noticed within 1.5 s (gateways, and the actor host's sweeper every 0.5 s).
const stack = await startStack(t, { runners: 0, env: { TRIBUTARY_APP_HOST_TIMEOUT_MS: "1500", TRIBUTARY_SANDBOX_SWEEP_MS: "500" } });
const host = await startSandboxHost(stack.nats.url, {
  TRIBUTARY_APP_PLATFORM_URL: stack.gateway.url,
  TRIBUTARY_APP_MEMORY_MB: "1024",
  TRIBUTARY_APP_CPU_MHZ: "2000",
  TRIBUTARY_APP_HEALTH_TIMEOUT_MS: "3000",
  TRIBUTARY_APP_SWITCH_DELAY_MS: "100",
});
t.teardown(() => host.kill());
const ADDRESS = "default-project.local.apps.localhost";
const api = (path: string, init: RequestInit = {}) => fetch(stack.gateway.url + path, { ...init, headers: { authorization: `Bearer ${TEST_KEY}`, "content-type": "application/json" } });

const MANIFEST = { entrypoint: "app:app", organization_slug: "local", project: "Default project", project_slug: "default-project", cpu_mhz: 500, gpu_count: 0, memory_size_mb: 96 };
const yaml = (fields: Record<string, unknown>) => Object.entries(fields).map(([k, v]) => `${k}: ${JSON.stringify(v)}`).join("\n") + "\n";
const APP = `
import os
hog = []
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    if scope["path"] == "/die":
        os._exit(1)
    if scope["path"] == "/hog":
        for _ in range(32):
            hog.append(bytearray(16 * 1024 * 1024))
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"ok"})
`;
async function deploy(source: string, fields: Record<string, unknown> = {}) {
  const dir = appDir(undefined, { "app.py": source, "tributary.yaml": yaml({ ...MANIFEST, ...fields }) });
  const artifact = await uploadBundle(stack.gateway.url, TEST_KEY, dir);
  const res = await api("/v1/apps/deployments", { method: "POST", body: JSON.stringify({ artifact_id: artifact }) });
  return { status: res.status, body: (await res.json()) as any };
}

t.test("each manifest rule is refused at deploy time, naming its field", async (t) => {
  const cases: Array<[Record<string, unknown>, string, string]> = [
    [{ entrypoint: "app" }, "manifest.entrypoint", "invalid_entrypoint"],
    [{ project_slug: "Default_Project" }, "manifest.project_slug", "invalid_slug"],
    [{ project_slug: "someone-else" }, "manifest.project_slug", "slug_mismatch"],
    [{ organization_slug: "acme" }, "manifest.organization_slug", "slug_mismatch"],
    [{ gpu_count: 1 }, "manifest.gpu_count", "resources_unavailable"],
    [{ memory_size_mb: 1025 }, "manifest.memory_size_mb", "resources_unavailable"],
    [{ cpu_mhz: 2001 }, "manifest.cpu_mhz", "resources_unavailable"],
    [{ runtime: "node" }, "manifest.runtime", "unsupported_runtime"],
    [{ replicas: 2 }, "manifest.replicas", "unknown_parameter"],
  ];
  for (const [fields, param, code] of cases) {
    const { status, body } = await deploy(APP, fields);
    t.equal(status, 400, `${JSON.stringify(fields)}: ${JSON.stringify(body)}`);
    t.match(body, { error: { param, code } }, param);
  }
  const ok = await deploy(APP, { memory_size_mb: 1024, cpu_mhz: 2000 });
  t.equal(ok.status, 201, "at the host's offer");
  await api(`/v1/apps/deployments/${ok.body.id}/stop`, { method: "POST" });
});

t.test("an instance lost mid-request is a clean 502, and it restarts", async (t) => {
  const { status, body } = await deploy(APP);
  t.equal(status, 201, JSON.stringify(body));
  t.equal((await waitForDeployment(stack.gateway.url, TEST_KEY, body.id, ["healthy", "failed"])).status, "healthy");
  const lost = await hosted(stack.gateway.port, ADDRESS, "/die", { key: TEST_KEY });
  t.equal(lost.status, 502, lost.body);
  t.match(JSON.parse(lost.body), { error: { type: "server_error" } });
  let back = 0;
  for (let i = 0; i < 50 && back !== 200; i++) {
    back = (await hosted(stack.gateway.port, ADDRESS, "/", { key: TEST_KEY })).status;
    if (back !== 200) await new Promise((r) => setTimeout(r, 100));
  }
  t.equal(back, 200, "served again after the restart");
  t.match(await (await api(`/v1/apps/deployments/${body.id}`)).json(), { status: "healthy", restarts: 1 });
});

t.test("an app beyond its memory is stopped and reported", async (t) => {
  const { body } = await deploy(APP, { memory_size_mb: 64 });
  t.equal((await waitForDeployment(stack.gateway.url, TEST_KEY, body.id, ["healthy", "failed"])).status, "healthy");
  const res = await hosted(stack.gateway.port, ADDRESS, "/hog", { key: TEST_KEY });
  t.equal(res.status, 502, "the request it was serving");
  const failed = await waitForDeployment(stack.gateway.url, TEST_KEY, body.id, ["failed"]);
  t.match(failed, { status: "failed", reason: "memory_exceeded", message: /exceeded its memory limit \(64 MB\)/ });
});

t.test("an app that never answers fails with its logs", async (t) => {
  const { body } = await deploy("import time\nprint('warming up forever', flush=True)\ntime.sleep(3600)\n");
  const failed = await waitForDeployment(stack.gateway.url, TEST_KEY, body.id, ["failed", "healthy"]);
  t.match(failed, { status: "failed", reason: "health_check_timeout" });
  t.ok(failed.last_logs.some((l: string) => l.includes("warming up forever")), JSON.stringify(failed.last_logs));
  const logs = (await (await api(`/v1/apps/deployments/${body.id}/logs`)).json()) as any;
  t.ok(logs.data.some((l: any) => l.line.includes("warming up forever")), "the logs route gives them too");
});

t.test("a slow client slows the app: nothing on the way buffers the whole response", async (t) => {
  const STREAM_APP = `
sent = 0
CHUNK = b"x" * 65536
async def app(scope, receive, send):
    global sent
    if scope["type"] != "http":
        return
    if scope["path"] == "/len":
        size, more = 0, True
        while more:
            message = await receive()
            size += len(message.get("body", b""))
            more = message.get("more_body", False)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        return await send({"type": "http.response.body", "body": str(size).encode()})
    if scope["path"] != "/stream":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        return await send({"type": "http.response.body", "body": str(sent).encode()})
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/octet-stream")]})
    for _ in range(1024):
        await send({"type": "http.response.body", "body": CHUNK, "more_body": True})
        sent += len(CHUNK)
    await send({"type": "http.response.body", "body": b""})
`;
  const { body } = await deploy(STREAM_APP, { memory_size_mb: 128 });
  t.equal((await waitForDeployment(stack.gateway.url, TEST_KEY, body.id, ["healthy", "failed"])).status, "healthy");
  const TOTAL = 1024 * 65536;
  const { request } = await import("node:http");
  let received = 0;
  const res = await new Promise<import("node:http").IncomingMessage>((resolve, reject) => {
    const req = request({ host: "127.0.0.1", port: stack.gateway.port, path: "/stream", headers: { host: ADDRESS, authorization: `Bearer ${TEST_KEY}` } }, resolve);
    req.on("error", reject).end();
  });
  t.equal(res.statusCode, 200);
  res.pause();
  // The client reads nothing for a while: the app must be held back, not the stack filled.
  await new Promise((r) => setTimeout(r, 1_500));
  const sentWhilePaused = Number((await hosted(stack.gateway.port, ADDRESS, "/sent", { key: TEST_KEY })).body);
  t.ok(sentWhilePaused < 24 * 1024 * 1024, `the app sent ${(sentWhilePaused / 1024 / 1024).toFixed(1)} MiB of 64 while the client read nothing`);
  res.on("data", (c: Buffer) => (received += c.length));
  res.resume();
  await new Promise((r) => res.on("end", r));
  t.equal(received, TOTAL, "all of it arrives once the client reads");

  // A request body streams in the other way, within the host's credit.
  const upload = await new Promise<{ status: number; body: string }>((resolve, reject) => {
    const req = request({ host: "127.0.0.1", port: stack.gateway.port, path: "/len", method: "POST", headers: { host: ADDRESS, authorization: `Bearer ${TEST_KEY}`, "transfer-encoding": "chunked" } }, (res) => {
      let text = "";
      res.setEncoding("utf8").on("data", (c: string) => (text += c)).on("end", () => resolve({ status: res.statusCode!, body: text }));
    });
    req.on("error", reject);
    void (async () => {
      for (let i = 0; i < 128; i++) if (!req.write(Buffer.alloc(65536, i))) await new Promise((r) => req.once("drain", r));
      req.end();
    })();
  });
  t.same(upload, { status: 200, body: String(128 * 65536) }, "8 MiB sent chunked arrive whole");
});

t.test("a lost app host fails its deployments and frees their address", async (t) => {
  const { body } = await deploy(APP);
  t.equal((await waitForDeployment(stack.gateway.url, TEST_KEY, body.id, ["healthy", "failed"])).status, "healthy");
  await host.kill();
  const failed = await waitForDeployment(stack.gateway.url, TEST_KEY, body.id, ["failed"], 15_000);
  t.match(failed, { status: "failed", reason: "host_lost" });
  t.equal((await hosted(stack.gateway.port, ADDRESS, "/", { key: TEST_KEY })).status, 404, "the address routes nowhere");
});
