// tier: serial (an app host killed -9 and started again, then the whole stack stopped and started)
import t from "tap";
import { restartStack, startStack } from "../../harness/stack.js";
import { startSandboxHost, TEST_KEY, type SandboxHost } from "../../harness/processes.js";
import { appDir, hosted, localManifest, OK_APP, untilDeployment, uploadBundle, waitForDeployment } from "../../harness/apps.js";

// A deployment is what should run, not where it ran: with one app host, killing that host (-9)
// and starting another leaves the deployment healthy and its address answering again, on the
// new host, without a redeploy (a request sent while no host runs it waits for the instance);
// stopping every process of the stack and starting them again on the same NATS store does too.
// A host is lost after 1.5 s of silence here (heartbeats every 250 ms); the reconciler's round is 250 ms.
const env = { TRIBUTARY_APP_HOST_TIMEOUT_MS: "1500", TRIBUTARY_APP_RECONCILE_MS: "250" };
// No egress probe: an app host starts sooner, and apps have no network anyway.
const hostEnv = { TRIBUTARY_APP_MEMORY_MB: "1024", TRIBUTARY_APP_CPU_MHZ: "2000", TRIBUTARY_APP_SWITCH_DELAY_MS: "100", TRIBUTARY_SANDBOX_EGRESS: "off" };
let stack = await startStack(t, { runners: 0, sandboxHosts: 1, env, sandboxHostEnv: hostEnv });
const ADDRESS = "default-project.local.apps.localhost";
const api = (path: string, init: RequestInit = {}) => fetch(stack.gateway.url + path, { ...init, headers: { authorization: `Bearer ${TEST_KEY}`, "content-type": "application/json" } });
const appHostOf = (host: SandboxHost) => `ah${host.hostId.slice(2)}`;


/** Polls the deployment until `done` holds of it (untilDeployment). */
const until = (id: string, done: (d: any) => boolean, what: string, timeoutMs?: number) => untilDeployment(stack.gateway.url, TEST_KEY, id, done, what, timeoutMs);

const artifact = await uploadBundle(stack.gateway.url, TEST_KEY, appDir(undefined, { "app.py": OK_APP, "tributary.yaml": localManifest(500) }));
const created = (await (await api("/v1/apps/deployments", { method: "POST", body: JSON.stringify({ artifact_id: artifact }) })).json()) as any;
const deploymentId = created.id as string;

t.test("a deployment is healthy with one instance, placed on the app host", async (t) => {
  t.match(created, { status: "pending", desired_instances: 1, scaling: { min_instances: 1, max_instances: 1 }, instances: [] });
  t.equal((await waitForDeployment(stack.gateway.url, TEST_KEY, deploymentId, ["healthy", "failed"])).status, "healthy");
  const d = await until(deploymentId, (d) => d.instances.length === 1 && d.instances[0].status === "healthy", "had its instance healthy");
  t.match(d.instances[0], { id: /^ins_/, host: appHostOf(stack.sandboxHosts[0]!), status: "healthy", started_at: Number });
  t.same(await hosted(stack.gateway.port, ADDRESS, "/", { key: TEST_KEY }).then((r) => [r.status, r.body]), [200, "ok"]);
});

t.test("kill -9 of the only app host: the deployment stays healthy, and the next host takes it back", async (t) => {
  const lost = stack.sandboxHosts[0]!;
  const before = (await (await api(`/v1/apps/deployments/${deploymentId}`)).json()) as any;
  await lost.kill();
  // Lost after the host timeout: its instance is forgotten, the deployment is not ended.
  const waiting = await until(deploymentId, (d) => d.instances.length === 0, "forgot its lost instance");
  t.match(waiting, { status: "healthy", reason: null, desired_instances: 1, healthy_at: before.healthy_at }, "still healthy: what should run has not changed");
  // A request now waits for an instance (none can start: no app host runs).
  const meanwhile = hosted(stack.gateway.port, ADDRESS, "/", { key: TEST_KEY });
  const next = await startSandboxHost(stack.nats.url, { TRIBUTARY_APP_PLATFORM_URL: stack.gateway.url, ...env, ...hostEnv });
  t.teardown(() => next.kill());
  stack.sandboxHosts[0] = next;
  t.same(await meanwhile.then((r) => [r.status, r.body]), [200, "ok"], "the request sent while no host ran it is answered by the new host");
  const back = await until(deploymentId, (d) => d.instances.length === 1 && d.instances[0].status === "healthy", "was placed again");
  t.match(back, { id: deploymentId, status: "healthy", healthy_at: before.healthy_at, instances: [{ host: appHostOf(next) }] }, "the same deployment, on the new host");
  t.not(back.instances[0].id, before.instances[0].id, "a new instance");
});

t.test("a full restart of the stack: every process stops and starts again on the same store; the app answers without a redeploy", async (t) => {
  stack = await restartStack(t, stack, { runners: 0, sandboxHosts: 1, env, sandboxHostEnv: hostEnv });
  const res = await hosted(stack.gateway.port, ADDRESS, "/", { key: TEST_KEY });
  t.same([res.status, res.body], [200, "ok"], "the first request waits for the instance, and is answered");
  const d = await until(deploymentId, (d) => d.instances.length === 1 && d.instances[0].status === "healthy", "was placed again");
  t.match(d, { id: deploymentId, status: "healthy", instances: [{ host: appHostOf(stack.sandboxHosts[0]!) }] });
  const list = (await (await api("/v1/apps/deployments")).json()) as any;
  t.same(list.data.map((x: any) => [x.id, x.status]), [[deploymentId, "healthy"]], "one deployment, as before: nothing was redeployed");
});
