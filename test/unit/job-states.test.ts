import t from "tap";
import { jobStates as states, JOB_STATUSES, type JobObject, type JobStatus } from "../../modules/jobs/mod.js";

// The moves of a job's life at their edges: each is a pure function of the job object (the job
// runner and the cancel route apply it with a compare-and-set), and none moves a final job.

const FINAL: readonly JobStatus[] = ["succeeded", "failed", "cancelled"];
const LIVE: readonly JobStatus[] = ["queued", "running", "cancelling"];
const AT = 1_700_000_100;

function job(status: JobStatus = "queued", fields: Partial<JobObject> = {}): JobObject {
  return {
    id: "job_000000000000000000000001",
    object: "job",
    status,
    command: ["python", "-c", "print(1)"],
    cwd: "/workspace",
    env_names: [],
    secrets: [],
    timeout_seconds: 60,
    max_retries: 1,
    resources: { cpu_mhz: 1000, memory_mb: 256, disk_mb: 256 },
    network: "none",
    metadata: {},
    attempt: 0,
    exit_code: null,
    error: null,
    sandbox_id: null,
    input_files: [],
    output_files: [],
    created_at: 1_700_000_000,
    started_at: null,
    finished_at: null,
    ...fields,
  };
}

const exit = (exit_code: number | null, more: { timed_out?: boolean; oom_killed?: boolean; signal?: string | null } = {}) =>
  ({ t: "exit", exit_code, signal: more.signal ?? null, timed_out: more.timed_out ?? false, truncated: false, oom_killed: more.oom_killed ?? false }) as const;

t.test("isFinal: succeeded, failed and cancelled, nothing else", async (t) => {
  for (const s of JOB_STATUSES) t.equal(states.isFinal(s), FINAL.includes(s), s);
});

t.test("deliver: run the next attempt, stop a cancelled job, fail one whose attempts are used up, skip a final one", async (t) => {
  t.same(states.deliver(job("queued"), false), { kind: "run", attempt: 1 });
  t.same(states.deliver(job("running", { attempt: 1 }), false), { kind: "run", attempt: 2 }, "a redelivery after its worker died is the next attempt");
  t.same(states.deliver(job("running", { attempt: 2, max_retries: 1 }), false), { kind: "fail", error: { code: "attempts_exhausted", message: "The job failed 2 times." } });
  t.same(states.deliver(job("cancelling"), false), { kind: "cancel" });
  t.same(states.deliver(job("queued"), true), { kind: "cancel" }, "a cancel signal came before the run");
  for (const s of FINAL) t.same(states.deliver(job(s), true), { kind: "over" }, s);
});

t.test("start: a queued or running job runs attempt n in its sandbox; no other", async (t) => {
  const next = states.start(job("queued"), 1, "sbx_1", AT);
  t.equal(next?.status, "running");
  t.equal(next?.attempt, 1);
  t.equal(next?.sandbox_id, "sbx_1");
  t.equal(next?.started_at, AT);
  t.equal(states.start(job("running", { attempt: 1, started_at: AT - 60 }), 2, "sbx_2", AT)?.started_at, AT - 60, "started_at is the first start");
  for (const s of ["cancelling", ...FINAL] as const) t.equal(states.start(job(s), 1, "sbx_1", AT), undefined, s);
});

t.test("waiting: a queued job says why it waits; every move out of queued clears it", async (t) => {
  const full = "every sandbox host is full (memory: 3.9 of 4.0 GiB reserved, 1.0 GiB asked)";
  const waiting = states.waiting(job("queued"), full);
  t.equal(waiting?.waiting_reason, full);
  t.equal(waiting?.status, "queued");
  t.equal(states.waiting(waiting!, full), undefined, "the same reason again writes nothing");
  t.equal(states.waiting(waiting!, "no sandbox host is running")?.waiting_reason, "no sandbox host is running", "a new reason replaces it");
  for (const s of [...FINAL, "running", "cancelling"] as const) t.equal(states.waiting(job(s), full), undefined, `not from ${s}`);
  t.equal(states.start(waiting!, 1, "sbx_1", AT)?.waiting_reason, null, "start clears it");
  t.equal(states.cancel(waiting!, AT)?.waiting_reason, null, "cancel clears it");
  t.equal(states.fail(waiting!, { code: "invalid_job", message: "gone" }, AT)?.waiting_reason, null, "fail clears it");
  t.equal(states.stopped(waiting!, AT)?.waiting_reason, null, "stopped clears it");
});

t.test("runEnd: what the last exec event says", async (t) => {
  t.same(states.runEnd(exit(0), 60), { kind: "succeeded" });
  t.same(states.runEnd(exit(3), 60), { kind: "failed", error: { code: "exit_code", message: "The command exited with code 3." }, exitCode: 3, retryable: true });
  t.same(states.runEnd(exit(null, { signal: "SIGKILL", oom_killed: true }), 60), { kind: "failed", error: { code: "oom", message: "The command was killed by SIGKILL (out of memory)." }, exitCode: null, retryable: true });
  t.same(states.runEnd(exit(null), 60), { kind: "failed", error: { code: "exit_code", message: "The command was killed by a signal." }, exitCode: null, retryable: true });
  t.same(states.runEnd(exit(null, { timed_out: true }), 60), { kind: "failed", error: { code: "timeout", message: "The command ran past its timeout of 60 s." }, exitCode: null, retryable: false }, "a timeout is not retried");
  t.same(states.runEnd({ t: "error", message: "lost" }, 60), states.hostLost("The sandbox ended while the command ran."));
  t.equal(states.runEnd({ t: "stdout", d: "" }, 60), undefined, "not an end");
});

t.test("runEnded: success, a failure for good, or another attempt while retries are left", async (t) => {
  const succeeded = states.runEnded(job("running", { attempt: 1, error: { code: "exit_code", message: "earlier" } }), 1, { kind: "succeeded" }, AT);
  t.same([succeeded?.status, succeeded?.exit_code, succeeded?.error, succeeded?.finished_at], ["succeeded", 0, null, AT]);
  const failure = states.runEnd(exit(2), 60)!;
  const again = states.runEnded(job("running", { attempt: 1, max_retries: 1 }), 1, failure, AT);
  t.same([again?.status, again?.exit_code, again?.error?.code, again?.finished_at], ["queued", 2, "exit_code", null], "retries left: queued again, the failure on it");
  t.equal(states.triesAgain(job("running"), 1, failure), true);
  const last = states.runEnded(job("running", { attempt: 2, max_retries: 1 }), 2, failure, AT);
  t.same([last?.status, last?.exit_code, last?.error?.code, last?.finished_at], ["failed", 2, "exit_code", AT], "no retries left: it fails");
  t.equal(states.triesAgain(job("running"), 2, failure), false);
  const timeout = states.runEnd(exit(null, { timed_out: true }), 60)!;
  t.equal(states.runEnded(job("running", { attempt: 1, max_retries: 5 }), 1, timeout, AT)?.status, "failed", "a timeout fails at once");
  t.equal(states.triesAgain(job("running", { max_retries: 5 }), 1, timeout), false);
  t.equal(states.runEnded(job("cancelling", { attempt: 1 }), 1, failure, AT), undefined, "a job cancelling meanwhile is not queued again");
  t.equal(states.runEnded(job("cancelling", { attempt: 1 }), 1, { kind: "succeeded" }, AT)?.status, "succeeded", "a run that ended before its cancel came ends as it ended");
  for (const s of FINAL) {
    t.equal(states.runEnded(job(s), 1, { kind: "succeeded" }, AT), undefined, s);
    t.equal(states.runEnded(job(s), 1, failure, AT), undefined, s);
  }
});

t.test("keepsOutputs: the run that ends the job keeps what it left, unless it timed out or lost its sandbox", async (t) => {
  const failure = states.runEnd(exit(1), 60)!;
  t.equal(states.keepsOutputs(job(), 1, { kind: "succeeded" }), true);
  t.equal(states.keepsOutputs(job("running", { max_retries: 0 }), 1, failure), true, "failed on its last attempt");
  t.equal(states.keepsOutputs(job("running", { max_retries: 1 }), 1, failure), false, "another attempt follows");
  t.equal(states.keepsOutputs(job("running", { max_retries: 0 }), 1, states.runEnd(exit(null, { oom_killed: true }), 60)!), true);
  t.equal(states.keepsOutputs(job("running", { max_retries: 0 }), 1, states.runEnd(exit(null, { timed_out: true }), 60)!), false);
  t.equal(states.keepsOutputs(job("running", { max_retries: 0 }), 1, states.hostLost("gone")), false);
});

t.test("withOutputs: on a live job only", async (t) => {
  for (const s of LIVE) t.same(states.withOutputs(job(s), ["file-a"])?.output_files, ["file-a"], s);
  for (const s of FINAL) t.equal(states.withOutputs(job(s), ["file-a"]), undefined, s);
});

t.test("fail: a live job fails with the error, its last exit code kept", async (t) => {
  const error = { code: "invalid_job", message: "The input file file-x no longer exists." };
  for (const s of LIVE) {
    const next = states.fail(job(s, { exit_code: 3 }), error, AT);
    t.same([next?.status, next?.error, next?.exit_code, next?.finished_at], ["failed", error, 3, AT], s);
  }
  for (const s of FINAL) t.equal(states.fail(job(s), error, AT), undefined, s);
});

t.test("stopped: a live job its worker saw cancelled ends cancelled, its error cleared", async (t) => {
  for (const s of LIVE) {
    const next = states.stopped(job(s, { error: { code: "exit_code", message: "earlier" } }), AT);
    t.same([next?.status, next?.error, next?.finished_at], ["cancelled", null, AT], s);
  }
  for (const s of FINAL) t.equal(states.stopped(job(s), AT), undefined, s);
});

t.test("cancel: a queued job is cancelled at once, a running one goes cancelling; nothing else moves", async (t) => {
  const queued = states.cancel(job("queued", { error: { code: "exit_code", message: "earlier" } }), AT);
  t.same([queued?.status, queued?.finished_at, queued?.error?.code], ["cancelled", AT, "exit_code"]);
  const running = states.cancel(job("running"), AT);
  t.same([running?.status, running?.finished_at], ["cancelling", null]);
  for (const s of ["cancelling", ...FINAL] as const) t.equal(states.cancel(job(s), AT), undefined, s);
});

t.test("the whole life: a failed attempt, a retry, cancelled while running, stopped by its worker", async (t) => {
  let j = job();
  const d = states.deliver(j, false);
  if (d.kind !== "run") return t.fail(d.kind);
  j = states.start(j, d.attempt, "sbx_1", AT)!;
  j = states.runEnded(j, d.attempt, states.runEnd(exit(1), 60)!, AT)!;
  t.equal(j.status, "queued");
  const again = states.deliver(j, false);
  t.same(again, { kind: "run", attempt: 2 });
  j = states.start(j, 2, "sbx_2", AT)!;
  j = states.cancel(j, AT)!;
  t.equal(j.status, "cancelling");
  t.same(states.deliver(j, false), { kind: "cancel" });
  j = states.stopped(j, AT)!;
  t.equal(j.status, "cancelled");
  t.same(states.deliver(j, false), { kind: "over" });
});
