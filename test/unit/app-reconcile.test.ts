import t from "tap";
import { deploymentStates as states, reconcile, type DeploymentInstance, type DeploymentObject, type DeploymentStatus } from "../../modules/apps/mod.js";

// The reconciler's decisions as pure functions: a deployment's record (what should run, where
// each instance was placed) against the app hosts' heartbeats (which live, what each runs),
// giving the actions; and scaling's recommendation and its scale-down window.

const { decide, recommend, nextDesired } = reconcile;
type HostState = reconcile.HostState;
type Action = reconcile.Action;

const CREATED = 1_700_000_000;
const NOW = CREATED + 100;
const GRACE = 5;
const NEEDS = { cpuMhz: 500, memoryMb: 256, gpus: 0 };

function deployment(status: DeploymentStatus, instances: DeploymentInstance[], desired = 1): DeploymentObject {
  return {
    id: "dep_000000000000000000000001",
    object: "app.deployment",
    status,
    reason: null,
    message: null,
    artifact_id: "art_1",
    sha256: "ab".repeat(32),
    hosted_url: "http://chat.acme.apps.localhost",
    entrypoint: "app:app",
    resources: { cpu_mhz: 500, memory_size_mb: 256, gpu_count: 0 },
    scaling: { min_instances: 1, max_instances: 4, target_inflight: 10 },
    desired_instances: desired,
    instances,
    env_names: [],
    secrets: [],
    restarts: 0,
    created_at: CREATED,
    healthy_at: status === "healthy" ? CREATED + 2 : null,
    ended_at: null,
    replaces: null,
    superseded_by: null,
    last_logs: [],
  };
}

const placed = (id: string, host: string, status: DeploymentInstance["status"] = "healthy", startedAt = CREATED + 1): DeploymentInstance => ({ id, host, status, started_at: startedAt });

/** A live, ready host with `memoryMb` free, running `runs` (instance id → state). */
function host(hostId: string, memoryMb = 2048, runs: Record<string, "starting" | "healthy" | "stopping"> = {}, over: Partial<HostState> = {}): HostState {
  return {
    hostId,
    alive: true,
    draining: false,
    accepting: true,
    free: { cpuMhz: 4000, memoryMb, gpus: 0 },
    instances: new Map(Object.entries(runs).map(([id, state]) => [id, { deploymentId: "dep_000000000000000000000001", state, load: 0 }])),
    ...over,
  };
}

const run = (d: DeploymentObject, hosts: HostState[], over: { now?: number; judgeHosts?: boolean; needs?: typeof NEEDS } = {}): Action[] =>
  decide({ deployment: d, needs: over.needs ?? NEEDS, hosts, now: over.now ?? NOW, judgeHosts: over.judgeHosts ?? true, reportGraceS: GRACE });

t.test("a new deployment: its instance is placed on a live host with room", async (t) => {
  t.same(run(deployment("pending", []), [host("ah1")]), [{ kind: "place", hostId: "ah1" }]);
  t.same(run(deployment("pending", []), [host("ah1", 200), host("ah2", 300)]), [{ kind: "place", hostId: "ah2" }], "the host with room");
  t.same(run(deployment("pending", []), [host("ah1", 200)]), [], "no host has room: nothing yet (it waits, up to its start limit)");
  t.same(run(deployment("pending", []), []), [], "no host at all");
});

t.test("hosts that may not be given an instance: silent, draining, refusing lately, short of a resource", async (t) => {
  const d = deployment("pending", []);
  t.same(run(d, [host("ah1", 4096, {}, { alive: false }), host("ah2", 1024)]), [{ kind: "place", hostId: "ah2" }], "not a silent host, however much it has");
  t.same(run(d, [host("ah1", 4096, {}, { draining: true }), host("ah2", 1024)]), [{ kind: "place", hostId: "ah2" }], "not a draining host");
  t.same(run(d, [host("ah1", 4096, {}, { accepting: false }), host("ah2", 1024)]), [{ kind: "place", hostId: "ah2" }], "not a host that refused lately");
  t.same(run(d, [host("ah1", 4096, {}, { free: { cpuMhz: 499, memoryMb: 4096, gpus: 0 } })]), [], "short of CPU");
  t.same(run(d, [host("ah1"), host("ah2", 1024, {}, { free: { cpuMhz: 4000, memoryMb: 1024, gpus: 1 } })], { needs: { ...NEEDS, gpus: 1 } }), [{ kind: "place", hostId: "ah2" }], "the host with the GPU");
});

t.test("instances spread: each new one goes where the deployment has fewest, then where most memory is free", async (t) => {
  t.same(run(deployment("pending", [], 2), [host("ah1", 4096), host("ah2", 1024)]), [{ kind: "place", hostId: "ah1" }, { kind: "place", hostId: "ah2" }], "one on each, though ah1 has room for both");
  t.same(run(deployment("healthy", [placed("ins_a", "ah1")], 3), [host("ah1", 4096, { ins_a: "healthy" }), host("ah2", 1024)]), [{ kind: "place", hostId: "ah2" }, { kind: "place", hostId: "ah1" }]);
  t.same(run(deployment("pending", [], 3), [host("ah1", 256), host("ah2", 256)]), [{ kind: "place", hostId: "ah1" }, { kind: "place", hostId: "ah2" }], "as many as there is room for");
});

t.test("a lost host: its instances are forgotten and placed on a live host; until the reconciler has listened a host timeout, nothing is judged", async (t) => {
  const d = deployment("healthy", [placed("ins_a", "ah_dead")]);
  const survivor = host("ah2");
  t.same(run(d, [host("ah_dead", 2048, { ins_a: "healthy" }, { alive: false }), survivor]), [{ kind: "forget", instanceId: "ins_a", hostId: "ah_dead", why: "host_lost" }, { kind: "place", hostId: "ah2" }]);
  t.same(run(d, [survivor]), [{ kind: "forget", instanceId: "ins_a", hostId: "ah_dead", why: "host_lost" }, { kind: "place", hostId: "ah2" }], "a host never heard is as lost");
  t.same(run(d, [survivor], { judgeHosts: false }), [], "just started: the host may not have spoken yet");
  // One host, killed and started again: it comes back under a new id and takes the instance back.
  t.same(run(d, [host("ah_restarted")]), [{ kind: "forget", instanceId: "ins_a", hostId: "ah_dead", why: "host_lost" }, { kind: "place", hostId: "ah_restarted" }]);
  t.same(run(d, []), [{ kind: "forget", instanceId: "ins_a", hostId: "ah_dead", why: "host_lost" }], "no host left: forgotten, placed once one comes");
});

t.test("a draining host's instances are replaced elsewhere at once", async (t) => {
  const d = deployment("healthy", [placed("ins_a", "ah1"), placed("ins_b", "ah2")], 2);
  t.same(run(d, [host("ah1", 2048, { ins_a: "healthy" }, { draining: true }), host("ah2", 2048, { ins_b: "healthy" }), host("ah3")]), [
    { kind: "forget", instanceId: "ins_a", hostId: "ah1", why: "host_draining" },
    { kind: "place", hostId: "ah3" },
  ]);
});

t.test("an instance its live host does not run: forgotten after the grace for its start to be reported", async (t) => {
  const d = deployment("healthy", [placed("ins_a", "ah1", "pending", NOW - GRACE)]);
  t.same(run(d, [host("ah1")]), [], "within the grace: its start may not be reported yet");
  const late = deployment("healthy", [placed("ins_a", "ah1", "pending", NOW - GRACE - 1)]);
  t.same(run(late, [host("ah1")]), [{ kind: "forget", instanceId: "ins_a", hostId: "ah1", why: "not_running" }, { kind: "place", hostId: "ah1" }], "its start was lost");
  t.same(run(d, [host("ah1", 2048, { ins_a: "stopping" })]), [{ kind: "forget", instanceId: "ins_a", hostId: "ah1", why: "not_running" }, { kind: "place", hostId: "ah1" }], "its host stops it");
  t.same(run(d, [host("ah1", 2048, { ins_a: "starting" })]), [], "starting: left to start");
});

t.test("more instances than wanted: the surplus retires, those not serving yet first, then the newest", async (t) => {
  const d = deployment("healthy", [placed("ins_old", "ah1", "healthy", CREATED + 1), placed("ins_new", "ah2", "healthy", CREATED + 50), placed("ins_wait", "ah1", "pending", NOW - 1), placed("ins_boot", "ah2", "starting", CREATED + 60)], 1);
  const hosts = [host("ah1", 2048, { ins_old: "healthy" }), host("ah2", 2048, { ins_new: "healthy", ins_boot: "starting" })];
  t.same(run(d, hosts), [
    { kind: "retire", instanceId: "ins_wait", hostId: "ah1" },
    { kind: "retire", instanceId: "ins_boot", hostId: "ah2" },
    { kind: "retire", instanceId: "ins_new", hostId: "ah2" },
  ]);
  t.same(run({ ...d, desired_instances: 0 }, hosts).length, 4, "scaled to zero: every one");
  t.same(run({ ...d, desired_instances: 4 }, hosts), [], "as many as wanted: nothing");
});

t.test("a deployment that never answered fails at its start limit; a final one is left alone", async (t) => {
  t.same(run(deployment("starting", [placed("ins_a", "ah1", "starting")]), [host("ah1", 2048, { ins_a: "starting" })], { now: CREATED + states.START_LIMIT_S + 1 }), [{ kind: "end", why: "start_timeout" }]);
  t.same(run(deployment("healthy", []), [host("ah1")], { now: CREATED + 10 * states.START_LIMIT_S }), [{ kind: "place", hostId: "ah1" }], "one that served is placed again, however long it took");
  for (const s of ["failed", "stopped", "superseded"] as const) t.same(run(deployment(s, []), [host("ah1")]), [], s);
});

t.test("recommend: requests in flight over the target, within min and max; a waiting request wants one", async (t) => {
  const scaling = { min_instances: 1, max_instances: 4, target_inflight: 10 };
  t.equal(recommend(0, false, scaling), 1, "min");
  t.equal(recommend(0.01, false, scaling), 1);
  t.equal(recommend(10, false, scaling), 1, "at the target");
  t.equal(recommend(10.5, false, scaling), 2, "past it");
  t.equal(recommend(20.000000001, false, { ...scaling, target_inflight: 10 }), 2, "float noise is not a request");
  t.equal(recommend(1000, false, scaling), 4, "max");
  const toZero = { ...scaling, min_instances: 0 };
  t.equal(recommend(0, false, toZero), 0, "idle: none");
  t.equal(recommend(0.001, false, toZero), 1, "any request: one");
  t.equal(recommend(0, true, toZero), 1, "a request waits for an instance: one");
});

t.test("nextDesired: up at once; down only to the highest recommendation of the window, once watched that long", async (t) => {
  const W = 60_000;
  const T = 1_000_000;
  t.same(nextDesired(1, 3, [], T, W, T).desired, 3, "up at once, even just watched");
  t.same(nextDesired(3, 1, [], T + W - 1, W, T).desired, 3, "not watched a whole window: no scale-down");
  const history = [{ at: T, instances: 3 }, { at: T + W / 2, instances: 2 }];
  t.same(nextDesired(3, 1, history, T + W - 1, W, T).desired, 3, "within the window of a 3");
  t.same(nextDesired(3, 1, history, T + W, W, T).desired, 2, "the 3 left the window; the 2 has not");
  const later = nextDesired(3, 1, history, T + W + W / 2, W, T);
  t.same([later.desired, later.history], [1, [{ at: T + W + W / 2, instances: 1 }]], "a window of ones: one; older samples dropped");
  t.same(nextDesired(1, 0, [{ at: T, instances: 0 }], T + W, W, T).desired, 0, "scale to zero after a quiet window");
});
