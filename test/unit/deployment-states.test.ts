import t from "tap";
import { DEPLOYMENT_STATUSES, deploymentStates as states, type DeploymentObject, type DeploymentStatus } from "../../modules/apps/mod.js";

// The moves of a deployment's life at their edges: each is a pure function of the deployment
// object (its app host, the gateway and the sweeper apply it with a compare-and-set), and none
// moves a final deployment.

const FINAL: readonly DeploymentStatus[] = ["failed", "superseded", "stopped"];
const LIVE: readonly DeploymentStatus[] = ["pending", "starting", "healthy"];
const CREATED = 1_700_000_000;
const AT = CREATED + 40;

function deployment(status: DeploymentStatus = "pending", fields: Partial<DeploymentObject> = {}): DeploymentObject {
  return {
    id: "dep_000000000000000000000001",
    object: "app.deployment",
    status,
    reason: null,
    message: null,
    artifact_id: "art_1",
    sha256: "ab".repeat(32),
    hosted_url: "http://chat.acme.apps.localhost:8080",
    entrypoint: "app:app",
    resources: { cpu_mhz: 1000, memory_size_mb: 256, gpu_count: 0 },
    env_names: [],
    secrets: [],
    restarts: 0,
    created_at: CREATED,
    healthy_at: null,
    ended_at: null,
    replaces: null,
    superseded_by: null,
    last_logs: [],
    ...fields,
  };
}

t.test("isFinal: failed, superseded and stopped, nothing else", async (t) => {
  for (const s of DEPLOYMENT_STATUSES) t.equal(states.isFinal(s), FINAL.includes(s), s);
});

t.test("start: a pending deployment starts; from no other state", async (t) => {
  t.equal(states.start(deployment("pending"))?.status, "starting");
  for (const s of DEPLOYMENT_STATUSES.filter((s) => s !== "pending")) t.equal(states.start(deployment(s)), undefined, s);
});

t.test("serve: a live deployment is healthy, with its restarts; a final one stays", async (t) => {
  for (const s of LIVE) {
    const next = states.serve(deployment(s), 2, AT);
    t.same([next?.status, next?.healthy_at, next?.restarts], ["healthy", AT, 2], s);
  }
  for (const s of FINAL) t.equal(states.serve(deployment(s), 0, AT), undefined, s);
});

t.test("restarted: the count of a live deployment's restarts, its status kept", async (t) => {
  for (const s of LIVE) t.same([states.restarted(deployment(s), 3)?.restarts, states.restarted(deployment(s), 3)?.status], [3, s], s);
  for (const s of FINAL) t.equal(states.restarted(deployment(s), 3), undefined, s);
});

t.test("end: each ending from each live state", async (t) => {
  const logs = ["Traceback (most recent call last):", "ValueError: no"];
  for (const from of LIVE) {
    const failed = states.end(deployment(from), states.appFailed("crash_loop", "it kept crashing"), AT, logs);
    t.same([failed?.status, failed?.reason, failed?.message, failed?.ended_at, failed?.last_logs], ["failed", "crash_loop", "it kept crashing", AT, logs], `${from}: its own failure`);
    const lost = states.end(deployment(from), states.placementFailed("host_lost", "the app host stopped answering"), AT);
    t.same([lost?.status, lost?.reason, lost?.message, lost?.last_logs], ["failed", "host_lost", "the app host stopped answering", []], `${from}: its placement's failure`);
    const stopped = states.end(deployment(from), states.stoppedBy("user_stop"), AT, logs);
    t.same([stopped?.status, stopped?.reason, stopped?.message, stopped?.last_logs, stopped?.superseded_by], ["stopped", "user_stop", null, [], null], `${from}: stopped, no logs kept`);
    const shutDown = states.end(deployment(from), states.stoppedBy("host_stopped", "the app host shut down"), AT);
    t.same([shutDown?.status, shutDown?.reason, shutDown?.message], ["stopped", "host_stopped", "the app host shut down"]);
    const superseded = states.end(deployment(from), states.supersededBy("dep_2"), AT, logs);
    t.same([superseded?.status, superseded?.reason, superseded?.message, superseded?.superseded_by, superseded?.last_logs], ["superseded", "superseded", "replaced by dep_2", "dep_2", []]);
  }
  t.same(states.supersededBy(null), { status: "superseded", reason: "superseded", message: null, supersededBy: null });
  t.equal(states.end(deployment("healthy", { superseded_by: "dep_0" }), states.supersededBy(null), AT)?.superseded_by, "dep_0", "an unnamed successor keeps what the record said");
  for (const s of FINAL) {
    t.equal(states.end(deployment(s), states.stoppedBy("user_stop"), AT), undefined, s);
    t.equal(states.end(deployment(s), states.appFailed("crash_loop", null), AT), undefined, s);
  }
});

t.test("verdict: what the sweeper finds wrong with a live deployment", async (t) => {
  t.equal(states.verdict(deployment("healthy"), AT, true), undefined);
  t.equal(states.verdict(deployment("healthy"), AT, false), "host_lost");
  for (const s of ["pending", "starting"] as const) {
    t.equal(states.verdict(deployment(s), CREATED + states.START_LIMIT_S, true), undefined, `${s}, within its limit`);
    t.equal(states.verdict(deployment(s), CREATED + states.START_LIMIT_S + 1, true), "start_timeout", s);
    t.equal(states.verdict(deployment(s), CREATED + states.START_LIMIT_S + 1, false), "host_lost", "a lost host comes first");
  }
  t.equal(states.verdict(deployment("healthy"), CREATED + states.START_LIMIT_S + 1, true), undefined, "a healthy one has started");
  for (const s of FINAL) t.equal(states.verdict(deployment(s), CREATED + 10_000, false), undefined, s);
});

t.test("the whole life: started, healthy, restarted, superseded by the next deployment", async (t) => {
  let d = states.start(deployment())!;
  d = states.serve(d, 0, AT)!;
  d = states.restarted(d, 1)!;
  t.equal(states.start(d), undefined, "a healthy deployment does not start again");
  d = states.end(d, states.supersededBy("dep_2"), AT + 60)!;
  t.same([d.status, d.restarts, d.healthy_at, d.ended_at], ["superseded", 1, AT, AT + 60]);
  t.equal(states.end(d, states.placementFailed("host_lost", "gone"), AT + 90), undefined, "the sweeper finds it final");
});
