// tier: serial (apps must be healthy within 3 s, a memory hog)
import t from "tap";
import { startStack } from "../../harness/stack.js";
import { startSandboxHost, TEST_KEY } from "../../harness/processes.js";
import { appDir, hosted, uploadBundle, waitForDeployment } from "../../harness/apps.js";

// What a deployment refuses and how it fails: each manifest rule at deploy time, an instance lost
// mid-request (a clean 502, then a restart), an app beyond its memory (stopped, reported), an
// app that never answers (failed with its logs), a slow client, an instance at its bound of
// concurrent requests (one more is refused, another project's app is untouched). What a lost app
// host does to a deployment (nothing: it is placed again) is in app-healing.test.ts.
// An instance serves at most 4 requests at once here (the bound's edge is tested with 4 and 5).
const MAX_PER_INSTANCE = 4;
const stack = await startStack(t, { runners: 0 });
// Another project of the same organization (the local one), whose app shares the host.
const OTHER_PROJECT = "proj-cap-other";
const OTHER_KEY = (await stack.project(OTHER_PROJECT)).key;
const host = await startSandboxHost(stack.nats.url, {
  TRIBUTARY_APPS_MAX_CONCURRENT_PER_INSTANCE: String(MAX_PER_INSTANCE),
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
async function deploy(source: string, fields: Record<string, unknown> = {}, key = TEST_KEY) {
  const dir = appDir(undefined, { "app.py": source, "tributary.yaml": yaml({ ...MANIFEST, ...fields }) });
  const artifact = await uploadBundle(stack.gateway.url, key, dir);
  const res = await fetch(stack.gateway.url + "/v1/apps/deployments", { method: "POST", body: JSON.stringify({ artifact_id: artifact }), headers: { authorization: `Bearer ${key}`, "content-type": "application/json" } });
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

t.test("an instance serves its bound of requests at once; one more is a 503 with Retry-After, another project's app is untouched", async (t) => {
  // /hold answers its head, then waits for the gate; /gate answers its head, reads its request
  // body to the end (the test holds it open), then opens the gate: every request holds a slot
  // until the test says so, and each one's head shows it was admitted.
  const HOLD_APP = `
import asyncio
gate = None
async def app(scope, receive, send):
    global gate
    if scope["type"] != "http":
        return
    if gate is None:
        gate = asyncio.Event()
    path = scope["path"]
    if path in ("/hold", "/gate"):
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"admitted\\n", "more_body": True})
        if path == "/gate":
            more = True
            while more:
                more = (await receive()).get("more_body", False)
            gate.set()
        else:
            await gate.wait()
        return await send({"type": "http.response.body", "body": b"released"})
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})
`;
  const mine = await deploy(HOLD_APP);
  t.equal(mine.status, 201, JSON.stringify(mine.body));
  const theirs = await deploy(HOLD_APP, { project: OTHER_PROJECT, project_slug: OTHER_PROJECT }, OTHER_KEY);
  t.equal(theirs.status, 201, JSON.stringify(theirs.body));
  t.match(await waitForDeployment(stack.gateway.url, TEST_KEY, mine.body.id, ["healthy", "failed"]), { status: "healthy" });
  t.match(await waitForDeployment(stack.gateway.url, OTHER_KEY, theirs.body.id, ["healthy", "failed"]), { status: "healthy" });
  const OTHER_ADDRESS = `${OTHER_PROJECT}.local.apps.localhost`;

  const { request } = await import("node:http");
  /** A request whose head has arrived: its status, and its whole body once it ends. */
  const open = (path: string, method = "GET") =>
    new Promise<{ status: number; rest: Promise<string>; req: import("node:http").ClientRequest }>((resolve, reject) => {
      const headers: Record<string, string> = { host: ADDRESS, authorization: `Bearer ${TEST_KEY}` };
      if (method === "POST") headers["transfer-encoding"] = "chunked";
      const req = request({ host: "127.0.0.1", port: stack.gateway.port, path, method, headers, agent: false }, (res) => {
        let text = "";
        const rest = new Promise<string>((done, fail) => res.setEncoding("utf8").on("data", (c: string) => (text += c)).on("end", () => done(text)).on("error", fail));
        resolve({ status: res.statusCode!, rest, req });
      });
      req.on("error", reject);
      if (method === "POST") req.write("x");
      else req.end();
    });
  // At the bound: three held requests and the gate, each admitted (its head came back).
  const held = await Promise.all([open("/hold"), open("/hold"), open("/hold"), open("/gate", "POST")]);
  t.same(held.map((h) => h.status), Array(MAX_PER_INSTANCE).fill(200), `${MAX_PER_INSTANCE} requests at once are admitted`);

  // One past it: refused at once, in OpenAI's error shape, with when to retry.
  const refused = await hosted(stack.gateway.port, ADDRESS, "/", { key: TEST_KEY });
  t.equal(refused.status, 503, refused.body);
  t.equal(refused.headers["retry-after"], "1");
  t.match(JSON.parse(refused.body), { error: { type: "server_error", code: "app_overloaded", message: /overloaded.*\(4\)/ } });

  // Another project's app on the same host answers meanwhile.
  const other = await hosted(stack.gateway.port, OTHER_ADDRESS, "/", { key: OTHER_KEY });
  t.same({ status: other.status, body: other.body }, { status: 200, body: "ok" }, "another project's app is untouched");

  // The gate's body ends: the app opens the gate, every held request completes, and new ones are served.
  held[3]!.req.end();
  t.same(await Promise.all(held.map((h) => h.rest)), Array(MAX_PER_INSTANCE).fill("admitted\nreleased"), "the held requests complete");
  const after = await hosted(stack.gateway.port, ADDRESS, "/", { key: TEST_KEY });
  t.same({ status: after.status, body: after.body }, { status: 200, body: "ok" }, "served again once the slots are free");
  await fetch(`${stack.gateway.url}/v1/apps/deployments/${theirs.body.id}/stop`, { method: "POST", headers: { authorization: `Bearer ${OTHER_KEY}` } });
});
