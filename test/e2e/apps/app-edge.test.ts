import t from "tap";
import { request } from "node:http";
import { sharedStack } from "../../harness/shared-stack.js";
import { appDir, hosted, uploadBundle, waitForDeployment } from "../../harness/apps.js";
import { slugOf } from "../../../modules/apps/mod.js";

// The gateway as the edge in front of a hosted app: forwarded headers are its own (a client's
// copies dropped, at both addresses), and a deployment's timeouts bound how long the app may keep
// a request: to its response head (504 app_timeout), and between bytes of its body (cut off).
// The deployments run on the shared stack's app host, at this file's tenant's address.
const stack = await sharedStack(t);
const { organizations } = await stack.admin.listOrganizations({});
const { projects } = await stack.admin.listProjects({ organizationId: stack.organizationId });
const organizationSlug = slugOf(organizations.find((o) => o.id === stack.organizationId)!.name);
const project = projects.find((p) => p.id === stack.projectId)!;
const ADDRESS = `${slugOf(project.name)}.${organizationSlug}.apps.localhost`;
const PREFIX = `/apps/${organizationSlug}/${slugOf(project.name)}`;
const MANIFEST = { entrypoint: "app:app", organization_slug: organizationSlug, project: project.name, project_slug: slugOf(project.name), cpu_mhz: 500, gpu_count: 0, memory_size_mb: 96 };

// /headers: the request headers the app got, in order; /never: no answer at all; /stall: a head
// and one chunk, then silence; /drip: a byte every 0.2 s for 3 s, then the end.
const APP = `
import asyncio, json

async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    path = scope["path"]
    if path == "/never":
        await asyncio.sleep(3600)
        return
    if path == "/headers":
        body = json.dumps([[name.decode("latin-1"), value.decode("latin-1")] for name, value in scope["headers"]]).encode()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        return await send({"type": "http.response.body", "body": body})
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    if path == "/stall":
        await send({"type": "http.response.body", "body": b"first", "more_body": True})
        await asyncio.sleep(3600)
        return
    if path == "/drip":
        for _ in range(15):
            await send({"type": "http.response.body", "body": b".", "more_body": True})
            await asyncio.sleep(0.2)
        return await send({"type": "http.response.body", "body": b"done"})
    await send({"type": "http.response.body", "body": b"ok"})
`;
const yaml = (fields: Record<string, unknown>) => Object.entries(fields).map(([k, v]) => `${k}: ${JSON.stringify(v)}`).join("\n") + "\n";

/** Deploys APP with `fields` over MANIFEST and waits until it serves: the deployment object. */
async function deploy(fields: Record<string, unknown> = {}) {
  const artifact = await uploadBundle(stack.gateway.url, stack.key, appDir(undefined, { "app.py": APP, "tributary.yaml": yaml({ ...MANIFEST, ...fields }) }));
  const res = await fetch(`${stack.gateway.url}/v1/apps/deployments`, { method: "POST", body: JSON.stringify({ artifact_id: artifact }), headers: { authorization: `Bearer ${stack.key}`, "content-type": "application/json" } });
  const created = (await res.json()) as { id: string };
  if (res.status !== 201) throw new Error(`deploy: ${res.status} ${JSON.stringify(created)}`);
  return waitForDeployment(stack.gateway.url, stack.key, created.id, ["healthy"], 60_000);
}

/** GET `path` at the host name: the status, what of the body arrived, and whether the response ended whole. */
function getToEnd(path: string): Promise<{ status: number; body: string; complete: boolean }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: "127.0.0.1", port: stack.gateway.port, path, headers: { host: ADDRESS, authorization: `Bearer ${stack.key}` } }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (c: string) => (body += c));
      res.on("error", () => {}); // a response cut off: `complete` says so
      res.on("close", () => resolve({ status: res.statusCode!, body, complete: res.complete }));
    });
    req.on("error", reject);
    req.end();
  });
}

const CLIENT_FORWARDED = {
  "x-forwarded-for": "203.0.113.9",
  "x-forwarded-host": "evil.example",
  "x-forwarded-proto": "https",
  "x-forwarded-port": "443",
  "x-forwarded-prefix": "/evil",
  forwarded: "for=203.0.113.9;proto=https",
  "x-real-ip": "203.0.113.9",
  "x-request-id": "client-chosen-id",
  "x-custom": "kept",
};

t.test("without timeouts in its manifest a deployment gets the defaults, and the edge's forwarded headers", async (t) => {
  const deployment = await deploy();
  t.same(deployment.timeouts, { request_seconds: 60, idle_seconds: 300 }, "the gateway's defaults, fixed in the deployment");

  for (const [address, host, path] of [["host name", ADDRESS, "/headers"], ["path address", `127.0.0.1:${stack.gateway.port}`, `${PREFIX}/headers`]] as const) {
    const res = await hosted(stack.gateway.port, host, path, { key: stack.key, headers: CLIENT_FORWARDED });
    t.equal(res.status, 200, `${address}: ${res.body}`);
    const got = JSON.parse(res.body) as Array<[string, string]>;
    const all = (name: string) => got.filter(([n]) => n === name).map(([, v]) => v);
    t.same(all("x-forwarded-for").length, 1, `${address}: one X-Forwarded-For`);
    t.match(all("x-forwarded-for")[0], /127\.0\.0\.1/, `${address}: the client's address as the gateway saw it`);
    t.same(all("x-forwarded-host"), [host], `${address}: the Host the client asked for`);
    t.same(all("x-forwarded-proto"), ["http"], `${address}: the scheme of hosted addresses`);
    t.same(all("x-forwarded-prefix"), address === "path address" ? [PREFIX] : [], `${address}: the prefix only at the path address`);
    t.same(all("x-request-id"), [res.headers["x-request-id"]], `${address}: the gateway's request id, the one the client got back`);
    for (const dropped of ["forwarded", "x-real-ip", "x-forwarded-port"]) t.same(all(dropped), [], `${address}: the client's ${dropped} is dropped`);
    t.notOk(res.body.includes("203.0.113.9") || res.body.includes("evil") || res.body.includes("client-chosen-id"), `${address}: nothing the client forged reaches the app`);
    t.same(all("x-custom"), ["kept"], `${address}: other headers pass`);
  }
});

t.test("an app past its request timeout is a 504 app_timeout; past its idle timeout its response is cut off", async (t) => {
  const deployment = await deploy({ timeouts: { request_seconds: 1, idle_seconds: 2 } });
  t.same(deployment.timeouts, { request_seconds: 1, idle_seconds: 2 }, "the manifest's timeouts");

  const never = await hosted(stack.gateway.port, ADDRESS, "/never", { key: stack.key });
  t.equal(never.status, 504, never.body);
  t.match(JSON.parse(never.body), { error: { type: "server_error", code: "app_timeout", message: /within 1 s/ } });

  const stalled = await getToEnd("/stall");
  t.equal(stalled.status, 200, "the head came in time");
  t.equal(stalled.body, "first", "what the app sent reached the client");
  t.notOk(stalled.complete, "then the silent response was cut off, not left open");

  // Bytes every 0.2 s for 3 s: past both timeouts in total, never idle, and the head came at once.
  const drip = await getToEnd("/drip");
  t.same(drip, { status: 200, body: ".".repeat(15) + "done", complete: true }, "a response that keeps moving runs to its end");

  t.equal((await hosted(stack.gateway.port, ADDRESS, "/", { key: stack.key })).status, 200, "the app still serves");
});
