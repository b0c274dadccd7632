// tier: slow (a stack of its own)
import t from "tap";
import { startStack } from "../../harness/stack.js";

// A job whose sandbox finds no room stays queued and its record says why (waiting_reason, naming
// the limit and its figures); once room is made it runs, and the reason is gone. The sandbox host
// offers 1 GiB of memory here, and a sandbox of 768 MB holds most of it.
const stack = await startStack(t, { runners: 0, sandboxHosts: 1, sandboxHostEnv: { TRIBUTARY_SANDBOX_MEMORY_MB: "1024" } });
const post = (path: string, body: unknown) => stack.fetch(path, { method: "POST", body: JSON.stringify(body) });
const json = async (res: Response) => (await res.json()) as any;

/** Polls the job until `done` says so (30 s at most): the job as it then was. */
async function until(id: string, done: (job: any) => boolean): Promise<any> {
  const end = Date.now() + 30_000;
  for (;;) {
    const job = await json(await stack.fetch(`/v1/jobs/${id}`));
    if (done(job) || Date.now() > end) return job;
    await new Promise((r) => setTimeout(r, 200));
  }
}

t.test("a job waiting for memory says so, then runs once there is room", async (t) => {
  const holder = await json(await post("/v1/sandboxes", { cpu_mhz: 100, memory_mb: 512, disk_mb: 256 }));
  t.equal(holder.status, "running");
  const created = await json(await post("/v1/jobs", { command: "echo ran", cpu_mhz: 100, memory_mb: 256, disk_mb: 64 }));
  t.match(created, { status: "queued", waiting_reason: null }, "no reason before a worker tried");

  const waiting = await until(created.id, (job) => job.waiting_reason !== null);
  t.equal(waiting.status, "queued");
  t.equal(waiting.waiting_reason, "every sandbox host is full (memory: 0.8 of 1.0 GiB reserved, 0.3 GiB asked)");
  const listed = await json(await stack.fetch("/v1/jobs?status=queued"));
  t.equal(listed.data.find((j: { id: string }) => j.id === created.id)?.waiting_reason, waiting.waiting_reason, "listed with its reason");

  await post(`/v1/sandboxes/${holder.id}/stop`, {});
  const done = await until(created.id, (job) => job.status === "succeeded" || job.status === "failed");
  t.match(done, { status: "succeeded", waiting_reason: null });
  t.equal(await (await stack.fetch(`/v1/jobs/${created.id}/logs`)).text(), "ran\n");
});
