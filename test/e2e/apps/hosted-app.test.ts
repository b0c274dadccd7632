import t from "tap";
import { startStack } from "../../harness/stack.js";
import { startSandboxHost, TEST_KEY } from "../../harness/processes.js";
import { appDir, EXAMPLE_APP, hosted, uploadBundle, waitForDeployment } from "../../harness/apps.js";
import { execFile } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { repoRoot } from "../../harness/processes.js";

// The example chat app deployed and called through its hosted address: streamed through the
// gateway, NATS, the app host and uvicorn; 401 without a key and 403 with another project's; an
// unchanged bundle changes nothing; a redeploy under a client loop fails no request; stop.
const OTHER_KEY = "sk-test-apps-other";
const secretsKey = { TRIBUTARY_SECRETS_KEY: "k1:" + Buffer.alloc(32, 9).toString("base64") };
const stack = await startStack(t, { runners: 1, env: secretsKey, gatewayEnv: { TRIBUTARY_API_KEYS: `${OTHER_KEY}=proj-apps-other` } });
// The app host forwards its instances' platform socket to this gateway: it starts once the gateway listens.
const host = await startSandboxHost(stack.nats.url, { ...secretsKey, TRIBUTARY_APP_PLATFORM_URL: stack.gateway.url, TRIBUTARY_APP_SWITCH_DELAY_MS: "300" });
t.teardown(() => host.kill());
const ADDRESS = "default-project.local.apps.localhost";
const api = (path: string, init: RequestInit = {}, key = TEST_KEY) =>
  fetch(stack.gateway.url + path, { ...init, headers: { authorization: `Bearer ${key}`, "content-type": "application/json" } });
const deploy = async (dir: string) => {
  const artifact = await uploadBundle(stack.gateway.url, TEST_KEY, dir);
  const res = await api("/v1/apps/deployments", { method: "POST", body: JSON.stringify({ artifact_id: artifact }) });
  return { status: res.status, body: (await res.json()) as any, artifact };
};
const chat = (key?: string) =>
  hosted(stack.gateway.port, ADDRESS, "/v1/chat/completions", { method: "POST", key, body: JSON.stringify({ messages: [{ role: "user", content: "Once upon a time" }], max_tokens: 12, stream: true }) });

/** `tributary deploy DIR` against this stack: its exit code, stdout and stderr. */
const cliDeploy = (dir: string) =>
  new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
    const child = execFile(process.execPath, [join(repoRoot, "dist", "cli", "main.js"), "deploy", dir, "--url", stack.gateway.url, "--key", TEST_KEY], { timeout: 60_000 }, (err, stdout, stderr) =>
      resolve({ code: err ? (child.exitCode ?? 1) : 0, stdout, stderr }),
    );
  });

await api("/v1/secrets", { method: "POST", body: JSON.stringify({ name: "PLATFORM_API_KEY", value: TEST_KEY }) });
// A fresh directory with a cache and a virtualenv the CLI must not pack; deployed from a subdirectory.
const fresh = appDir(EXAMPLE_APP);
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
  const again = await cliDeploy(appDir(EXAMPLE_APP));
  t.equal(again.code, 0);
  t.match(again.stderr, new RegExp(`unchanged: ${first.body.id}`), "the same app from another directory changes nothing");
});

t.test("a call through the hosted address streams the answer", async (t) => {
  const res = await chat(TEST_KEY);
  t.equal(res.status, 200, res.body);
  t.match(res.headers["content-type"], /text\/event-stream/);
  t.match(res.body, /\ndata: \{.*"chat\.completion\.chunk"/);
  t.match(res.body, /data: \[DONE\]\n\n$/);
  t.ok(res.chunks > 1, `arrived in ${res.chunks} chunks`);
});

t.test("the bearer key must belong to the app's project", async (t) => {
  const none = await chat(undefined);
  t.equal(none.status, 401);
  const other = await chat(OTHER_KEY);
  t.equal(other.status, 403, other.body);
  t.match(JSON.parse(other.body), { error: { code: "wrong_project" } });
  const nowhere = await hosted(stack.gateway.port, "nothing.local.apps.localhost", "/", { key: TEST_KEY });
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
      const res = await hosted(stack.gateway.port, ADDRESS, "/ping", { key: TEST_KEY }).catch((err: Error) => ({ status: 0, body: err.message }));
      calls++;
      if (res.status !== 200) failures.push(`${res.status} ${res.body}`);
    }
  })();
  const second = await deploy(appDir(EXAMPLE_APP, { "VERSION": "2\n" }));
  t.equal(second.status, 201);
  t.equal(second.body.replaces, first.body.id);
  t.equal((await waitForDeployment(stack.gateway.url, TEST_KEY, second.body.id, ["healthy", "failed"])).status, "healthy");
  const old = await waitForDeployment(stack.gateway.url, TEST_KEY, first.body.id, ["superseded", "failed", "stopped"]);
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

  // A follower of the logs gets the lines, then `end` once the deployment ends.
  const follower = api(`/v1/apps/deployments/${second.body.id}/logs?follow=true`).then((r) => r.text());
  await new Promise((r) => setTimeout(r, 200));
  const stopped = await api(`/v1/apps/deployments/${second.body.id}/stop`, { method: "POST" });
  t.match(await stopped.json(), { id: second.body.id, status: "stopped", reason: "user_stop" });
  t.equal((await hosted(stack.gateway.port, ADDRESS, "/ping", { key: TEST_KEY })).status, 404, "nothing serves the address after a stop");
  const followed = await follower;
  t.match(followed, /event: log\ndata: \{.*Uvicorn running/, "the lines so far");
  t.match(followed, /event: end\ndata: \{"status":"stopped"\}\n\n$/, "then the end");
});
