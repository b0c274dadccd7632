// tier: slow (a stack of its own)
import t from "tap";
import { startStack } from "../../harness/stack.js";

// The per-project job bound (TRIBUTARY_JOB_MAX_PER_PROJECT, here 3) is exact under parallel
// creates: with 2 jobs present, of 5 creates sent at once exactly one is made and the others are
// refused with 400 too_many_jobs naming the limit. No sandbox host: the jobs stay queued, saying so.
const MAX_JOBS = 3;
const stack = await startStack(t, { runners: 0, sandboxHosts: 0, gatewayEnv: { TRIBUTARY_JOB_MAX_PER_PROJECT: String(MAX_JOBS) } });
const create = () => stack.fetch("/v1/jobs", { method: "POST", body: JSON.stringify({ command: ["true"], cpu_mhz: 100, memory_mb: 64 }) });

t.test("parallel creates at the edge: exactly one gets the last place", async (t) => {
  for (let i = 0; i < MAX_JOBS - 1; i++) t.equal((await create()).status, 200, `job ${i + 1}: made`);
  // Five connections open and kept alive first, so the five creates reach the gateway together.
  await Promise.all(Array.from({ length: 5 }, async () => (await stack.fetch("/v1/jobs?limit=1")).arrayBuffer()));
  const answers = await Promise.all(Array.from({ length: 5 }, async () => {
    const res = await create();
    return { status: res.status, body: (await res.json()) as { id?: string; error?: { code: string; message: string } } };
  }));
  t.equal(answers.filter((a) => a.status === 200).length, 1, "one create made the last job");
  for (const a of answers.filter((a) => a.status !== 200)) {
    t.equal(a.status, 400);
    t.equal(a.body.error?.code, "too_many_jobs");
    t.match(a.body.error?.message, `the most is ${MAX_JOBS}`, "the refusal names the limit");
  }
  const listed = (await (await stack.fetch("/v1/jobs?limit=100")).json()) as { data: unknown[] };
  t.equal(listed.data.length, MAX_JOBS, "the project holds exactly the bound");
});

t.test("with no sandbox host, a queued job says why it waits", async (t) => {
  const listed = (await (await stack.fetch("/v1/jobs?limit=1")).json()) as { data: Array<{ id: string }> };
  const id = listed.data[0]!.id;
  const read = async () => (await (await stack.fetch(`/v1/jobs/${id}`)).json()) as { status: string; waiting_reason: string | null };
  let job = await read();
  for (const end = Date.now() + 30_000; !job.waiting_reason && Date.now() < end; job = await read()) await new Promise((r) => setTimeout(r, 200));
  t.match(job, { status: "queued", waiting_reason: "no sandbox host is running" });
});
