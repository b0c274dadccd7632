// tier: slow (a stack of its own)
import t from "tap";
import { startStack } from "../../harness/stack.js";

// A sandbox host killed with SIGKILL mid-job: the job goes to another host as its next attempt,
// and ends in exactly one final state.
const stack = await startStack(t, { runners: 0, sandboxHosts: 2, env: { TRIBUTARY_SANDBOX_HOST_TIMEOUT_MS: "1500" }, actorsEnv: { TRIBUTARY_SANDBOX_SWEEP_MS: "300" } });
const post = (path: string, body: unknown) => stack.fetch(path, { method: "POST", body: JSON.stringify(body) });
const json = async (res: Response) => (await res.json()) as any;

t.test("retry after a kill -9 of the job's host", async (t) => {
  const created = await json(await post("/v1/jobs", { command: "echo start; sleep 2; echo finished", max_retries: 2, memory_mb: 64, disk_mb: 8 }));
  let job: any;
  for (let i = 0; i < 100; i++) {
    job = await json(await stack.fetch(`/v1/jobs/${created.id}`));
    if (job.status === "running" && job.sandbox_id) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  const host = stack.sandboxHosts.find((h) => h.logs.some((r) => r.msg === "sandbox started" && r.sandboxId === job.sandbox_id));
  t.ok(host, "the job's host is known");
  // Mid-job: once the first attempt's command has written its first line.
  for (let i = 0; i < 100 && (await (await stack.fetch(`/v1/jobs/${created.id}/logs`)).text()) !== "start\n"; i++)
    await new Promise((r) => setTimeout(r, 50));
  await host!.kill();
  let done: any;
  for (let i = 0; i < 150; i++) {
    done = await json(await stack.fetch(`/v1/jobs/${created.id}`));
    if (["succeeded", "failed", "cancelled"].includes(done.status)) break;
    await new Promise((r) => setTimeout(r, 200));
  }
  t.match(done, { status: "succeeded", attempt: 2, exit_code: 0 });
  t.not(done.sandbox_id, job.sandbox_id, "in another sandbox");
  t.match(await json(await stack.fetch(`/v1/sandboxes/${job.sandbox_id}`)), { status: "failed", termination_reason: "host_lost" });
  const logs = await (await stack.fetch(`/v1/jobs/${created.id}/logs`)).text();
  t.equal(logs, "start\nstart\nfinished\n", "the lost attempt's output, then the whole second run");
});
