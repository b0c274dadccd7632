import t from "tap";
import { DEPLOYMENT_STATUSES, deploymentStates as states, type DeploymentInstance, type DeploymentObject, type DeploymentStatus } from "../../modules/apps/mod.js";

// The moves of a deployment's life and of its instances, at their edges: each is a pure function
// of the deployment object (the reconciler, its app hosts and the gateway apply it with a
// compare-and-set), and none moves a final deployment.

const FINAL: readonly DeploymentStatus[] = ["failed", "superseded", "stopped"];
const LIVE: readonly DeploymentStatus[] = ["pending", "starting", "healthy"];
const CREATED = 1_700_000_000;
const AT = CREATED + 40;

const instance = (id: string, status: DeploymentInstance["status"] = "pending", host = "ah1"): DeploymentInstance => ({ id, host, status, started_at: CREATED });

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
    scaling: { min_instances: 1, max_instances: 1, target_inflight: 10 },
    desired_instances: 1,
    instances: [],
    env_names: [],
    secrets: [],
    restarts: 0,
    created_at: CREATED,
    healthy_at: status === "healthy" ? CREATED + 1 : null,
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

t.test("placeInstance: a live deployment gains a pending instance; never twice the same id, never a final one", async (t) => {
  for (const s of LIVE) {
    const next = states.placeInstance(deployment(s, { instances: [instance("ins_a", "healthy")] }), { id: "ins_b", host: "ah2", at: AT });
    t.same(next?.instances, [instance("ins_a", "healthy"), { id: "ins_b", host: "ah2", status: "pending", started_at: AT }], s);
    t.equal(next?.status, s, "the deployment's status is its own");
  }
  t.equal(states.placeInstance(deployment("healthy", { instances: [instance("ins_a")] }), { id: "ins_a", host: "ah2", at: AT }), undefined, "an id already placed");
  for (const s of FINAL) t.equal(states.placeInstance(deployment(s), { id: "ins_b", host: "ah2", at: AT }), undefined, s);
});

t.test("instanceStarting: the instance starts; a pending deployment is starting, a healthy one stays healthy", async (t) => {
  const pending = states.instanceStarting(deployment("pending", { instances: [instance("ins_a")] }), "ins_a");
  t.same([pending?.status, pending?.instances[0]?.status], ["starting", "starting"]);
  const healthy = states.instanceStarting(deployment("healthy", { instances: [instance("ins_a", "healthy"), instance("ins_b", "healthy")] }), "ins_b");
  t.same([healthy?.status, healthy?.instances.map((i) => i.status)], ["healthy", ["healthy", "starting"]], "a restart of one instance: the deployment still serves");
  t.equal(states.instanceStarting(deployment("starting", { instances: [instance("ins_a")] }), "ins_x"), undefined, "an instance its record does not list must not run");
  for (const s of FINAL) t.equal(states.instanceStarting(deployment(s, { instances: [instance("ins_a")] }), "ins_a"), undefined, s);
});

t.test("instanceHealthy: the first answering instance makes the deployment healthy from then; later ones keep that time", async (t) => {
  for (const s of ["pending", "starting"] as const) {
    const next = states.instanceHealthy(deployment(s, { instances: [instance("ins_a", "starting")] }), "ins_a", AT);
    t.same([next?.status, next?.healthy_at, next?.instances[0]?.status], ["healthy", AT, "healthy"], s);
  }
  const again = states.instanceHealthy(deployment("healthy", { healthy_at: CREATED + 5, instances: [instance("ins_a", "healthy"), instance("ins_b", "starting")] }), "ins_b", AT);
  t.same([again?.status, again?.healthy_at, again?.instances.map((i) => i.status)], ["healthy", CREATED + 5, ["healthy", "healthy"]]);
  t.equal(states.instanceHealthy(deployment("healthy", { instances: [] }), "ins_a", AT), undefined, "forgotten meanwhile: not listed, not healthy");
  for (const s of FINAL) t.equal(states.instanceHealthy(deployment(s, { instances: [instance("ins_a")] }), "ins_a", AT), undefined, s);
});

t.test("dropInstance: the instance is no longer placed; the deployment's status is untouched", async (t) => {
  const d = deployment("healthy", { instances: [instance("ins_a", "healthy"), instance("ins_b", "healthy")] });
  const next = states.dropInstance(d, "ins_a");
  t.same([next?.status, next?.instances.map((i) => i.id)], ["healthy", ["ins_b"]]);
  const none = states.dropInstance(next!, "ins_b");
  t.same([none?.status, none?.instances], ["healthy", []], "all lost: still healthy, waiting for its next instance");
  t.equal(states.dropInstance(none!, "ins_b"), undefined, "not listed: nothing to do");
});

t.test("scaleTo: a live deployment's desired count; a final one, the same count, or below zero is no move", async (t) => {
  for (const s of LIVE) t.equal(states.scaleTo(deployment(s), 3)?.desired_instances, 3, s);
  t.equal(states.scaleTo(deployment("healthy"), 0)?.desired_instances, 0, "scaled to zero");
  t.equal(states.scaleTo(deployment("healthy"), 1), undefined, "unchanged");
  t.equal(states.scaleTo(deployment("healthy"), -1), undefined);
  for (const s of FINAL) t.equal(states.scaleTo(deployment(s), 3), undefined, s);
});

t.test("restarted: adds to a live deployment's count of restarts", async (t) => {
  for (const s of LIVE) t.same([states.restarted(deployment(s, { restarts: 2 }), 3)?.restarts, states.restarted(deployment(s), 3)?.status], [5, s], s);
  t.equal(states.restarted(deployment("healthy"), 0), undefined, "none to add");
  for (const s of FINAL) t.equal(states.restarted(deployment(s), 3), undefined, s);
});

t.test("end: each ending from each live state, with no instance placed after it", async (t) => {
  const logs = ["Traceback (most recent call last):", "ValueError: no"];
  const placed = { instances: [instance("ins_a", "healthy")] };
  for (const from of LIVE) {
    const failed = states.end(deployment(from, placed), states.appFailed("crash_loop", "it kept crashing"), AT, logs);
    t.same([failed?.status, failed?.reason, failed?.message, failed?.ended_at, failed?.last_logs, failed?.instances], ["failed", "crash_loop", "it kept crashing", AT, logs, []], `${from}: its own failure`);
    const late = states.end(deployment(from, placed), states.startTimedOut(), AT);
    t.same([late?.status, late?.reason, late?.last_logs], ["failed", "start_timeout", []], `${from}: never answered in time`);
    const stopped = states.end(deployment(from, placed), states.stoppedBy("user_stop"), AT, logs);
    t.same([stopped?.status, stopped?.reason, stopped?.message, stopped?.last_logs, stopped?.superseded_by, stopped?.instances], ["stopped", "user_stop", null, [], null, []], `${from}: stopped, no logs kept`);
    const superseded = states.end(deployment(from, placed), states.supersededBy("dep_2"), AT, logs);
    t.same([superseded?.status, superseded?.reason, superseded?.message, superseded?.superseded_by, superseded?.last_logs], ["superseded", "superseded", "replaced by dep_2", "dep_2", []]);
  }
  t.same(states.supersededBy(null), { status: "superseded", reason: "superseded", message: null, supersededBy: null });
  t.equal(states.end(deployment("healthy", { superseded_by: "dep_0" }), states.supersededBy(null), AT)?.superseded_by, "dep_0", "an unnamed successor keeps what the record said");
  for (const s of FINAL) {
    t.equal(states.end(deployment(s), states.stoppedBy("user_stop"), AT), undefined, s);
    t.equal(states.end(deployment(s), states.appFailed("crash_loop", null), AT), undefined, s);
  }
});

t.test("startOverdue: a deployment that never answered, past its limit; never one that served or ended", async (t) => {
  for (const s of ["pending", "starting"] as const) {
    t.equal(states.startOverdue(deployment(s), CREATED + states.START_LIMIT_S), false, `${s}, at its limit`);
    t.equal(states.startOverdue(deployment(s), CREATED + states.START_LIMIT_S + 1), true, s);
  }
  t.equal(states.startOverdue(deployment("healthy"), CREATED + states.START_LIMIT_S + 1), false, "it served once: a lost instance is no start timeout");
  t.equal(states.startOverdue(deployment("healthy", { instances: [] }), CREATED + 10 * states.START_LIMIT_S), false, "healthy with nothing running (every host lost) stays so");
  for (const s of FINAL) t.equal(states.startOverdue(deployment(s), CREATED + 10_000), false, s);
});

t.test("the whole life: placed, started, healthy, an instance lost and replaced, restarted, superseded", async (t) => {
  let d = states.placeInstance(deployment(), { id: "ins_a", host: "ah1", at: CREATED })!;
  d = states.instanceStarting(d, "ins_a")!;
  d = states.instanceHealthy(d, "ins_a", AT)!;
  d = states.dropInstance(d, "ins_a")!; // its host was lost
  d = states.placeInstance(d, { id: "ins_b", host: "ah2", at: AT + 10 })!;
  t.same([d.status, d.instances.map((i) => [i.id, i.status])], ["healthy", [["ins_b", "pending"]]], "it keeps serving its address while replaced");
  d = states.instanceHealthy(states.instanceStarting(d, "ins_b")!, "ins_b", AT + 12)!;
  d = states.restarted(d, 1)!;
  d = states.end(d, states.supersededBy("dep_2"), AT + 60)!;
  t.same([d.status, d.restarts, d.healthy_at, d.ended_at, d.instances], ["superseded", 1, AT, AT + 60, []]);
  t.equal(states.placeInstance(d, { id: "ins_c", host: "ah1", at: AT + 90 }), undefined, "a final deployment is placed nowhere");
});
