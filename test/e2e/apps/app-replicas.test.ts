// tier: serial (two app hosts, one killed -9 under a request loop; scaling on load and to zero)
import t, { type Test } from "tap";
import { request } from "node:http";
import { startStack } from "../../harness/stack.js";
import { TEST_KEY, type SandboxHost } from "../../harness/processes.js";
import { appDir, hosted, localManifest, untilDeployment, uploadBundle, waitForDeployment } from "../../harness/apps.js";
import { appHostHeartbeat, type AppHostHeartbeat } from "../../../modules/apps/protocol.js";
import { subjects } from "../../../lib/nats/subjects.js";

// Replicas of a deployment over two app hosts: min_instances spreads them one per host, requests
// are balanced by requests in flight, and killing one host (-9) under a request loop fails no
// request (an idempotent request caught on the lost host is sent again to the other instance; a
// POST the lost host had taken is not, and says so); the lost instance is placed again on the
// surviving host. Scaling: held requests past target_inflight add instances, up to
// max_instances; an idle scale-to-zero app stops its last instance, and its next request waits
// for a cold start.
// A host is lost after 1.5 s of silence (heartbeats every 250 ms); scaling down waits 2 s (of a load that stays lower).
const env = { TRIBUTARY_APP_HOST_TIMEOUT_MS: "1500", TRIBUTARY_APP_RECONCILE_MS: "250", TRIBUTARY_APP_SCALE_DOWN_DELAY_MS: "2000" };
// No egress probe: an app host starts sooner, and apps have no network anyway.
const hostEnv = { TRIBUTARY_APP_MEMORY_MB: "1024", TRIBUTARY_APP_CPU_MHZ: "2000", TRIBUTARY_APP_SWITCH_DELAY_MS: "100", TRIBUTARY_SANDBOX_EGRESS: "off" };
const stack = await startStack(t, { runners: 0, sandboxHosts: 2, env, sandboxHostEnv: hostEnv });
const ADDRESS = "default-project.local.apps.localhost";
const api = (path: string, init: RequestInit = {}) => fetch(stack.gateway.url + path, { ...init, headers: { authorization: `Bearer ${TEST_KEY}`, "content-type": "application/json" } });
const appHostOf = (host: SandboxHost) => `ah${host.hostId.slice(2)}`;

// Each instance names itself (a token made at import) in every answer. /hold answers after 3 s,
// /pause after 4 s (a POST reads its body first).
const APP = `
import asyncio, uuid
ME = uuid.uuid4().hex[:12]
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    if scope["method"] == "POST":
        more = True
        while more:
            more = (await receive()).get("more_body", False)
    if scope["path"] == "/hold":
        await asyncio.sleep(3)
    if scope["path"] == "/pause":
        await asyncio.sleep(4)
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": ME.encode()})
`;
const manifest = (scaling: string) => localManifest(250, scaling);

async function deploy(t: Test, scaling: string): Promise<string> {
  const artifact = await uploadBundle(stack.gateway.url, TEST_KEY, appDir(undefined, { "app.py": APP, "tributary.yaml": manifest(scaling) }));
  const res = await api("/v1/apps/deployments", { method: "POST", body: JSON.stringify({ artifact_id: artifact }) });
  const body = (await res.json()) as any;
  if (res.status !== 201) throw new Error(`deploy: ${res.status} ${JSON.stringify(body)}`);
  t.equal((await waitForDeployment(stack.gateway.url, TEST_KEY, body.id, ["healthy", "failed"])).status, "healthy", "deployed");
  return body.id;
}

/** Polls the deployment until `done` holds of it (untilDeployment). */
const until = (id: string, done: (d: any) => boolean, what: string, timeoutMs?: number) => untilDeployment(stack.gateway.url, TEST_KEY, id, done, what, timeoutMs);
const healthyOn = (d: any) => d.instances.filter((i: any) => i.status === "healthy").map((i: any) => i.host).sort();

/** A POST with a small body to a hosted path: its status and body. */
function post(path: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: "127.0.0.1", port: stack.gateway.port, path, method: "POST", headers: { host: ADDRESS, authorization: `Bearer ${TEST_KEY}`, "content-type": "text/plain" } }, (res) => {
      let body = "";
      res.setEncoding("utf8").on("data", (c: string) => (body += c)).on("end", () => resolve({ status: res.statusCode!, body }));
    });
    req.on("error", reject);
    req.end("payload");
  });
}

/** The latest heartbeat of each app host (requests in flight per instance, load). */
const nc = await stack.nats.connect();
t.teardown(() => nc.close());
const beats = new Map<string, AppHostHeartbeat>();
nc.subscribe(subjects.appHostHeartbeat, {
  callback: (_err, msg) => {
    const beat = appHostHeartbeat.parseBytes(msg.subject, msg.data);
    beats.set(beat.host_id, beat);
  },
});
async function untilBeats(done: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 15_000;
  while (!done()) {
    if (Date.now() > deadline) throw new Error(`the app hosts never said ${what}: ${JSON.stringify([...beats.values()].map((b) => b.instances))}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}
const inFlight = (hostId: string) => beats.get(hostId)?.instances.reduce((n, i) => n + i.in_flight, 0) ?? 0;

const [hostA, hostB] = stack.sandboxHosts as [SandboxHost, SandboxHost];

t.test("min_instances 2: one instance on each app host, requests balanced over both", async (t) => {
  const id = await deploy(t, "min_instances: 2\n");
  const d = await until(id, (d) => healthyOn(d).length === 2, "had two healthy instances");
  t.same(healthyOn(d), [appHostOf(hostA), appHostOf(hostB)].sort(), "spread: one per host");
  t.match(d, { desired_instances: 2, scaling: { min_instances: 2, max_instances: 2 } });
  // Both answer (the address serves from the first; the second joins as its host reports it).
  const seen = new Set<string>();
  for (let i = 0; i < 50 && seen.size < 2; i++) seen.add((await hosted(stack.gateway.port, ADDRESS, "/", { key: TEST_KEY })).body);
  t.equal(seen.size, 2, "sequential requests alternate between the two instances");
  // Held requests sent together spread evenly: the gateway picks the instance with fewest in flight.
  const held = Array.from({ length: 6 }, () => hosted(stack.gateway.port, ADDRESS, "/hold", { key: TEST_KEY }));
  await untilBeats(() => inFlight(appHostOf(hostA)) + inFlight(appHostOf(hostB)) === 6, "6 requests in flight");
  t.same([inFlight(appHostOf(hostA)), inFlight(appHostOf(hostB))], [3, 3], "3 and 3");
  t.same((await Promise.all(held)).map((r) => r.status), Array(6).fill(200));
});

t.test("kill -9 of one app host under a request loop: no request fails, and its instance is placed again", async (t) => {
  const id = (await (await api("/v1/apps/deployments?limit=1")).json() as any).data[0].id as string;
  const failures: string[] = [];
  let calls = 0;
  let stop = false;
  const loop = async () => {
    while (!stop) {
      const res = await hosted(stack.gateway.port, ADDRESS, "/", { key: TEST_KEY }).catch((err: Error) => ({ status: 0, body: err.message }));
      calls++;
      if (res.status !== 200) failures.push(`${res.status} ${res.body}`);
    }
  };
  // Requests the lost host holds when it dies: GETs are sent again to the other instance; a
  // POST its app had taken is not (it may have acted), and says so. Sent before the loop, so
  // that each instance holds two of each (the gateway picks the one with fewest in flight).
  const gets = Array.from({ length: 4 }, () => hosted(stack.gateway.port, ADDRESS, "/hold", { key: TEST_KEY }));
  await untilBeats(() => inFlight(appHostOf(hostA)) === 2 && inFlight(appHostOf(hostB)) === 2, "each instance holds two GETs");
  const posts = Array.from({ length: 4 }, () => post("/hold"));
  await untilBeats(() => inFlight(appHostOf(hostA)) === 4 && inFlight(appHostOf(hostB)) === 4, "each instance holds two GETs and two POSTs");
  const lostInstance = beats.get(appHostOf(hostA))!.instances[0]!.instance_id;
  const loops = Array.from({ length: 4 }, loop);
  await hostA.kill();
  t.same((await Promise.all(gets)).map((r) => r.status), [200, 200, 200, 200], "every GET is answered, those on the lost host by the other instance");
  const postResults = await Promise.all(posts);
  const lostPosts = postResults.filter((r) => r.status !== 200);
  t.equal(lostPosts.length, 2, `the two POSTs the lost host had taken fail: ${JSON.stringify(postResults)}`);
  for (const r of lostPosts) t.match(JSON.parse(r.body), { error: { type: "server_error", code: "app_instance_lost" } });
  // The surviving host takes a second instance: min_instances holds again.
  const d = await until(id, (d) => healthyOn(d).length === 2 && d.instances.every((i: any) => i.host === appHostOf(hostB)), "had both instances on the surviving host");
  t.notOk(d.instances.some((i: any) => i.id === lostInstance), "the lost instance was forgotten");
  t.equal(d.status, "healthy");
  await new Promise((r) => setTimeout(r, 500));
  stop = true;
  await Promise.all(loops);
  t.same(failures, [], `${calls} requests in the loop`);
  t.ok(calls > 20, `${calls} requests during the kill`);
});

t.test("scaling: held requests past target_inflight add instances up to max_instances, and they go once idle", async (t) => {
  const id = await deploy(t, "min_instances: 1\nmax_instances: 3\ntarget_inflight: 1\n");
  await until(id, (d) => healthyOn(d).length === 1, "had one healthy instance");
  // 3 requests held at once: 3 in flight against a target of 1 per instance.
  let holding = true;
  const load = (async () => {
    while (holding) await Promise.all(Array.from({ length: 3 }, () => hosted(stack.gateway.port, ADDRESS, "/pause", { key: TEST_KEY })));
  })();
  const up = await until(id, (d) => d.desired_instances === 3 && healthyOn(d).length === 3, "scaled up to 3");
  t.match(up, { status: "healthy", desired_instances: 3 });
  holding = false;
  await load;
  const down = await until(id, (d) => d.desired_instances === 1 && d.instances.length === 1, "scaled back down to 1");
  t.match(down, { status: "healthy", desired_instances: 1 });
});

t.test("scale to zero: an idle app stops its last instance; its next request waits for a cold start", async (t) => {
  const id = await deploy(t, "min_instances: 0\n");
  t.match(await until(id, (d) => healthyOn(d).length === 1, "started its first instance"), { desired_instances: 1, scaling: { min_instances: 0, max_instances: 1 } }, "a deploy starts one, to see it answer");
  const idle = await until(id, (d) => d.desired_instances === 0 && d.instances.length === 0, "scaled to zero");
  t.equal(idle.status, "healthy", "scaled to zero, it still serves its address");
  await untilBeats(() => beats.get(appHostOf(hostB))?.instances.length === 0, "no instance runs");
  const res = await hosted(stack.gateway.port, ADDRESS, "/", { key: TEST_KEY });
  t.equal(res.status, 200, "the first request waits for an instance and is answered");
  t.match(await until(id, (d) => d.desired_instances === 1 && healthyOn(d).length === 1, "ran one instance"), { status: "healthy" });
});

t.test("a deployment stopped while scaled to zero ends its log followers and its address", async (t) => {
  const id = (await (await api("/v1/apps/deployments?limit=1")).json() as any).data[0].id as string;
  await until(id, (d) => d.desired_instances === 0 && d.instances.length === 0, "scaled to zero again");
  const follower = await api(`/v1/apps/deployments/${id}/logs?follow=true`);
  const followed = follower.text();
  const stopped = (await (await api(`/v1/apps/deployments/${id}/stop`, { method: "POST" })).json()) as any;
  t.match(stopped, { id, status: "stopped", reason: "user_stop", instances: [] });
  t.match(await followed, /event: end\ndata: \{"status":"stopped"\}\n\n$/, "the follower hears the end, though no host ran it");
  t.equal((await hosted(stack.gateway.port, ADDRESS, "/", { key: TEST_KEY })).status, 404, "nothing serves the address");
});
