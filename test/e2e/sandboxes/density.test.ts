// tier: slow (a stack of its own)
import t from "tap";
import { existsSync, readFileSync } from "node:fs";
import { startStack } from "../../harness/stack.js";

// A 2-CPU sandbox host (its CPU set to 2,000 MHz, whatever this machine has) holds 20 idle
// default sandboxes (1,000 MHz, 512 MB and a 512 MB workspace each): CPU is a quota, admitted
// over-committed, not a core each. Memory is the hard limit: offered exactly 20 GiB, the host
// refuses the 21st with a 503 naming it. Each sandbox still has one core's quota.
const COUNT = 20;
const stack = await startStack(t, {
  runners: 0,
  sandboxHosts: 1,
  sandboxHostEnv: { TRIBUTARY_SANDBOX_CPU_MHZ: "2000", TRIBUTARY_SANDBOX_MEMORY_MB: String(COUNT * 1024), TRIBUTARY_SANDBOX_UID_BASE: "250000" },
});
const post = (path: string, body: unknown) => stack.fetch(path, { method: "POST", body: JSON.stringify(body) });
const json = async (res: Response) => (await res.json()) as any;

t.test(`${COUNT} idle default sandboxes on a 2-CPU host, each answering; the next refused for memory`, async (t) => {
  const created = await Promise.all(Array.from({ length: COUNT }, async () => json(await post("/v1/sandboxes", {}))));
  const ids = created.map((s) => s.id as string);
  t.teardown(() => Promise.all(ids.map((id) => stack.fetch(`/v1/sandboxes/${id}`, { method: "DELETE" }))));
  t.same(created.map((s) => s.status), Array(COUNT).fill("running"), "every one runs");
  t.same(created[0].resources, { cpu_mhz: 1000, memory_mb: 512, disk_mb: 512 }, "default sizes");

  const answers = await Promise.all(ids.map(async (id, i) => json(await post(`/v1/sandboxes/${id}/exec`, { command: `echo sandbox ${i}` }))));
  t.same(answers.map((a) => a.stdout), ids.map((_, i) => `sandbox ${i}\n`), "each answers an exec");

  const over = await post("/v1/sandboxes", {});
  t.equal(over.status, 503);
  t.equal((await json(over)).error.message, "Every sandbox host is full (memory: 20.0 of 20.0 GiB reserved, 1.0 GiB asked). Please retry after some sandboxes stop.");

  // One core's quota and weight each (cgroup v1 here; v2 hosts write cpu.max and cpu.weight).
  const cpu = `/sys/fs/cgroup/cpu/tributary-test-${process.pid}/${ids[0]}`;
  if (existsSync(cpu)) {
    t.equal(readFileSync(`${cpu}/cpu.cfs_quota_us`, "utf8").trim(), "100000", "a quota of one core per 100 ms");
    t.equal(readFileSync(`${cpu}/cpu.shares`, "utf8").trim(), "1024", "one core's weight");
  } else t.comment("no cgroup v1 cpu hierarchy here: quota not read");
});
