// tier: serial (fork, memory and CPU bombs)
import t from "tap";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { startStack } from "../../harness/stack.js";

// Escape attempts from inside a sandbox, each contained, with the host still answering after.
const stack = await startStack(t, { runners: 0, sandboxHosts: 1 });
const post = (path: string, body: unknown) => stack.fetch(path, { method: "POST", body: JSON.stringify(body) });
const json = async (res: Response) => (await res.json()) as any;
const natsPort = new URL(stack.nats.url).port;
const run = async (id: string, command: string, timeout_seconds = 20) => json(await post(`/v1/sandboxes/${id}/exec`, { command, timeout_seconds }));

const sandbox = await json(await post("/v1/sandboxes", { memory_mb: 256, disk_mb: 8 }));
t.equal(sandbox.status, "running");

t.test("the host's processes are invisible, and cannot be signalled", async (t) => {
  const ps = await run(sandbox.id, "ls /proc | grep '^[0-9]' | sort -n | tr '\\n' ' '");
  t.ok(ps.stdout.trim().split(" ").every((p: string) => Number(p) < 100), `only the sandbox's own pids: ${ps.stdout}`);
  const kill = await run(sandbox.id, `kill -9 ${stack.sandboxHosts[0]!.child.pid} ${process.pid} 2>&1; echo rc=$?`);
  t.match(kill.stdout, /rc=1/, "no such process from inside");
  t.equal(stack.sandboxHosts[0]!.child.exitCode, null, "the host lives");
  const environ = await run(sandbox.id, "cat /proc/1/environ | tr '\\0' '\\n'");
  t.notMatch(environ.stdout, /NATS_URL|TRIBUTARY/, "pid 1 inside is the sandbox's own, with no platform environment");
});

t.test("the system is read-only and private files are absent", async (t) => {
  const writes = await run(sandbox.id, "for f in /usr/x /etc/x /bin/x /x; do touch $f 2>/dev/null && echo wrote $f; done; echo done");
  t.equal(writes.stdout, "done\n", `nothing outside /workspace and /tmp is writable: ${JSON.stringify(writes)}`);
  const shadow = await run(sandbox.id, "cat /etc/shadow /etc/passwd 2>&1; ls /root /home 2>&1; echo $HOME");
  t.notMatch(shadow.stdout, /root:/, "no /etc/shadow or passwd");
  t.match(shadow.stdout, /\/workspace/);
  const tmp = await run(sandbox.id, "touch /tmp/mine && ls /tmp");
  t.equal(tmp.stdout, "mine\n", "a private /tmp");
  const id = await run(sandbox.id, "id -u; cat /proc/self/uid_map");
  t.match(id.stdout, /^1000\n\s+1000\s+\d+\s+1\n$/, "uid 1000 inside, one uid mapped");
});

t.test("no network: not the internet, not NATS, not the gateway", async (t) => {
  const script = `import socket\nfor port in (${natsPort}, ${stack.gateway.port}):\n  s = socket.socket()\n  s.settimeout(1)\n  try:\n    s.connect(("127.0.0.1", port)); print("connected", port)\n  except OSError as e:\n    print("refused", port)\nprint(sorted(n for _, n in socket.if_nameindex()))`;
  const net = json(await post(`/v1/sandboxes/${sandbox.id}/exec`, { command: ["/usr/bin/python3", "-c", script] }));
  const out = (await net).stdout;
  t.notMatch(out, /connected/, out);
  t.match(out, /\['lo'\]/, "only a loopback of its own");
  // network: "egress" (outbound through a user-mode stack, never the platform): network.test.ts.
  const refused = await post("/v1/sandboxes", { network: "internet" });
  t.equal(refused.status, 400, "the host's network is never shared: only none or egress");
  t.equal((await json(refused)).error.param, "network");
});

t.test("paths cannot leave /workspace through the file API", async (t) => {
  for (const path of ["../etc/passwd", "/etc/hostname", "/workspace/../../usr/bin/env"]) {
    const res = await stack.fetch(`/v1/sandboxes/${sandbox.id}/files/content?path=${encodeURIComponent(path)}`);
    t.equal(res.status, 400, path);
  }
  await run(sandbox.id, "ln -s /usr/bin/env /workspace/link");
  t.equal((await stack.fetch(`/v1/sandboxes/${sandbox.id}/files/content?path=link`)).status, 400, "a symlink out is refused");
});

t.test("another sandbox's workspace, the platform's home and the terminal are out of reach", async (t) => {
  const other = await json(await post("/v1/sandboxes", { memory_mb: 64, disk_mb: 8 }));
  await run(other.id, "echo private > /workspace/mine.txt");
  const look = await run(sandbox.id, "ls /workspace; find / -name mine.txt 2>/dev/null; echo end");
  t.notMatch(look.stdout, /mine\.txt/, "not visible from another sandbox");
  const home = await run(sandbox.id, `ls ${process.cwd()}/.tributary ${process.cwd()} 2>&1 | head -3; echo end`);
  t.notMatch(home.stdout, /admin-token|secrets-key|api-key|package\.json/, "no $TRIBUTARY_HOME or repository");
  // TIOCSTI pushes characters into a terminal's input: the sandbox has no terminal to push into.
  const sti = await json(await post(`/v1/sandboxes/${sandbox.id}/exec`, { command: ["/usr/bin/python3", "-c", "import fcntl, termios\ntry:\n  fcntl.ioctl(0, termios.TIOCSTI, b'x'); print('injected')\nexcept OSError as e: print('refused', e.errno)"] }));
  t.match(sti.stdout, /^refused/, sti.stdout);
  t.match((await run(sandbox.id, "tty")).stdout, /not a tty/);
});

t.test("a fork bomb is held by the pids limit; the sandbox and host answer after", async (t) => {
  const bomb = await run(sandbox.id, "bomb() { bomb | bomb & }; bomb 2>/dev/null; sleep 10", 3);
  t.equal(bomb.timed_out, true, JSON.stringify(bomb));
  const after = await run(sandbox.id, "echo alive");
  t.equal(after.stdout, "alive\n");
});

t.test("filling the disk stops at the workspace size", async (t) => {
  const fill = await run(sandbox.id, "dd if=/dev/zero of=/workspace/fill bs=1M count=64 2>&1; ls -l /workspace/fill | awk '{print $5}'");
  t.not(fill.exit_code, null);
  t.ok(Number(fill.stdout.trim().split("\n").at(-1)) <= 8 * 1024 * 1024, `at most 8 MB written: ${fill.stdout}`);
  await run(sandbox.id, "rm -f /workspace/fill");
});

t.test("a setuid binary gives no privilege", async (t) => {
  const su = await run(sandbox.id, "ls -l /usr/bin/su /usr/bin/passwd 2>/dev/null | head -1; su -c id root </dev/null 2>&1; id -u");
  t.match(su.stdout, /1000\n$/);
  t.notMatch(su.stdout, /uid=0/);
});

t.test("a CPU burner is held to its quota while a second sandbox runs", async (t) => {
  // The harness names the host's cgroup parent after the test process.
  const cpuDir = (id: string) => join("/sys/fs/cgroup/cpu", `tributary-test-${process.pid}`, id);
  const burner = await json(await post("/v1/sandboxes", { memory_mb: 64, disk_mb: 8, cpu_mhz: 250 }));
  if (!existsSync(cpuDir(burner.id))) {
    t.comment("no cgroup v1 cpu controller here: the quota is not enforced per sandbox (see docs/platform.md)");
    return;
  }
  t.equal(readFileSync(join(cpuDir(burner.id), "cpu.cfs_quota_us"), "utf8").trim(), "25000", "a quarter of a core per 100 ms");
  let burnerDone = false;
  const burn = post(`/v1/sandboxes/${burner.id}/exec`, { command: "timeout 3 sh -c 'while :; do :; done'; true", timeout_seconds: 10 }).then(() => (burnerDone = true));
  const other = await run(sandbox.id, "echo still-served");
  t.equal(other.stdout, "still-served\n");
  t.notOk(burnerDone, "the other sandbox answered while the burner ran");
  await burn;
  const stat = readFileSync(join(cpuDir(burner.id), "cpu.stat"), "utf8");
  t.ok(Number(/nr_throttled (\d+)/.exec(stat)![1]) > 0, `the burner was throttled: ${stat.replace(/\n/g, " ")}`);
});

t.test("a memory bomb ends the sandbox as oom", async (t) => {
  const small = await json(await post("/v1/sandboxes", { memory_mb: 64, disk_mb: 8 }));
  const bomb = await json(await post(`/v1/sandboxes/${small.id}/exec`, { command: ["/usr/bin/python3", "-c", "x = []\nwhile True: x.append(bytearray(8 << 20))"], timeout_seconds: 20 }));
  t.equal(bomb.signal, "SIGKILL", JSON.stringify(bomb));
  t.equal(bomb.oom_killed, true);
  // The exec's answer comes first; the sandbox's record ends just after.
  let ended = await json(await stack.fetch(`/v1/sandboxes/${small.id}`));
  for (const deadline = Date.now() + 10_000; !["stopped", "failed"].includes(ended.status) && Date.now() < deadline; ) {
    await new Promise((r) => setTimeout(r, 50));
    ended = await json(await stack.fetch(`/v1/sandboxes/${small.id}`));
  }
  t.match(ended, { status: "failed", termination_reason: "oom" });
  const next = await json(await post("/v1/sandboxes", {}));
  t.equal(next.status, "running", "the host still starts sandboxes");
});
