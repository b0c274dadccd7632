// tier: slow (whole stacks through tributary start, one killed with SIGKILL; nothing timed: its waits allow half a minute and more)
import t from "tap";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { ChildProcess } from "node:child_process";
import { testCatalog } from "../../harness/processes.js";
import { freePort } from "../../harness/cluster.js";
import { runCli, spawnCli } from "../../harness/cli.js";

// No orphans: `tributary start` killed with SIGKILL (no handler of its own runs) takes its whole
// process tree with it: nats-server, the runner, the actor host, the sandbox host and its
// bubblewrap sandboxes, the gateway. A second stack on the same home and ports then starts (no
// stale process holds them), and a port held by another process is refused up front, naming it.

interface ProcessEntry {
  pid: number;
  ppid: number;
  /** The kernel's start time of the process (clock ticks since boot): a reused pid has another. */
  startedAt: string;
  state: string;
  command: string;
}

/** /proc/<pid>/stat, or undefined when the process is gone. `comm` may hold spaces and parentheses: the fields after the last ')' are split. */
function processEntry(pid: number): ProcessEntry | undefined {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  } catch {
    return undefined;
  }
  const rest = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  let command = "";
  try {
    command = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").join(" ").trim();
  } catch {}
  return { pid, state: rest[0]!, ppid: Number(rest[1]), startedAt: rest[19]!, command: command || stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")")) };
}

/** Every process below `root`, as /proc shows the tree now. */
function descendants(root: number): ProcessEntry[] {
  const all = readdirSync("/proc").filter((n) => /^\d+$/.test(n)).flatMap((n) => processEntry(Number(n)) ?? []);
  const found: ProcessEntry[] = [];
  const parents = [root];
  while (parents.length > 0) {
    const parent = parents.pop()!;
    for (const p of all) if (p.ppid === parent) {
      found.push(p);
      parents.push(p.pid);
    }
  }
  return found;
}

/** Still running: the same process (same start time), not yet a zombie waiting to be reaped. */
const running = (p: ProcessEntry) => {
  const now = processEntry(p.pid);
  return now !== undefined && now.startedAt === p.startedAt && now.state !== "Z";
};

async function stackEnv() {
  const home = mkdtempSync(join(tmpdir(), "tributary-home-"));
  const env = {
    TRIBUTARY_HOME: home,
    TRIBUTARY_CATALOG: testCatalog,
    TRIBUTARY_PORT: String(await freePort()),
    TRIBUTARY_NATS_PORT: String(await freePort()),
    TRIBUTARY_ADMIN_ADDR: `127.0.0.1:${await freePort()}`,
    NATS_URL: "",
  };
  return { home, env };
}

/** Starts `tributary start` and waits for its banner; resolves with the API key it printed. */
async function startUntilUp(cli: ChildProcess): Promise<string> {
  let stdout = "";
  let stderr = "";
  cli.stderr!.on("data", (d: Buffer) => (stderr = (stderr + d.toString()).slice(-4000)));
  return new Promise((resolve, reject) => {
    cli.stdout!.on("data", (d: Buffer) => {
      stdout += d.toString();
      const key = /Tributary is up: .*API key: (\S+)\)/s.exec(stdout)?.[1];
      if (key) resolve(key);
    });
    cli.once("exit", (code) => reject(new Error(`tributary start exited (${code}) before it was up:\n${stderr}`)));
  });
}

t.test("a supervisor killed with SIGKILL leaves no process behind, and the next one starts on the same ports", async (t) => {
  const { home, env } = await stackEnv();
  t.teardown(() => rmSync(home, { recursive: true, force: true }));
  const cli = spawnCli(["start"], { env, stdio: ["ignore", "pipe", "pipe"] });
  t.teardown(() => cli.kill("SIGKILL"));
  const key = await startUntilUp(cli);
  const gateway = `http://127.0.0.1:${env.TRIBUTARY_PORT}`;

  // A sandbox, so that bubblewrap runs under the sandbox host (which may still be starting).
  let sandbox: { id?: string; status?: string } = {};
  for (let i = 0; i < 300 && sandbox.status !== "running"; i++) {
    const res = await fetch(`${gateway}/v1/sandboxes`, { method: "POST", body: "{}", headers: { authorization: `Bearer ${key}`, "content-type": "application/json" } });
    sandbox = (await res.json()) as typeof sandbox;
    if (sandbox.status !== "running") await new Promise((r) => setTimeout(r, 200));
  }
  t.equal(sandbox.status, "running", `a sandbox runs: ${JSON.stringify(sandbox)}`);

  const tree = descendants(cli.pid!);
  const has = (what: RegExp) => tree.some((p) => what.test(p.command));
  for (const [name, what] of [
    ["nats-server", /nats-server -c /],
    ["the gateway", /dist\/gateway\/main\.js/],
    ["a runner", /dist\/runners\/main\.js/],
    ["the actor host", /dist\/actors\/main\.js/],
    ["the sandbox host", /dist\/sandbox-host\/main\.js/],
    ["bubblewrap", /^bwrap /],
  ] as const)
    t.ok(has(what), `${name} is in the supervisor's tree:\n${tree.map((p) => `${p.pid} ${p.command.slice(0, 120)}`).join("\n")}`);

  const exited = new Promise((resolve) => cli.once("exit", resolve));
  cli.kill("SIGKILL");
  await exited;
  // Each Node child drains for at most 5 s once its parent is gone; nats-server and the sandboxes end at once.
  let left = tree.filter(running);
  for (let i = 0; i < 300 && left.length > 0; i++) {
    await new Promise((r) => setTimeout(r, 100));
    left = left.filter(running);
  }
  t.same(left.map((p) => `${p.pid} ${p.command.slice(0, 120)}`), [], "every process of the tree is gone");

  // The same home and ports: nothing holds them, and the JetStream store left by the kill is taken up.
  const again = spawnCli(["start"], { env, stdio: ["ignore", "pipe", "pipe"] });
  t.teardown(() => again.kill("SIGKILL"));
  await startUntilUp(again);
  const stopped = new Promise<number | null>((resolve) => again.once("exit", (code) => resolve(code)));
  again.kill("SIGTERM");
  t.equal(await stopped, 0, "the second stack started and stopped cleanly");
});

t.test("a port held by another process is refused before anything starts, naming its holder", async (t) => {
  const { home, env } = await stackEnv();
  t.teardown(() => rmSync(home, { recursive: true, force: true }));
  const holder = createServer();
  await new Promise<void>((resolve) => holder.listen(Number(env.TRIBUTARY_PORT), "127.0.0.1", resolve));
  t.teardown(() => holder.close());
  const result = await runCli(["start"], { env, timeoutMs: 60_000 });
  t.equal(result.code, 1, "the supervisor exits 1");
  t.match(result.stderr, new RegExp(`port ${env.TRIBUTARY_PORT} \\(TRIBUTARY_PORT\\) is taken by pid ${process.pid} \\(`), result.stderr.slice(-2000));
  t.notMatch(result.stderr, /nats-server ready/, "not even nats-server was started");
});
