import t from "tap";
import { startProcess, untilReady } from "../harness/processes.js";

// The harness's wait for a process to be ready (startRunner, startGateway, ...) fails promptly and
// says why: the process exited, logged a failure it would only retry, or took too long. Small
// Node scripts stand in for the real processes.

const node = (script: string) => startProcess(process.execPath, ["-e", script], {}, "fake");
const isReady = (r: Record<string, unknown>) => r.msg === "ready";

t.test("ready: resolves with the ready record, the process left running", async (t) => {
  const proc = node(`console.error(JSON.stringify({ msg: "loading" })); console.error(JSON.stringify({ msg: "ready", id: "r1" })); setInterval(() => {}, 1000);`);
  t.teardown(() => proc.kill());
  const rec = await untilReady(proc, "fake", isReady, { timeoutMs: 10_000 });
  t.equal(rec.id, "r1");
  t.equal(proc.child.exitCode, null, "still running");
});

t.test("exits before ready: rejects with its exit code and last lines of output, every one of them", async (t) => {
  // Much output written right before exiting: the child's exit may be seen before the last of it is read.
  const proc = node(`const lines = Array.from({ length: 50000 }, (_, i) => "line " + i); process.stderr.write(lines.join("\\n") + "\\nmodel file not found\\n", () => process.exit(3));`);
  const began = Date.now();
  await t.rejects(untilReady(proc, "fake", isReady, { timeoutMs: 60_000 }), /^fake exited \(code 3\) while waiting for a log line; last output:\n(.|\n)*line 49999\nmodel file not found$/);
  t.ok(Date.now() - began < 10_000, "promptly, not at the timeout");
});

t.test("a failure record: rejects at once with its error, the process killed", async (t) => {
  const proc = node(`console.error(JSON.stringify({ msg: "model load failed; retrying", err: { message: "sha256 mismatch for x.gguf" } })); setInterval(() => {}, 1000);`);
  const began = Date.now();
  await t.rejects(
    untilReady(proc, "fake", isReady, { timeoutMs: 60_000, failed: (r) => r.msg === "model load failed; retrying" }),
    /^fake did not start: "model load failed; retrying" \(sha256 mismatch for x\.gguf\); last output:\n\{"msg":"model load failed; retrying"/,
  );
  t.ok(Date.now() - began < 10_000, "promptly, not at the timeout");
  await proc.exited;
  t.equal(proc.child.signalCode, "SIGKILL", "killed");
});

t.test("not ready in time: rejects after the timeout, the process killed", async (t) => {
  const proc = node(`console.error("still loading"); setInterval(() => {}, 1000);`);
  // Its output is there before the wait starts (a busy machine may take longer than 500 ms to start node).
  await proc.waitForLog((r) => r.msg === "still loading", 30_000);
  await t.rejects(untilReady(proc, "fake", isReady, { timeoutMs: 500 }), /^fake timed out after 500 ms waiting for a log line; last output:\nstill loading$/);
  await proc.exited;
  t.equal(proc.child.signalCode, "SIGKILL", "killed");
});

t.test("a ready record already logged counts", async (t) => {
  const proc = node(`console.error(JSON.stringify({ msg: "ready" })); setInterval(() => {}, 1000);`);
  t.teardown(() => proc.kill());
  await proc.waitForLog(isReady, 10_000);
  t.match(await untilReady(proc, "fake", isReady), { msg: "ready" });
});
