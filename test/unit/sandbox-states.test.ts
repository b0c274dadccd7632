import t from "tap";
import { SANDBOX_STATUSES, sandboxStates as states, type SandboxObject, type SandboxStatus } from "../../modules/sandboxes/mod.js";

// The moves of a sandbox's life at their edges: each is a pure function of the sandbox object
// (the gateway, its host and the sweeper apply it with a compare-and-set), and none moves a
// final sandbox.

const FINAL: readonly SandboxStatus[] = ["stopped", "failed"];
const LIVE: readonly SandboxStatus[] = ["starting", "running", "stopping"];
const CREATED = 1_700_000_000;
const AT = CREATED + 30;

function sandbox(status: SandboxStatus = "starting", fields: Partial<SandboxObject> = {}): SandboxObject {
  return {
    id: "sbx_000000000000000000000001",
    object: "sandbox",
    status,
    termination_reason: null,
    error: null,
    created_at: CREATED,
    started_at: null,
    expires_at: CREATED + 300,
    stopped_at: null,
    timeout_seconds: 300,
    idle_timeout_seconds: null,
    network: "none",
    resources: { cpu_mhz: 1000, memory_mb: 256, disk_mb: 256 },
    metadata: {},
    env_names: [],
    secrets: [],
    ...fields,
  };
}

t.test("isFinal: stopped and failed, nothing else", async (t) => {
  for (const s of SANDBOX_STATUSES) t.equal(states.isFinal(s), FINAL.includes(s), s);
});

t.test("start: a starting sandbox runs; from no other state", async (t) => {
  const next = states.start(sandbox("starting"), AT);
  t.equal(next?.status, "running");
  t.equal(next?.started_at, AT);
  t.equal(next?.id, "sbx_000000000000000000000001", "the rest of the object is kept");
  for (const s of SANDBOX_STATUSES.filter((s) => s !== "starting")) t.equal(states.start(sandbox(s), AT), undefined, s);
});

t.test("stopping: a starting or running sandbox is being stopped; a stopping or final one stays", async (t) => {
  for (const s of ["starting", "running"] as const) t.equal(states.stopping(sandbox(s))?.status, "stopping", s);
  for (const s of ["stopping", ...FINAL] as const) t.equal(states.stopping(sandbox(s)), undefined, s);
});

t.test("end: a failure reason ends a live sandbox as failed, any other as stopped; a final one stays", async (t) => {
  const failures = new Set(["oom", "host_lost", "error"]);
  for (const from of LIVE) {
    for (const reason of ["user_stop", "deleted", "timeout", "idle", "oom", "host_lost", "error"] as const) {
      const next = states.end(sandbox(from), reason, AT);
      t.equal(next?.status, failures.has(reason) ? "failed" : "stopped", `${from}, ${reason}`);
      t.equal(next?.termination_reason, reason);
      t.equal(next?.stopped_at, AT);
    }
  }
  t.equal(states.end(sandbox("running"), "error", AT, "the sandbox did not start")?.error, "the sandbox did not start");
  t.equal(states.end(sandbox("running", { error: "earlier" }), "timeout", AT)?.error, "earlier", "without words, its error is kept");
  for (const s of FINAL) t.equal(states.end(sandbox(s), "user_stop", AT), undefined, s);
});

t.test("extend: a live sandbox's deadline moves, its timeout counted from its creation; a final one stays", async (t) => {
  for (const s of LIVE) {
    const next = states.extend(sandbox(s), CREATED + 900);
    t.equal(next?.expires_at, CREATED + 900, s);
    t.equal(next?.timeout_seconds, 900);
    t.equal(next?.status, s);
  }
  for (const s of FINAL) t.equal(states.extend(sandbox(s), CREATED + 900), undefined, s);
});

t.test("verdict: what the sweeper finds wrong with a live sandbox", async (t) => {
  t.equal(states.verdict(sandbox("running"), AT, true), undefined, "nothing");
  t.equal(states.verdict(sandbox("running"), AT, false), "host_lost");
  t.equal(states.verdict(sandbox("starting"), CREATED + states.START_LIMIT_S, true), undefined, "starting, within its limit");
  t.equal(states.verdict(sandbox("starting"), CREATED + states.START_LIMIT_S + 1, true), "stuck");
  t.equal(states.verdict(sandbox("starting"), CREATED + states.START_LIMIT_S + 1, false), "host_lost", "a lost host comes first");
  const expiresAt = CREATED + 300;
  t.equal(states.verdict(sandbox("running"), expiresAt + states.EXPIRY_GRACE_S, true), undefined, "within its grace");
  t.equal(states.verdict(sandbox("running"), expiresAt + states.EXPIRY_GRACE_S + 1, true), "expired");
  t.equal(states.verdict(sandbox("stopping"), expiresAt + states.EXPIRY_GRACE_S + 1, true), "expired");
});

t.test("the whole life: started, stopped by its user, ended by its host", async (t) => {
  let s = states.start(sandbox(), AT)!;
  s = states.stopping(s)!;
  t.equal(states.start(s, AT), undefined, "a stopping sandbox does not start again");
  s = states.end(s, "user_stop", AT + 5)!;
  t.same([s.status, s.termination_reason, s.started_at, s.stopped_at], ["stopped", "user_stop", AT, AT + 5]);
  t.equal(states.end(s, "host_lost", AT + 9), undefined, "a later end (the sweeper, a lost host) changes nothing");
});
