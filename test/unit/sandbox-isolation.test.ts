import t from "tap";
import { mkdtempSync, readFileSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DEFAULT_EGRESS_DENY, detectCgroups, parseCidrList, parseExec, parseSandboxCreate } from "../../modules/sandboxes/mod.js";
import { sandboxCommand } from "../../modules/sandboxes/isolation.js";
import { describeEnd } from "../../modules/sandboxes/sandbox-process.js";

// The walls a sandbox's command line puts up, the cgroup detection on fake hierarchies, and the
// request bounds that need no running host.

/** The `param` of the error `fn` throws (undefined when it does not throw). */
function paramOf(fn: () => unknown): string | null | undefined {
  try {
    fn();
    return undefined;
  } catch (err) {
    return (err as { param?: string | null }).param;
  }
}

const options = { bwrap: "bwrap", python: "/usr/bin/python3", perSandboxUid: true };
const limits = { memoryMb: 64, diskMb: 8, cpuMhz: 500, pids: 256, openFiles: 1024 };

t.test("the command line: namespaces, read-only system, limits, its own uid", async (t) => {
  const argv = sandboxCommand(options, limits, 200_007, "agent");
  const line = argv.join(" ");
  for (const flag of ["--unshare-all", "--unshare-user", "--new-session", "--die-with-parent", "--disable-userns", "--clearenv", "--remount-ro /"])
    t.ok(line.includes(flag), flag);
  t.notOk(argv.includes("--share-net"), "never the host's network");
  t.ok(line.includes("--ro-bind /usr /usr"), "/usr read-only");
  t.notOk(/--(?:ro-)?bind \/(?:etc|home|root|var|run|proc|sys)(?:\s|$)/.test(line), "no host /etc, /home, /root, /var, /run, /proc or /sys");
  t.ok(line.includes(`--size ${8 * 1024 * 1024} --perms 0700 --tmpfs /workspace`), "the workspace is a tmpfs of disk_mb");
  t.ok(line.includes("--nproc=256") && line.includes("--nofile=1024") && line.includes(`--fsize=${8 * 1024 * 1024}`) && line.includes("--core=0"), "prlimit");
  t.ok(line.includes("--reuid=200007 --regid=200007 --clear-groups --inh-caps=-all --bounding-set=-all --no-new-privs"), "setpriv to its uid");
  t.equal(argv[0], "prlimit");
  t.notOk(sandboxCommand(options, limits, undefined, "agent").join(" ").includes("--reuid"), "no uid change without a uid");
});

t.test("cgroups: v1, v2 and none, detected from the hierarchy", async (t) => {
  const none = mkdtempSync(join(tmpdir(), "cg-none-"));
  t.equal(detectCgroups("x", none).version, "none");
  const v1 = mkdtempSync(join(tmpdir(), "cg-v1-"));
  const { mkdirSync, writeFileSync } = await import("node:fs");
  mkdirSync(join(v1, "memory"));
  writeFileSync(join(v1, "memory", "memory.limit_in_bytes"), "max");
  t.match(detectCgroups("tributary-x", v1), { version: 1, parent: "tributary-x" });
  t.ok(existsSync(join(v1, "pids", "tributary-x")), "a parent group per controller");
  const own = /^0::(.*)$/m.exec(readFileSync("/proc/self/cgroup", "utf8"))?.[1];
  t.comment(`this machine: ${own === undefined ? "cgroup v1" : "cgroup v2"}`);
});

t.test("create: defaults, and bounds at their edges", async (t) => {
  const bounds = { maxCpuMhz: 4000, maxMemoryMb: 1024, maxDiskMb: 512 };
  t.match(parseSandboxCreate({}, bounds), { timeout_seconds: 300, idle_timeout_seconds: null, cpu_mhz: 1000, memory_mb: 512, disk_mb: 512, network: "none" });
  t.equal(parseSandboxCreate({ timeout_seconds: 86_400 }, bounds).timeout_seconds, 86_400);
  t.equal(paramOf(() => parseSandboxCreate({ timeout_seconds: 86_401 }, bounds)), "timeout_seconds");
  t.equal(parseSandboxCreate({ disk_mb: 512 }, bounds).disk_mb, 512);
  t.equal(paramOf(() => parseSandboxCreate({ disk_mb: 513 }, bounds)), "disk_mb");
  t.equal(paramOf(() => parseSandboxCreate({ cpu_mhz: 4001 }, bounds)), "cpu_mhz");
  t.equal(paramOf(() => parseSandboxCreate({ secrets: Array.from({ length: 33 }, (_, i) => `S${i}`) }, bounds)), "secrets");
  t.equal(parseSandboxCreate({ secrets: Array.from({ length: 32 }, (_, i) => `S${i}`) }, bounds).secrets.length, 32);
  t.equal(paramOf(() => parseSandboxCreate({ secrets: ["A", "A"] }, bounds)), "secrets");
  t.equal(paramOf(() => parseSandboxCreate({ env: { A: "x".repeat(32 * 1024 + 1) } }, bounds)), "env.A");
  t.equal(parseSandboxCreate({ env: { A: "x".repeat(32 * 1024) } }, bounds).env.A!.length, 32 * 1024);
  t.equal(paramOf(() => parseSandboxCreate({ network: "host" }, bounds)), "network");
  t.equal(parseSandboxCreate({ network: "egress" }, bounds).network, "egress");
  t.equal(parseSandboxCreate({ network: null }, bounds).network, "none");
  t.equal(paramOf(() => parseSandboxCreate({ network: "EGRESS" }, bounds)), "network");
  t.equal(paramOf(() => parseSandboxCreate({ network: ["egress"] }, bounds)), "network");
  t.same(parseSandboxCreate({ metadata: { ["k".repeat(64)]: "v".repeat(512) } }, bounds).metadata, { ["k".repeat(64)]: "v".repeat(512) });
  t.equal(paramOf(() => parseSandboxCreate({ metadata: { ["k".repeat(65)]: "v" } }, bounds)), "metadata", "a key past 64 characters is refused, not dropped");
  t.equal(paramOf(() => parseSandboxCreate({ metadata: { a: "v".repeat(513) } }, bounds)), "metadata.a");
});

t.test("exec: a shell string, an argv, and bounds", async (t) => {
  t.same(parseExec({ command: "echo hi" }).argv, ["/bin/sh", "-c", "echo hi"]);
  t.same(parseExec({ command: ["ls", "-l"] }).argv, ["ls", "-l"]);
  t.equal(parseExec({ command: "x", stdin: "y".repeat(1024 * 1024) }).stdin.length, 1024 * 1024);
  t.equal(paramOf(() => parseExec({ command: "x", stdin: "y".repeat(1024 * 1024 + 1) })), "stdin");
  t.equal(paramOf(() => parseExec({ command: ["a\u0000b"] })), "command");
  t.equal(paramOf(() => parseExec({ command: "x", cwd: "x".repeat(4097) })), "cwd");
  t.equal(parseExec({ command: "x", cwd: "x".repeat(4096) }).cwd.length, 4096);
});

t.test("mounts: a read-only input directory, and egress's resolv.conf and pid report", async (t) => {
  const plain = sandboxCommand(options, limits, 200_007, "agent").join(" ");
  t.notOk(plain.includes("--info-fd") || plain.includes("/workspace/input") || plain.includes("resolv.conf"), "nothing extra by default");
  const argv = sandboxCommand(options, limits, 200_007, "agent", { inputDir: "/var/tmp/h/sbx/input", egressResolvConf: "/var/tmp/h/resolv.conf", reportPid: true });
  const line = argv.join(" ");
  t.ok(line.includes("--ro-bind /var/tmp/h/sbx/input /workspace/input"), "inputs bound read-only");
  t.ok(line.indexOf("--tmpfs /workspace") < line.indexOf("/workspace/input"), "after the workspace's tmpfs (else the tmpfs would hide them)");
  t.ok(line.indexOf("/workspace/input") < line.indexOf("--remount-ro /"));
  t.ok(line.includes("--ro-bind /var/tmp/h/resolv.conf /etc/resolv.conf --info-fd 3"), "egress: its resolver, and the pid the network stack attaches to");
  t.notOk(argv.includes("--share-net"), "still its own network namespace");
});

t.test("egress deny lists: IPv4 CIDRs only, bare addresses are /32s", async (t) => {
  t.same(parseCidrList("10.0.0.0/8, 192.0.2.7 0.0.0.0/0,255.255.255.255/32"), ["10.0.0.0/8", "192.0.2.7/32", "0.0.0.0/0", "255.255.255.255/32"]);
  t.same(parseCidrList(""), []);
  t.same(parseCidrList("10.1.2.3/8,192.0.2.255/25"), ["10.0.0.0/8", "192.0.2.128/25"], "host bits cleared");
  for (const bad of ["10.0.0.0/33", "256.0.0.0/8", "10.0.0/8", "fd00::/8", "example.com", "10.0.0.0/-1"]) t.throws(() => parseCidrList(bad), { message: /not an IPv4 CIDR/ }, bad);
  t.same(parseCidrList(DEFAULT_EGRESS_DENY.join(",")), DEFAULT_EGRESS_DENY, "the built-in list parses");
  for (const range of ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16", "127.0.0.0/8", "100.64.0.0/10"]) t.ok(DEFAULT_EGRESS_DENY.includes(range), range);
});

t.test("a host removes the work directories of hosts that died without removing them", async (t) => {
  const { removeStaleWorkDirs, WORK_DIR_PREFIX } = await import("../../modules/sandboxes/host.js");
  const { mkdirSync, writeFileSync } = await import("node:fs");
  const { spawnSync } = await import("node:child_process");
  const parent = mkdtempSync(join(tmpdir(), "work-"));
  const deadPid = spawnSync("sh", ["-c", "echo $$"], { encoding: "utf8" }).stdout.trim();
  for (const [name, pid] of [["dead", deadPid], ["alive", String(process.pid)], ["own", String(process.pid)]] as const) {
    mkdirSync(join(parent, WORK_DIR_PREFIX + name, "sbx", "input"), { recursive: true });
    writeFileSync(join(parent, WORK_DIR_PREFIX + name, "pid"), pid);
  }
  mkdirSync(join(parent, "unrelated"));
  removeStaleWorkDirs(parent, WORK_DIR_PREFIX + "own");
  t.notOk(existsSync(join(parent, WORK_DIR_PREFIX + "dead")), "a dead host's directory (its inputs) is removed");
  t.ok(existsSync(join(parent, WORK_DIR_PREFIX + "alive")), "a live host's stays");
  t.ok(existsSync(join(parent, "unrelated")), "other directories stay");
});

t.test("the in-sandbox agent (agent.py) is read from the source tree and compiles under Debian's python3", async (t) => {
  const { AGENT_PATH, AGENT_SOURCE } = await import("../../modules/sandboxes/agent-source.js");
  t.match(AGENT_SOURCE, /^import base64, json, os, selectors, signal, sys, threading, time$/m);
  const { execFileSync } = await import("node:child_process");
  // compile() only: nothing of it runs, and no .pyc lands beside the source.
  t.doesNotThrow(() => execFileSync("/usr/bin/python3", ["-I", "-S", "-c", "import sys; compile(open(sys.argv[1]).read(), sys.argv[1], 'exec')", AGENT_PATH.pathname], { stdio: "pipe" }));
});

t.test("how a sandbox's processes ended, from the exit of its bwrap", async (t) => {
  t.equal(describeEnd(137, null), "the sandbox's agent was killed by SIGKILL", "bwrap exits 128 + N when its agent was killed by signal N");
  t.equal(describeEnd(143, null), "the sandbox's agent was killed by SIGTERM");
  t.equal(describeEnd(70, null), "the sandbox's agent failed (an internal error) and exited", "the agent's own code for giving up");
  t.equal(describeEnd(3, null), "the sandbox's agent exited with code 3");
  t.equal(describeEnd(0, null), "the sandbox's agent exited with code 0");
  t.equal(describeEnd(null, "SIGKILL"), "the sandbox's processes were killed by SIGKILL", "bwrap itself killed");
});
