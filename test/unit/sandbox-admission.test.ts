import t from "tap";
import { fromRoom, memoryOf, roomOf, shortage, type HostBudget, type Reserved, type SandboxNeed } from "../../modules/sandboxes/admission.js";
import { cpuControls } from "../../modules/sandboxes/isolation.js";

// What a sandbox host admits: memory (memory_mb + disk_mb) is a hard limit, CPU is over-committed
// by the host's factor, and the uid range bounds the count. The same rule runs on the host and on
// gateways reading its heartbeat, so the heartbeat must carry it without loss.

const DEFAULT: SandboxNeed = { cpu_mhz: 1000, memory_mb: 512, disk_mb: 512 };
const empty: Reserved = { sandboxes: 0, cpuMhz: 0, memoryMb: 0 };

/** Admits `need` until the host refuses: how many it took, and the refusal. */
function fill(budget: HostBudget, need: SandboxNeed) {
  const reserved = { ...empty };
  for (;;) {
    const short = shortage(budget, reserved, need);
    if (short) return { admitted: reserved.sandboxes, short };
    reserved.sandboxes++;
    reserved.cpuMhz += need.cpu_mhz;
    reserved.memoryMb += memoryOf(need);
  }
}

t.test("a 2-CPU host holds dozens of default sandboxes: CPU is over-committed, memory binds", async (t) => {
  const host: HostBudget = { sandboxesMax: 64, cpuMhz: 2000, cpuOvercommit: 16, memoryMb: 20 * 1024 };
  const { admitted, short } = fill(host, DEFAULT);
  t.equal(admitted, 20, "20 default sandboxes (1 GiB each: memory_mb + the workspace's tmpfs)");
  t.same(short, { limit: "memory", detail: "memory: 20.0 of 20.0 GiB reserved, 1.0 GiB asked" });
  t.equal(fill({ ...host, cpuOvercommit: 1 }, DEFAULT).admitted, 2, "without over-commit two fill it, as before");
});

t.test("CPU binds at cores × over-commit, each sandbox's cpu_mhz counted in full", async (t) => {
  const host: HostBudget = { sandboxesMax: 64, cpuMhz: 2000, cpuOvercommit: 16, memoryMb: 64 * 1024 };
  const { admitted, short } = fill(host, DEFAULT);
  t.equal(admitted, 32);
  t.same(short, { limit: "cpu", detail: "cpu: 32,000 of 32,000 MHz committed (2,000 MHz × 16), 1,000 asked" });
  const quarter = fill(host, { cpu_mhz: 250, memory_mb: 256, disk_mb: 256 });
  t.same(quarter, { admitted: 64, short: { limit: "sandboxes", detail: "sandboxes: 64 of 64 running" } }, "quarter-core sandboxes: the uid range binds first");
});

t.test("each limit at its edge: exactly full fits, one more does not", async (t) => {
  const host: HostBudget = { sandboxesMax: 3, cpuMhz: 1000, cpuOvercommit: 2, memoryMb: 1024 };
  t.equal(shortage(host, { sandboxes: 0, cpuMhz: 0, memoryMb: 512 }, { cpu_mhz: 100, memory_mb: 256, disk_mb: 256 }), undefined, "memory to the last MB");
  t.equal(shortage(host, { sandboxes: 0, cpuMhz: 0, memoryMb: 513 }, { cpu_mhz: 100, memory_mb: 256, disk_mb: 256 })?.limit, "memory", "one MB over");
  t.equal(shortage(host, { sandboxes: 0, cpuMhz: 1900, memoryMb: 0 }, { cpu_mhz: 100, memory_mb: 32, disk_mb: 1 }), undefined, "CPU to the last MHz");
  t.equal(shortage(host, { sandboxes: 0, cpuMhz: 1901, memoryMb: 0 }, { cpu_mhz: 100, memory_mb: 32, disk_mb: 1 })?.limit, "cpu", "one MHz over");
  t.equal(shortage(host, { sandboxes: 2, cpuMhz: 0, memoryMb: 0 }, { cpu_mhz: 100, memory_mb: 32, disk_mb: 1 }), undefined);
  t.same(shortage(host, { sandboxes: 3, cpuMhz: 0, memoryMb: 0 }, { cpu_mhz: 100, memory_mb: 32, disk_mb: 1 }), { limit: "sandboxes", detail: "sandboxes: 3 of 3 running" });
  t.equal(shortage(host, { sandboxes: 3, cpuMhz: 2000, memoryMb: 1024 }, { cpu_mhz: 100, memory_mb: 32, disk_mb: 1 })?.limit, "memory", "memory is named first");
  t.equal(shortage(host, empty, { cpu_mhz: 100, memory_mb: 32, disk_mb: 993 })?.limit, "memory", "the workspace counts as memory");
});

t.test("the heartbeat carries budget and reservations without loss; an older host means no over-commit", async (t) => {
  const budget: HostBudget = { sandboxesMax: 64, cpuMhz: 2000, cpuOvercommit: 16, memoryMb: 4096 };
  const reserved: Reserved = { sandboxes: 5, cpuMhz: 4500, memoryMb: 3994 };
  const room = roomOf(budget, reserved);
  t.match(room, { cpu_mhz_total: 2000, cpu_mhz_free: 27_500, memory_mb_free: 102, sandboxes_running: 5 });
  t.same(fromRoom(room), { budget, reserved });
  t.same(shortage(fromRoom(room).budget, fromRoom(room).reserved, DEFAULT), shortage(budget, reserved, DEFAULT), "the same verdict on both sides");
  const { cpu_overcommit: _, ...older } = roomOf({ ...budget, cpuOvercommit: 1 }, { ...reserved, cpuMhz: 1500 });
  t.same(fromRoom(older), { budget: { ...budget, cpuOvercommit: 1 }, reserved: { ...reserved, cpuMhz: 1500 } });
});

t.test("cpu_mhz is a quota and a weight in proportion to it", async (t) => {
  t.same(cpuControls(1000, 1000), { period: 100_000, quota: 100_000, shares: 1024, weight: 100 }, "one core: the kernel's default weight");
  t.same(cpuControls(250, 1000), { period: 100_000, quota: 25_000, shares: 256, weight: 25 });
  t.same(cpuControls(4000, 1000), { period: 100_000, quota: 400_000, shares: 4096, weight: 400 });
  t.match(cpuControls(1, 1000), { quota: 1_000, shares: 2, weight: 1 }, "floors the kernel accepts");
});
