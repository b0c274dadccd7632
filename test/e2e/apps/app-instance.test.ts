import t from "tap";
import { mkdirSync, mkdtempSync, rmdirSync, rmSync, writeFileSync } from "node:fs";
import { createServer, request } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { AppReplica, type AppManifest, type InstanceHostOptions, type ReplicaPolicy } from "../../../modules/apps/mod.js";
import { detectCgroups, probeIsolation } from "../../../modules/sandboxes/mod.js";

// App instances behind the sandbox's walls with real bubblewrap and Debian's uvicorn: served on
// a Unix socket, no network but the platform socket, the manifest's env, restarts after a crash,
// and the failures a deployment reports (memory limit, crash loop, never healthy) with logs.

const isolation = { bwrap: "bwrap", python: "/usr/bin/python3", perSandboxUid: false };
probeIsolation(isolation, undefined);
const cgroups = detectCgroups(`tributary-apps-test-${process.pid}`);
const root = mkdtempSync(join(tmpdir(), "apps-test-"));
t.teardown(() => {
  rmSync(root, { recursive: true, force: true });
  // The test's parent cgroups (the instances' own groups are removed as they end).
  const dirs = cgroups.version === 1 ? ["memory", "cpu", "pids"].map((c) => join(cgroups.root, c, cgroups.parent)) : cgroups.version === 2 ? [cgroups.parent] : [];
  for (const dir of dirs)
    try {
      rmdirSync(dir);
    } catch {
      // still busy or already gone
    }
});

// The "gateway" the platform socket forwards to.
const gateway = createServer((req, res) => res.end(JSON.stringify({ via: "gateway", path: req.url, auth: req.headers.authorization ?? null })));
await new Promise<void>((r) => gateway.listen(0, "127.0.0.1", r));
const gatewayPort = (gateway.address() as { port: number }).port;
t.teardown(() => gateway.close());

const options: InstanceHostOptions = { isolation, cgroups, coreMhz: 1000, runRoot: join(root, "run"), platform: { host: "127.0.0.1", port: gatewayPort } };
const policy: ReplicaPolicy = { healthTimeoutMs: 10_000, maxRestarts: 2, crashWindowMs: 60_000, backoffMs: 100, maxBackoffMs: 400 };
const manifest = (over: Partial<AppManifest> = {}): AppManifest => ({
  entrypoint: "app.main:app", organizationSlug: "acme", project: "Chat", projectSlug: "chat", cpuMhz: 500, gpuCount: 0, memorySizeMb: 128, env: { GREETING: "hi" }, secrets: [], runtime: "python", minInstances: 1, maxInstances: 1, targetInflight: 10, ...over,
});

let bundles = 0;
function bundle(source: string): string {
  const dir = join(root, `bundle-${++bundles}`);
  mkdirSync(join(dir, "app"), { recursive: true });
  writeFileSync(join(dir, "app", "__init__.py"), "");
  writeFileSync(join(dir, "app", "main.py"), source);
  return dir;
}

function get(socketPath: string, path: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ socketPath, path }, (res) => {
      let body = "";
      res.setEncoding("utf8").on("data", (c) => (body += c)).on("end", () => resolve({ status: res.statusCode!, body }));
    });
    req.on("error", reject).end();
  });
}

const APP = `
import json, os, socket, http.client

class PlatformConnection(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(os.environ["TRIBUTARY_PLATFORM_SOCKET"])

async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    path = scope["path"]
    if path == "/env":
        body = {k: v for k, v in os.environ.items() if k.startswith("TRIBUTARY_") or k == "GREETING"}
    elif path == "/platform":
        conn = PlatformConnection("platform")
        conn.request("GET", "/v1/models", headers={"Authorization": "Bearer k"})
        body = json.loads(conn.getresponse().read())
    elif path == "/network":
        s = socket.socket()
        s.settimeout(1)
        try:
            s.connect(("127.0.0.1", ${gatewayPort}))
            body = "connected"
        except OSError:
            body = "refused"
    elif path == "/write":
        try:
            open("/app/x", "w")
            body = "wrote"
        except OSError:
            body = "read-only"
    elif path == "/crash":
        os._exit(3)
    else:
        body = "ok"
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": json.dumps(body).encode()})
`;

t.test("an instance serves on its socket, sees its env and reaches only the platform", async (t) => {
  const replica = new AppReplica(options, { bundleDir: bundle(APP), manifest: manifest(), env: { GREETING: "hi" }, uid: undefined }, "r1", policy);
  t.teardown(() => replica.stop(1_000));
  const first = await replica.start();
  t.equal(first.state, "healthy", JSON.stringify(replica.recentLogs()));
  const socket = replica.appSocket!;
  const env = JSON.parse((await get(socket, "/env")).body);
  t.same(env, { GREETING: "hi", TRIBUTARY_BASE_URL: "http://platform/v1", TRIBUTARY_PLATFORM_SOCKET: "/run/tributary/platform.sock", TRIBUTARY_ORGANIZATION_SLUG: "acme", TRIBUTARY_PROJECT_SLUG: "chat" });
  t.same(JSON.parse((await get(socket, "/platform")).body), { via: "gateway", path: "/v1/models", auth: "Bearer k" }, "the platform socket reaches the gateway");
  t.equal(JSON.parse((await get(socket, "/network")).body), "refused", "no network of its own");
  t.equal(JSON.parse((await get(socket, "/write")).body), "read-only", "the bundle is read-only");

  // A crash: restarted with backoff, healthy again on a new socket.
  await get(socket, "/crash").catch(() => undefined);
  const back = await new Promise<string>((resolve) => replica.onState((s) => s.state !== "starting" && resolve(s.state)));
  t.equal(back, "healthy");
  t.equal(replica.current.restarts, 1);
  t.equal(JSON.parse((await get(replica.appSocket!, "/")).body), "ok");
  t.ok(replica.recentLogs().some((l) => /restarting in 100 ms/.test(l.line)), "the restart is in the logs");
  await replica.stop(2_000);
  t.equal(replica.current.state, "stopped");
});

t.test("a response sent in one body message gets a Content-Length (relayed whole); a stream, a HEAD, a 204 are as the app sent them", async (t) => {
  const framing = `
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    if scope["path"] == "/stream":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"a", "more_body": True})
        return await send({"type": "http.response.body", "body": b"b"})
    status = 204 if scope["path"] == "/empty" else 200
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"" if status == 204 else b"whole"})
`;
  const replica = new AppReplica(options, { bundleDir: bundle(framing), manifest: manifest(), env: {}, uid: undefined }, "r5", policy);
  t.teardown(() => replica.stop(500));
  t.equal((await replica.start()).state, "healthy", JSON.stringify(replica.recentLogs()));
  const head = (path: string, method = "GET") =>
    new Promise<{ status: number; length: string | undefined; chunked: boolean; body: string }>((resolve, reject) => {
      const req = request({ socketPath: replica.appSocket!, path, method }, (res) => {
        let body = "";
        res.setEncoding("utf8").on("data", (c) => (body += c)).on("end", () => resolve({ status: res.statusCode!, length: res.headers["content-length"], chunked: res.headers["transfer-encoding"] === "chunked", body }));
      });
      req.on("error", reject).end();
    });
  t.same(await head("/"), { status: 200, length: "5", chunked: false, body: "whole" }, "one body message: a Content-Length");
  t.same(await head("/stream"), { status: 200, length: undefined, chunked: true, body: "ab" }, "a stream: chunked, as it comes");
  t.same(await head("/", "HEAD"), { status: 200, length: undefined, chunked: true, body: "" }, "a HEAD: as the app said (no length it did not give)");
  t.same(await head("/empty"), { status: 204, length: undefined, chunked: false, body: "" }, "a 204: no length");
});

t.test("an app that crashes at every start fails as a crash loop with its traceback", async (t) => {
  const replica = new AppReplica(options, { bundleDir: bundle("raise RuntimeError('broken at import')\n"), manifest: manifest(), env: {}, uid: undefined }, "r2", policy);
  t.teardown(() => replica.stop(500));
  const outcome = await replica.start();
  t.match(outcome, { state: "failed", reason: "crash_loop", restarts: 2 });
  t.ok(replica.recentLogs().some((l) => l.line.includes("RuntimeError: broken at import")), "the logs hold the error");
});

t.test("an app that never answers fails its health check with its logs", async (t) => {
  const replica = new AppReplica(options, { bundleDir: bundle("import time\nprint('warming up', flush=True)\ntime.sleep(3600)\n"), manifest: manifest(), env: {}, uid: undefined }, "r3", { ...policy, healthTimeoutMs: 1_500 });
  t.teardown(() => replica.stop(500));
  const outcome = await replica.start();
  t.match(outcome, { state: "failed", reason: "health_check_timeout" });
  t.ok(replica.recentLogs().some((l) => l.line.includes("warming up")));
});

t.test("an app beyond its memory is killed and reported", { skip: cgroups.version === "none" ? `no cgroups here: ${"reason" in cgroups ? cgroups.reason : ""}` : false }, async (t) => {
  const hog = `
hog = []
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    if scope["path"] == "/hog":
        for _ in range(64):
            hog.append(bytearray(16 * 1024 * 1024))
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})
`;
  const replica = new AppReplica(options, { bundleDir: bundle(hog), manifest: manifest({ memorySizeMb: 64 }), env: {}, uid: undefined }, "r4", policy);
  t.teardown(() => replica.stop(500));
  t.equal((await replica.start()).state, "healthy");
  const failed = new Promise<{ state: string; reason: string | null }>((resolve) => replica.onState((s) => s.state === "failed" && resolve(s)));
  await get(replica.appSocket!, "/hog").catch(() => undefined);
  t.match(await failed, { state: "failed", reason: "memory_exceeded" });
});
