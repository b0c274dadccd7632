// Whether a sandbox host can take one more sandbox: one pure rule, applied by the host itself
// (authoritative, on create) and by gateways and job workers placing from heartbeats.
//
// Memory is a hard limit: a sandbox reserves `memory_mb + disk_mb` (its workspace is a tmpfs, so
// what it writes there is RAM charged to its cgroup), and the reservations never add up to more
// than the host offers, so no sandbox is killed for another's use. Processes are bounded by the
// host's uid range. CPU is not reserved: a sandbox's `cpu_mhz` is its quota (the most it may use)
// and its weight (its share when the host is busy), so the host admits `cpu_mhz` up to its CPU
// times an over-commit factor: idle sandboxes, the common case, cost no CPU.

/** What a host offers sandboxes. */
export interface HostBudget {
  /** Sandboxes at once (the size of its uid range). */
  sandboxesMax: number;
  /** Its CPU in MHz-like units (cores × core MHz): the ceiling of any one sandbox's quota. */
  cpuMhz: number;
  /** How many times its CPU the `cpu_mhz` of its sandboxes may add up to. */
  cpuOvercommit: number;
  /** Memory for sandboxes' `memory_mb + disk_mb`. */
  memoryMb: number;
}

/** What the sandboxes a host runs (starting ones included) hold of its budget. */
export interface Reserved {
  sandboxes: number;
  cpuMhz: number;
  memoryMb: number;
}

/** What one sandbox asks for (the create request's fields). */
export interface SandboxNeed {
  cpu_mhz: number;
  memory_mb: number;
  disk_mb: number;
}

/** Memory a sandbox reserves: its processes' and its workspace's (a tmpfs). */
export const memoryOf = (need: SandboxNeed) => need.memory_mb + need.disk_mb;

/** The sum of `cpu_mhz` a host admits. */
export const cpuAdmissible = (budget: HostBudget) => budget.cpuMhz * budget.cpuOvercommit;

export interface Shortage {
  limit: "memory" | "cpu" | "sandboxes";
  /** In words, with the figures: "memory: 3.9 of 4.0 GiB reserved, 1.0 GiB asked". */
  detail: string;
}

const gib = (mb: number) => (mb / 1024).toFixed(1);
const mhz = (n: number) => Math.round(n).toLocaleString("en-US");

/** Why the host cannot take the sandbox now (memory first: the limit that never bends), or undefined when it can. */
export function shortage(budget: HostBudget, reserved: Reserved, need: SandboxNeed): Shortage | undefined {
  if (reserved.memoryMb + memoryOf(need) > budget.memoryMb)
    return { limit: "memory", detail: `memory: ${gib(reserved.memoryMb)} of ${gib(budget.memoryMb)} GiB reserved, ${gib(memoryOf(need))} GiB asked` };
  if (reserved.cpuMhz + need.cpu_mhz > cpuAdmissible(budget))
    return {
      limit: "cpu",
      detail: `cpu: ${mhz(reserved.cpuMhz)} of ${mhz(cpuAdmissible(budget))} MHz committed (${mhz(budget.cpuMhz)} MHz × ${budget.cpuOvercommit}), ${mhz(need.cpu_mhz)} asked`,
    };
  if (reserved.sandboxes + 1 > budget.sandboxesMax) return { limit: "sandboxes", detail: `sandboxes: ${reserved.sandboxes} of ${budget.sandboxesMax} running` };
  return undefined;
}

/** The capacity fields of a host's heartbeat (protocol.ts): its budget, and what is free of it. */
export interface HeartbeatRoom {
  sandboxes_running: number;
  sandboxes_max: number;
  cpu_mhz_total: number;
  cpu_mhz_free: number;
  cpu_overcommit?: number;
  memory_mb_total: number;
  memory_mb_free: number;
}

/** What a host announces of its budget and reservations. */
export function roomOf(budget: HostBudget, reserved: Reserved): HeartbeatRoom {
  return {
    sandboxes_running: reserved.sandboxes,
    sandboxes_max: budget.sandboxesMax,
    cpu_mhz_total: budget.cpuMhz,
    cpu_mhz_free: cpuAdmissible(budget) - reserved.cpuMhz,
    cpu_overcommit: budget.cpuOvercommit,
    memory_mb_total: budget.memoryMb,
    memory_mb_free: budget.memoryMb - reserved.memoryMb,
  };
}

/** A host's budget and reservations read back from its heartbeat (an older host sends no over-commit: 1). */
export function fromRoom(room: HeartbeatRoom): { budget: HostBudget; reserved: Reserved } {
  const budget = { sandboxesMax: room.sandboxes_max, cpuMhz: room.cpu_mhz_total, cpuOvercommit: room.cpu_overcommit ?? 1, memoryMb: room.memory_mb_total };
  return { budget, reserved: { sandboxes: room.sandboxes_running, cpuMhz: cpuAdmissible(budget) - room.cpu_mhz_free, memoryMb: room.memory_mb_total - room.memory_mb_free } };
}
