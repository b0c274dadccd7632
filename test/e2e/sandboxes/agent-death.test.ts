import t, { type Test } from "tap";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { randomBytes } from "node:crypto";
import { sharedStack } from "../../harness/shared-stack.js";

// The in-sandbox agent is how the host reaches a sandbox: when it dies, the sandbox fails at once
// (status failed, its record saying how), and every later call is a 409 sandbox_failed naming
// that, instead of a call left to time out (503) on an agent that will never answer. An agent that
// cannot go on ends itself rather than linger half alive; a command killed by a real-time signal
// no longer takes the agent's I/O thread down with it (which left every later exec unanswered).
const stack = await sharedStack(t);
const post = (path: string, body: unknown) => stack.fetch(path, { method: "POST", body: JSON.stringify(body) });
const json = async (res: Response) => (await res.json()) as any;
const small = { cpu_mhz: 250, memory_mb: 64, disk_mb: 8 };

/** A running sandbox, and a file of its workspace that no other sandbox holds (how its agent is found from here). */
async function sandboxWithMarker(t: Test): Promise<{ id: string; marker: string }> {
  const sandbox = await json(await post("/v1/sandboxes", small));
  t.equal(sandbox.status, "running");
  t.teardown(() => stack.fetch(`/v1/sandboxes/${sandbox.id}`, { method: "DELETE" }));
  const marker = `marker-${randomBytes(8).toString("hex")}`;
  t.equal((await stack.fetch(`/v1/sandboxes/${sandbox.id}/files?path=${marker}`, { method: "POST", body: "x" })).status, 200);
  return { id: sandbox.id, marker };
}

/**
 * The host pid of the sandbox's agent: the process that is pid 2 of its pid namespace (bwrap's
 * init is pid 1) and sees the marker in its /workspace.
 */
function agentPid(marker: string): number | undefined {
  for (const pid of readdirSync("/proc").filter((p) => /^\d+$/.test(p))) {
    try {
      const status = readFileSync(`/proc/${pid}/status`, "utf8");
      if (!/^Name:\s+python3$/m.test(status) || !/^NSpid:\s+\d+\s+2$/m.test(status)) continue;
      if (existsSync(`/proc/${pid}/root/workspace/${marker}`)) return Number(pid);
    } catch {
      // gone meanwhile, or not ours to read
    }
  }
  return undefined;
}

t.test("an agent killed from outside: the next calls fail with sandbox_failed naming it", async (t) => {
  const { id, marker } = await sandboxWithMarker(t);
  const pid = agentPid(marker);
  t.ok(pid, "the agent is found from the host");
  process.kill(pid!, "SIGKILL");

  const exec = await post(`/v1/sandboxes/${id}/exec`, { command: "echo hello" });
  t.equal(exec.status, 409, "a conflict, not a call left to time out");
  const { error } = await json(exec);
  t.equal(error.code, "sandbox_failed");
  t.equal(error.param, "sandbox_id");
  t.match(error.message, `The sandbox ${id} failed: the sandbox's agent was killed by SIGKILL.`);

  const read = await stack.fetch(`/v1/sandboxes/${id}/files/content?path=${marker}`);
  t.equal(read.status, 409);
  t.equal((await json(read)).error.code, "sandbox_failed", "file calls too");
  t.match(await json(await stack.fetch(`/v1/sandboxes/${id}`)), { status: "failed", termination_reason: "error", error: "the sandbox's agent was killed by SIGKILL" });
});

t.test("a streamed exec whose agent dies ends with an error event naming it", async (t) => {
  const { id, marker } = await sandboxWithMarker(t);
  const res = await post(`/v1/sandboxes/${id}/exec`, { command: "echo started; sleep 600", stream: true });
  t.equal(res.status, 200);
  const reader = res.body!.getReader();
  let text = "";
  while (!text.includes("started")) text += new TextDecoder().decode((await reader.read()).value);
  process.kill(agentPid(marker)!, "SIGKILL");
  for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read()) text += new TextDecoder().decode(chunk.value);
  t.match(text, /event: error\ndata: \{"message":"[^"]*the sandbox's agent was killed by SIGKILL/);
});

t.test("an agent that cannot go on ends itself, and its sandbox fails saying so", async (t) => {
  const { id } = await sandboxWithMarker(t);
  // SIGINT raises in the agent's main loop: it exits rather than answer nothing from then on.
  const exec = await post(`/v1/sandboxes/${id}/exec`, { command: "kill -INT 2; sleep 600" });
  t.equal(exec.status, 409);
  t.equal((await json(exec)).error.code, "sandbox_failed");
  // The call is answered as the agent ends; the record's write follows it (at most a few seconds).
  let record = await json(await stack.fetch(`/v1/sandboxes/${id}`));
  for (let tries = 0; record.status === "running" && tries < 50; tries++) {
    await new Promise((r) => setTimeout(r, 100));
    record = await json(await stack.fetch(`/v1/sandboxes/${id}`));
  }
  t.match(record, { status: "failed", error: "the sandbox's agent failed (an internal error) and exited" });
});

t.test("a command killed by a real-time signal: its exec reports it, and the next exec runs", async (t) => {
  const { id } = await sandboxWithMarker(t);
  const killed = await json(await post(`/v1/sandboxes/${id}/exec`, { command: "kill -35 $$" }));
  t.match(killed, { exit_code: null, signal: "SIGRTMIN+1" });
  const next = await post(`/v1/sandboxes/${id}/exec`, { command: "echo still here", timeout_seconds: 5 });
  t.equal(next.status, 200);
  t.equal((await json(next)).stdout, "still here\n");
});
