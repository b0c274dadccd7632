// tier: serial (50 sandboxes at once, and a killed host whose processes must be gone within seconds)
import t from "tap";
import { readdirSync, readFileSync } from "node:fs";
import { startStack } from "../../harness/stack.js";

// A sandbox host killed with SIGKILL: its sandboxes end as failed (host_lost) through the actor
// host's sweeper, and none of their processes survive it (bwrap's --die-with-parent). Before
// that, 50 abandoned sandboxes are reaped at their deadline.
const UID_BASE = 230_000;
const stack = await startStack(t, {
  runners: 0,
  sandboxHosts: 1,
  sandboxHostEnv: { TRIBUTARY_SANDBOX_CPU_MHZ: "8000", TRIBUTARY_SANDBOX_UID_BASE: String(UID_BASE) },
  env: { TRIBUTARY_SANDBOX_HOST_TIMEOUT_MS: "1500" },
  actorsEnv: { TRIBUTARY_SANDBOX_SWEEP_MS: "300" },
});
const post = (path: string, body: unknown) => stack.fetch(path, { method: "POST", body: JSON.stringify(body) });
const json = async (res: Response) => (await res.json()) as any;
const small = { memory_mb: 32, disk_mb: 1, cpu_mhz: 100 };

/** Pids of processes running as one of the sandbox uids of this test's host. */
function sandboxProcesses(): number[] {
  const out: number[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const uid = Number(/^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${name}/status`, "utf8"))![1]);
      if (uid >= UID_BASE && uid < UID_BASE + 64) out.push(Number(name));
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

async function until(check: () => Promise<boolean>, timeoutMs: number): Promise<boolean> {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    if (await check()) return true;
    await new Promise((r) => setTimeout(r, 200));
  }
  return false;
}

t.test("50 abandoned sandboxes are reaped at their deadline", async (t) => {
  // Created ten at a time, as a burst of clients would.
  for (let wave = 0; wave < 5; wave++) {
    const responses = await Promise.all(Array.from({ length: 10 }, () => post("/v1/sandboxes", { ...small, timeout_seconds: 2, metadata: { batch: "abandoned" } })));
    for (const res of responses) t.equal(res.status, 200);
  }
  const reaped = await until(async () => {
    const list = await json(await stack.fetch("/v1/sandboxes?metadata[batch]=abandoned&limit=100"));
    return list.data.length === 50 && list.data.every((s: { status: string }) => s.status === "stopped");
  }, 20_000);
  t.ok(reaped, "every one stopped");
  const list = await json(await stack.fetch("/v1/sandboxes?metadata[batch]=abandoned&limit=100"));
  t.ok(list.data.every((s: { termination_reason: string }) => s.termination_reason === "timeout"), "as timeout");
  t.ok(await until(async () => sandboxProcesses().length === 0, 5_000), "no process of theirs is left");
});

t.test("kill -9 of the host: host_lost, and no process survives", async (t) => {
  const a = await json(await post("/v1/sandboxes", small));
  const b = await json(await post("/v1/sandboxes", small));
  await post(`/v1/sandboxes/${a.id}/exec`, { command: "sleep 1000 > /dev/null 2>&1 &" });
  t.ok(sandboxProcesses().length > 0, "the sandboxes run");
  await stack.sandboxHosts[0]!.kill();
  t.ok(await until(async () => sandboxProcesses().length === 0, 5_000), "nothing of theirs runs after the host died");
  const lost = await until(async () => {
    const [ra, rb] = await Promise.all([json(await stack.fetch(`/v1/sandboxes/${a.id}`)), json(await stack.fetch(`/v1/sandboxes/${b.id}`))]);
    return ra.termination_reason === "host_lost" && rb.termination_reason === "host_lost";
  }, 10_000);
  t.ok(lost, "both ended as host_lost");
  t.match(await json(await stack.fetch(`/v1/sandboxes/${a.id}`)), { status: "failed", termination_reason: "host_lost" });
  const none = await post("/v1/sandboxes", small);
  t.equal(none.status, 503, "no host: a retryable 503");
});
