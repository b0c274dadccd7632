import t from "tap";
import { sharedStack } from "../../harness/shared-stack.js";
import { runCli } from "../../harness/cli.js";
import { appDir, EXAMPLE_APP, hosted, uploadBundle, waitForDeployment } from "../../harness/apps.js";
import { execFile } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { slugOf } from "../../../modules/apps/mod.js";
import { subjects } from "../../../lib/nats/subjects.js";

// The example chat app deployed and called through its hosted address: streamed through the
// gateway, NATS, the app host and uvicorn; reached at its path address too, from Node's fetch and
// Python's urllib, with the prefix as its root_path; 401 without a key and 403 with another
// project's at both; an unchanged bundle changes nothing; a redeploy under a client loop fails no
// request; stop.
// The shared stack's sandbox host is the app host, pointed at the shared gateway.
const stack = await sharedStack(t);
const { organizations } = await stack.admin.listOrganizations({});
const { projects } = await stack.admin.listProjects({ organizationId: stack.organizationId });
const organization = organizations.find((o) => o.id === stack.organizationId)!;
const project = projects.find((p) => p.id === stack.projectId)!;
// The hosted address of the tenant's project: <project slug>.<organization slug>.apps.localhost.
const ADDRESS = `${slugOf(project.name)}.${slugOf(organization.name)}.apps.localhost`;
// Its path address: /apps/<organization slug>/<project slug>/ on the gateway's own address.
const PREFIX = `/apps/${slugOf(organization.name)}/${slugOf(project.name)}`;
const LOCAL_URL = `${stack.gateway.url}${PREFIX}/`;
// The example's manifest names the local organization's default project: this copy names the tenant's.
const manifest = readFileSync(join(EXAMPLE_APP, "tributary.yaml"), "utf8")
  .replace(/^organization_slug: .*$/m, `organization_slug: ${slugOf(organization.name)}`)
  .replace(/^project: .*$/m, `project: ${project.name}`)
  .replace(/^project_slug: .*$/m, `project_slug: ${slugOf(project.name)}`);
// Two routes of this test's own around the example: /scope says what the app was told (root_path,
// path, query, every prefix header it got); /moved redirects and sets a cookie at absolute
// paths, as an app that does not read root_path does.
const TEST_ROUTES = `

_example_app = app


async def app(scope, receive, send):
    if scope["type"] == "http" and scope["path"] == "/scope":
        prefixes = [value.decode() for name, value in scope["headers"] if name == b"x-forwarded-prefix"]
        return await send_json(send, 200, {"root_path": scope.get("root_path", ""), "path": scope["path"], "query": scope["query_string"].decode(), "prefix_headers": prefixes})
    if scope["type"] == "http" and scope["path"] == "/moved":
        await send({"type": "http.response.start", "status": 307, "headers": [(b"location", b"/ping"), (b"set-cookie", b"seen=1; Path=/; HttpOnly"), (b"content-length", b"0")]})
        return await send({"type": "http.response.body", "body": b""})
    return await _example_app(scope, receive, send)
`;
const CHAT_APP = readFileSync(join(EXAMPLE_APP, "chat", "app.py"), "utf8") + TEST_ROUTES;
const exampleApp = (files: Record<string, string> = {}) => appDir(EXAMPLE_APP, { "tributary.yaml": manifest, "chat/app.py": CHAT_APP, ...files });
const api = (path: string, init: RequestInit = {}, key = stack.key) =>
  fetch(stack.gateway.url + path, { ...init, headers: { authorization: `Bearer ${key}`, "content-type": "application/json" } });
const deploy = async (dir: string) => {
  const artifact = await uploadBundle(stack.gateway.url, stack.key, dir);
  const res = await api("/v1/apps/deployments", { method: "POST", body: JSON.stringify({ artifact_id: artifact }) });
  return { status: res.status, body: (await res.json()) as any, artifact };
};
const chat = (key?: string) =>
  hosted(stack.gateway.port, ADDRESS, "/v1/chat/completions", { method: "POST", key, body: JSON.stringify({ messages: [{ role: "user", content: "Once upon a time" }], max_tokens: 12, stream: true }) });

/** GET argv[1] with Python's urllib, the key argv[2] and a prefix header argv[3]: {status, body} as JSON. */
const PYTHON_GET = `
import json, sys, urllib.request
url, key, prefix = sys.argv[1:4]
request = urllib.request.Request(url, headers={"Authorization": "Bearer " + key, "X-Forwarded-Prefix": prefix})
with urllib.request.urlopen(request, timeout=20) as response:
    print(json.dumps({"status": response.status, "body": json.load(response)}))
`;

/** `tributary deploy DIR` against this stack: its exit code, stdout and stderr (it waits until healthy: a minute and more on a busy machine). */
const cliDeploy = (dir: string) => runCli(["deploy", dir, "--url", stack.gateway.url, "--api-key", stack.key], { timeoutMs: 120_000 });

await api("/v1/secrets", { method: "POST", body: JSON.stringify({ name: "PLATFORM_API_KEY", value: stack.key }) });
// A fresh directory with a cache and a virtualenv the CLI must not pack; deployed from a subdirectory.
const fresh = exampleApp();
mkdirSync(join(fresh, "chat", "__pycache__"));
writeFileSync(join(fresh, "chat", "__pycache__", "app.cpython-311.pyc"), "junk");
mkdirSync(join(fresh, "env"));
writeFileSync(join(fresh, "env", "pyvenv.cfg"), "home = /usr/bin\n");
const deployed = await cliDeploy(join(fresh, "chat"));
const first = { body: ((await (await api("/v1/apps/deployments")).json()) as any).data[0], artifact: "" };
first.artifact = first.body?.artifact_id;

t.test("tributary deploy packs, uploads and deploys the example app until healthy", async (t) => {
  t.equal(deployed.code, 0, deployed.stderr);
  t.equal(deployed.stdout, `http://${ADDRESS}:${stack.gateway.port}\n`, "prints the hosted address");
  t.match(deployed.stderr, /packed .*: 4 files/, "README.md, chat/__init__.py, chat/app.py, tributary.yaml: no cache, no virtualenv");
  t.match(deployed.stderr, /-> healthy/);
  t.match(first.body, { object: "app.deployment", status: "healthy", hosted_url: `http://${ADDRESS}:${stack.gateway.port}`, entrypoint: "chat.app:app", secrets: ["PLATFORM_API_KEY"] });
  const again = await cliDeploy(exampleApp());
  t.equal(again.code, 0);
  t.match(again.stderr, new RegExp(`unchanged: ${first.body.id}`), "the same app from another directory changes nothing");
});

t.test("a call through the hosted address streams the answer", async (t) => {
  const res = await chat(stack.key);
  t.equal(res.status, 200, res.body);
  t.match(res.headers["content-type"], /text\/event-stream/);
  t.match(res.body, /\ndata: \{.*"chat\.completion\.chunk"/);
  t.match(res.body, /data: \[DONE\]\n\n$/);
  t.ok(res.chunks > 1, `arrived in ${res.chunks} chunks`);
});

t.test("the bearer key must belong to the app's project", async (t) => {
  const none = await chat(undefined);
  t.equal(none.status, 401);
  // Another project of the organization, and another organization.
  for (const other of [await stack.project("hosted-app-other"), await stack.tenant("hosted-app-other")]) {
    const res = await chat(other.key);
    t.equal(res.status, 403, res.body);
    t.match(JSON.parse(res.body), { error: { code: "wrong_project" } });
  }
  const nowhere = await hosted(stack.gateway.port, `nothing.${slugOf(organization.name)}.apps.localhost`, "/", { key: stack.key });
  t.equal(nowhere.status, 404);
  t.match(JSON.parse(nowhere.body), { error: { code: "app_not_found" } });
});

t.test("the path address answers as the host name does: the key's project, the same 404", async (t) => {
  const get = (path: string, key?: string) => fetch(stack.gateway.url + path, { headers: key ? { authorization: `Bearer ${key}` } : {} });
  t.equal((await get(`${PREFIX}/ping`)).status, 401, "no key");
  for (const other of [await stack.project("hosted-app-other"), await stack.tenant("hosted-app-other")]) {
    const res = await get(`${PREFIX}/ping`, other.key);
    t.equal(res.status, 403);
    t.match(await res.json(), { error: { code: "wrong_project" } });
  }
  const nowhere = await get(`/apps/${slugOf(organization.name)}/nothing/`, stack.key);
  t.equal(nowhere.status, 404);
  t.match(await nowhere.json(), { error: { code: "app_not_found" } }, "no app there: the host name's 404");
  for (const path of [`/apps/${slugOf(organization.name)}/not_a_slug/`, `/apps/${slugOf(organization.name)}`, "/apps"]) {
    const res = await get(path, stack.key);
    t.equal(res.status, 404, path);
    t.match(await res.json(), { error: { code: "unknown_url" } }, `${path}: no address at all, the router's 404`);
  }
});

t.test("the path address reaches the app from any HTTP client, with the prefix as its root_path", async (t) => {
  t.equal(first.body.local_url, LOCAL_URL, "the deployment names its path address");
  t.ok(deployed.stderr.includes(`also at ${LOCAL_URL}`), "tributary deploy prints it");
  const auth = { authorization: `Bearer ${stack.key}` };
  // Node's fetch: nothing to resolve but the gateway's own address. A prefix header a client sends is dropped.
  const scope = await fetch(`${LOCAL_URL}scope?x=1`, { headers: { ...auth, "x-forwarded-prefix": "/spoofed" } });
  t.equal(scope.status, 200);
  t.same(await scope.json(), { root_path: PREFIX, path: "/scope", query: "x=1", prefix_headers: [PREFIX] }, "the prefix as root_path, the rest as the path");
  const root = await fetch(stack.gateway.url + PREFIX, { headers: auth });
  t.match(await root.json(), { status: "ok" }, "without its trailing slash: the app's root");
  const chat = await fetch(`${LOCAL_URL}v1/chat/completions`, { method: "POST", headers: { ...auth, "content-type": "application/json" }, body: JSON.stringify({ messages: [{ role: "user", content: "Hi" }], max_tokens: 4 }) });
  t.equal(chat.status, 200);
  t.match(await chat.json(), { object: "chat.completion" }, "a body goes through");

  // Python's standard client, which cannot resolve *.localhost names on Debian.
  const python = await new Promise<{ code: number; stdout: string; stderr: string }>((resolve) =>
    execFile("/usr/bin/python3", ["-c", PYTHON_GET, `${LOCAL_URL}scope`, stack.key, "/spoofed"], { timeout: 30_000 }, (err, stdout, stderr) => resolve({ code: err ? 1 : 0, stdout, stderr })),
  );
  t.equal(python.code, 0, python.stderr);
  t.same(JSON.parse(python.stdout), { status: 200, body: { root_path: PREFIX, path: "/scope", query: "", prefix_headers: [PREFIX] } }, "Python's urllib");

  // The host name reaches the same instance at its root; a client's prefix header is dropped there too.
  const byName = await hosted(stack.gateway.port, ADDRESS, "/scope", { key: stack.key, headers: { "x-forwarded-prefix": "/spoofed" } });
  t.same(JSON.parse(byName.body), { root_path: "", path: "/scope", query: "", prefix_headers: [] }, "the host name: no root_path");
});

t.test("under the path address, the app's absolute redirects and cookie paths come back under the prefix", async (t) => {
  const auth = { authorization: `Bearer ${stack.key}` };
  const moved = await fetch(`${LOCAL_URL}moved`, { headers: auth, redirect: "manual" });
  t.equal(moved.status, 307);
  t.equal(moved.headers.get("location"), `${PREFIX}/ping`);
  t.equal(moved.headers.get("set-cookie"), `seen=1; Path=${PREFIX}; HttpOnly`);
  const followed = await fetch(`${LOCAL_URL}moved`, { headers: auth });
  t.same(await followed.json(), { pong: true }, "followed, the redirect stays with the app");
  const byName = await hosted(stack.gateway.port, ADDRESS, "/moved", { key: stack.key });
  t.equal(byName.headers.location, "/ping", "the host name: as the app wrote it");
  t.same(byName.headers["set-cookie"], ["seen=1; Path=/; HttpOnly"]);
});

t.test("an unchanged bundle changes nothing", async (t) => {
  const again = await api("/v1/apps/deployments", { method: "POST", body: JSON.stringify({ artifact_id: first.artifact }) });
  t.equal(again.status, 200);
  t.match(await again.json(), { id: first.body.id, status: "healthy", unchanged: true });
});

t.test("a redeploy under a client loop fails no request", async (t) => {
  let stop = false;
  const failures: string[] = [];
  let calls = 0;
  const loop = (async () => {
    while (!stop) {
      const res = await hosted(stack.gateway.port, ADDRESS, "/ping", { key: stack.key }).catch((err: Error) => ({ status: 0, body: err.message }));
      calls++;
      if (res.status !== 200) failures.push(`${res.status} ${res.body}`);
    }
  })();
  const second = await deploy(exampleApp({ "VERSION": "2\n" }));
  t.equal(second.status, 201);
  t.equal(second.body.replaces, first.body.id);
  t.equal((await waitForDeployment(stack.gateway.url, stack.key, second.body.id, ["healthy", "failed"])).status, "healthy");
  const old = await waitForDeployment(stack.gateway.url, stack.key, first.body.id, ["superseded", "failed", "stopped"]);
  t.match(old, { status: "superseded", superseded_by: second.body.id });
  await new Promise((r) => setTimeout(r, 300));
  stop = true;
  await loop;
  t.same(failures, [], `${calls} calls`);
  t.ok(calls > 10, `${calls} calls during the redeploy`);

  const logs = (await (await api(`/v1/apps/deployments/${second.body.id}/logs`)).json()) as any;
  t.ok(logs.data.some((l: any) => /Uvicorn running/.test(l.line)), "uvicorn's log lines");
  const list = (await (await api("/v1/apps/deployments")).json()) as any;
  t.same(list.data.map((d: any) => d.id), [second.body.id, first.body.id], "newest first");

  // A follower of the logs gets the lines, then `end` once the deployment ends. It follows once
  // it listens on the deployment's log subject: a line published there shows when it does.
  const follower = await api(`/v1/apps/deployments/${second.body.id}/logs?follow=true`);
  let followed = "";
  const read = (async () => {
    const decoder = new TextDecoder();
    for await (const chunk of follower.body!) followed += decoder.decode(chunk, { stream: true });
  })();
  const nc = await stack.nats.connect();
  t.teardown(() => nc.close());
  const marker = `[test] follower ${Date.now()}`;
  const deadline = Date.now() + 15_000;
  while (!followed.includes(marker)) {
    if (Date.now() > deadline) throw new Error(`the log follower heard no line within 15 s: ${JSON.stringify(followed)}`);
    nc.publish(subjects.appLogs(second.body.id), JSON.stringify({ at: Date.now(), stream: "stdout", line: marker, end: false }));
    await new Promise((r) => setTimeout(r, 50));
  }
  const stopped = await api(`/v1/apps/deployments/${second.body.id}/stop`, { method: "POST" });
  t.match(await stopped.json(), { id: second.body.id, status: "stopped", reason: "user_stop" });
  t.equal((await hosted(stack.gateway.port, ADDRESS, "/ping", { key: stack.key })).status, 404, "nothing serves the address after a stop");
  await read;
  t.match(followed, /event: log\ndata: \{.*Uvicorn running/, "the lines so far");
  t.match(followed, /event: end\ndata: \{"status":"stopped"\}\n\n$/, "then the end");
});
