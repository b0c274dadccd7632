import t from "tap";
import { sharedStack } from "../../harness/shared-stack.js";
import { runCli } from "../../harness/cli.js";
import { appDir, EXAMPLE_APP, hosted, uploadBundle, waitForDeployment } from "../../harness/apps.js";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { slugOf } from "../../../modules/apps/mod.js";
import { subjects } from "../../../lib/nats/subjects.js";

// The example chat app deployed and called through its hosted address: streamed through the
// gateway, NATS, the app host and uvicorn; 401 without a key and 403 with another project's; an
// unchanged bundle changes nothing; a redeploy under a client loop fails no request; stop.
// The shared stack's sandbox host is the app host, pointed at the shared gateway.
const stack = await sharedStack(t);
const { organizations } = await stack.admin.listOrganizations({});
const { projects } = await stack.admin.listProjects({ organizationId: stack.organizationId });
const organization = organizations.find((o) => o.id === stack.organizationId)!;
const project = projects.find((p) => p.id === stack.projectId)!;
// The hosted address of the tenant's project: <project slug>.<organization slug>.apps.localhost.
const ADDRESS = `${slugOf(project.name)}.${slugOf(organization.name)}.apps.localhost`;
// The example's manifest names the local organization's default project: this copy names the tenant's.
const manifest = readFileSync(join(EXAMPLE_APP, "tributary.yaml"), "utf8")
  .replace(/^organization_slug: .*$/m, `organization_slug: ${slugOf(organization.name)}`)
  .replace(/^project: .*$/m, `project: ${project.name}`)
  .replace(/^project_slug: .*$/m, `project_slug: ${slugOf(project.name)}`);
const exampleApp = (files: Record<string, string> = {}) => appDir(EXAMPLE_APP, { "tributary.yaml": manifest, ...files });
const api = (path: string, init: RequestInit = {}, key = stack.key) =>
  fetch(stack.gateway.url + path, { ...init, headers: { authorization: `Bearer ${key}`, "content-type": "application/json" } });
const deploy = async (dir: string) => {
  const artifact = await uploadBundle(stack.gateway.url, stack.key, dir);
  const res = await api("/v1/apps/deployments", { method: "POST", body: JSON.stringify({ artifact_id: artifact }) });
  return { status: res.status, body: (await res.json()) as any, artifact };
};
const chat = (key?: string) =>
  hosted(stack.gateway.port, ADDRESS, "/v1/chat/completions", { method: "POST", key, body: JSON.stringify({ messages: [{ role: "user", content: "Once upon a time" }], max_tokens: 12, stream: true }) });

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
