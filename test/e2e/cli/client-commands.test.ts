// tier: slow (some 55 cold starts of the command line, and jobs run to their end)
import t from "tap";
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createConnection } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { cliPath, runCli, runCliInProcess, type CliResult } from "../../harness/cli.js";
import { freePort } from "../../harness/cluster.js";
import { childEnv } from "../../harness/processes.js";
import { sharedStack } from "../../harness/shared-stack.js";

// The tributary commands as a person and a script use them: strict arguments for every command
// (an unknown option exits 2, --help exits 0 and does nothing else), and sandbox, jobs, secrets
// and apps against a real stack, which they find from flags, the environment or TRIBUTARY_HOME.

const stack = await sharedStack(t);
const home = mkdtempSync(join(tmpdir(), "tributary-cli-home-"));
t.teardown(() => rmSync(home, { recursive: true, force: true }));
/** This stack, through the environment; OPENAI_API_KEY is unset ("" reads as unset), as in most shells. */
const env = { TRIBUTARY_HOME: home, TRIBUTARY_URL: stack.gateway.url, TRIBUTARY_API_KEY: stack.key, OPENAI_API_KEY: "" };
const cli = (args: string[], options: { input?: string; env?: NodeJS.ProcessEnv } = {}) => runCli(args, { input: options.input, env: { ...env, ...options.env } });
const SECRET_VALUE = "s3cr3t from the cli";

/** What a test prints when an exit code is not the expected one. */
const output = (r: CliResult) => ({ stdout: r.stdout.slice(-2000), stderr: r.stderr.slice(-2000) });

/** Whether something accepts connections on `port` of the loopback. */
const listening = (port: number) =>
  new Promise<boolean>((resolve) => {
    const socket = createConnection({ host: "127.0.0.1", port }, () => {
      socket.destroy();
      resolve(true);
    });
    socket.on("error", () => resolve(false));
  });

/** One command of each group (the groups' actions share one parser). */
const COMMANDS = [["start"], ["gateway"], ["runner"], ["actors"], ["sandbox-host"], ["nats-auth-k8s"], ["admin"], ["deploy"], ["sandbox", "exec"], ["jobs", "create"], ["secrets", "set"], ["apps", "list"]];

t.test("every command: an unknown option is a usage error naming it (exit 2); --help prints usage (exit 0)", async (t) => {
  // In this process: each is a parse and nothing more (the commands below run as processes).
  const runs = COMMANDS.flatMap((command) => [
    { command, kind: "unknown", args: [...command, "--no-such-flag"] },
    { command, kind: "help", args: [...command, "--help"] },
  ]);
  const results: Array<{ command: string[]; kind: string; r: CliResult }> = [];
  for (const run of runs) results.push({ ...run, r: await runCliInProcess(run.args) });
  t.equal(results.length, COMMANDS.length * 2);
  for (const { command, kind, r } of results) {
    const name = `tributary ${command.join(" ")}`;
    if (kind === "unknown") {
      t.equal(r.code, 2, `${name} --no-such-flag exits 2`, output(r));
      t.ok(r.stderr.split("\n")[0]!.startsWith(`${name}: unknown option --no-such-flag`), `${name}: the message names it`, { found: r.stderr.split("\n")[0] });
      t.match(r.stderr, /\nusage: tributary /, `${name}: usage follows`);
      t.equal(r.stdout, "");
    } else {
      t.equal(r.code, 0, `${name} --help exits 0`, output(r));
      t.match(r.stdout, new RegExp(`^usage: tributary ${command[0]}`), `${name} --help prints its usage`);
      t.equal(r.stderr, "");
    }
  }
});

t.test("start --help and start with a bad flag start nothing and make no files", async (t) => {
  const port = await freePort();
  const fresh = join(home, "never-made");
  const [help, bad, badPort] = await Promise.all([
    cli(["start", "--port", String(port), "--help"], { env: { TRIBUTARY_HOME: fresh } }),
    cli(["start", "--port", String(port), "--no-such-flag"], { env: { TRIBUTARY_HOME: fresh } }),
    cli(["start", "--port", "65536"], { env: { TRIBUTARY_HOME: fresh } }),
  ]);
  t.equal(help.code, 0, "help", output(help));
  t.equal(bad.code, 2, "bad flag", output(bad));
  t.equal(badPort.code, 2);
  t.equal(badPort.stderr, "tributary start: --port: expected an integer from 0 to 65535, got '65536'\n");
  t.notOk(existsSync(fresh), "no TRIBUTARY_HOME was made");
  t.notOk(await listening(port), "nothing listens on the port");
});

t.test("commands and actions that do not exist exit 2", async (t) => {
  const [command, action, none] = await Promise.all([cli(["no-such-command"]), cli(["sandbox", "no-such-action"]), cli(["jobs"])]);
  t.equal(command.code, 2);
  t.match(command.stderr, /^tributary: unknown command 'no-such-command'\n/);
  t.equal(action.code, 2);
  t.match(action.stderr, /^tributary sandbox: unknown action 'no-such-action' \(create, list, exec, shell, stop, rm\)\n/);
  t.equal(none.code, 2);
  t.match(none.stderr, /^tributary jobs: missing action/);
});

t.test("secrets: set from stdin (twice: a new version), list, rm; the value is never printed", async (t) => {
  const set = await cli(["secrets", "set", "CLI_TOKEN"], { input: `${SECRET_VALUE}\n` });
  t.equal(set.code, 0, "set", output(set));
  t.equal(set.stdout, "CLI_TOKEN set (version 1)\n");
  const again = await cli(["secrets", "set", "CLI_TOKEN", "--json"], { input: SECRET_VALUE });
  t.equal(again.code, 0, "set again", output(again));
  t.match(JSON.parse(again.stdout), { name: "CLI_TOKEN", version: 2 });
  const [list, json, empty, badName] = await Promise.all([
    cli(["secrets", "list"]),
    cli(["secrets", "list", "--json"]),
    cli(["secrets", "set", "EMPTY"], { input: "" }),
    cli(["secrets", "set", "lower-case"], { input: "x" }),
  ]);
  t.equal(list.code, 0);
  t.match(list.stdout, /^NAME +VERSION +CREATED +UPDATED\nCLI_TOKEN +2 +\d{4}-/);
  t.match(JSON.parse(json.stdout), { object: "list", data: [{ name: "CLI_TOKEN", version: 2 }] });
  t.equal(empty.code, 2, "an empty value is refused");
  t.match(empty.stderr, /the value is empty/);
  t.equal(badName.code, 1, "the API's refusal");
  t.match(badName.stderr, /^error: .*secret names are 1-128 characters/);
  for (const r of [set, again, list, json, empty, badName]) t.notMatch(r.stdout + r.stderr, "s3cr3t", "the value is not printed");
});

t.test("secrets set on a terminal: a prompt, and nothing of the value echoed", async (t) => {
  // python3's pty: the CLI runs on a real pseudo-terminal; what the terminal shows comes back.
  const script = `
import os, pty, sys
pid, fd = pty.fork()
if pid == 0:
    os.execvpe(sys.argv[1], sys.argv[1:], os.environ)
seen = b""
while b"value of" not in seen:
    seen += os.read(fd, 1024)
os.write(fd, sys.stdin.buffer.read() + b"\\r")
while True:
    try:
        chunk = os.read(fd, 1024)
    except OSError:
        break
    if not chunk:
        break
    seen += chunk
sys.stdout.buffer.write(seen)
sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
`;
  const child = spawn("/usr/bin/python3", ["-c", script, process.execPath, cliPath, "secrets", "set", "TTY_TOKEN"], { env: childEnv(env) });
  child.stdin.end("typed-on-a-terminal");
  let screen = "";
  child.stdout.on("data", (d: Buffer) => (screen += d.toString()));
  const code = await new Promise<number | null>((resolve) => child.on("close", resolve));
  t.equal(code, 0, screen);
  t.match(screen, /value of TTY_TOKEN: /, "the prompt");
  t.match(screen, /TTY_TOKEN set \(version 1\)/);
  t.notMatch(screen, "typed-on-a-terminal", "the typed value is not echoed");
  // It arrived whole: a sandbox gets it as a variable.
  const sandbox = await cli(["sandbox", "create", "--secret", "TTY_TOKEN", "--memory-mb", "64", "--disk-mb", "8"]);
  t.equal(sandbox.code, 0, output(sandbox));
  const exec = await cli(["sandbox", "exec", sandbox.stdout.trim(), "printenv TTY_TOKEN"]);
  t.equal(exec.stdout, "typed-on-a-terminal\n");
  await cli(["sandbox", "rm", sandbox.stdout.trim()]);
});

t.test("sandbox: create, exec (output as it comes, the exit code), list, stop, rm; then the secret's rm", async (t) => {
  const created = await cli(["sandbox", "create", "--secret", "CLI_TOKEN", "--env", "GREETING=hello there", "--metadata", "made-by=cli", "--memory-mb", "64", "--disk-mb", "8"]);
  t.equal(created.code, 0, "create", output(created));
  t.match(created.stdout, /^sbx_[0-9A-Za-z]{24}\n$/, "prints the id alone");
  const id = created.stdout.trim();
  const [argv, shell, json, list, listJson] = await Promise.all([
    cli(["sandbox", "exec", id, "--", "sh", "-c", "echo out; echo err >&2; exit 3"]),
    cli(["sandbox", "exec", id, 'echo "$GREETING" | tr a-z A-Z; printenv CLI_TOKEN']),
    cli(["sandbox", "exec", id, "--json", "--", "printf", "%s", "x"]),
    cli(["sandbox", "list"]),
    cli(["sandbox", "list", "--json", "--status", "running"]),
  ]);
  t.equal(argv.code, 3, "the command's exit code", output(argv));
  t.equal(argv.stdout, "out\n");
  t.equal(argv.stderr, "err\n");
  t.equal(shell.code, 0, output(shell));
  t.equal(shell.stdout, `HELLO THERE\n${SECRET_VALUE}\n`, "one word runs in /bin/sh; env and the secret (piped, its line end dropped) are there");
  t.match(JSON.parse(json.stdout), { object: "sandbox.exec_result", exit_code: 0, stdout: "x" });
  t.equal(list.code, 0);
  t.match(list.stdout, /^ID +STATUS +CREATED +EXPIRES +NETWORK +CPU MHZ +MEMORY MB\n/);
  t.match(list.stdout, new RegExp(`\\n${id} +running +\\S+ +\\S+ +none +\\d+ +64\\n`));
  t.match(JSON.parse(listJson.stdout).data, [{ id, status: "running", metadata: { "made-by": "cli" } }]);

  const stopped = await cli(["sandbox", "stop", id]);
  t.equal(stopped.stdout, `${id} stopped\n`, output(stopped));
  const removed = await cli(["sandbox", "rm", id]);
  t.equal(removed.stdout, `${id} removed\n`, output(removed));
  const gone = await cli(["sandbox", "exec", id, "true"]);
  t.equal(gone.code, 1);
  t.match(gone.stderr, /^error: No such sandbox/);
  const [rm, rmAgain] = [await cli(["secrets", "rm", "CLI_TOKEN"]), await cli(["secrets", "rm", "CLI_TOKEN"])];
  t.equal(rm.stdout, "CLI_TOKEN removed\n", output(rm));
  t.equal(rmAgain.code, 1);
  t.equal(rmAgain.stderr, "error: No such secret: CLI_TOKEN\n");
  const badFlag = await cli(["sandbox", "create", "--memory-mb", "lots"]);
  t.equal(badFlag.code, 2);
  t.equal(badFlag.stderr, "tributary sandbox create: --memory-mb: expected an integer from 1 to 1000000, got 'lots'\n");
});

t.test("jobs: create, logs (stored and followed), list, a failed job, cancel", async (t) => {
  const small = ["--memory-mb", "64", "--disk-mb", "8"];
  const [ok, failing] = await Promise.all([cli(["jobs", "create", ...small, "echo hello from a job; echo to stderr >&2"]), cli(["jobs", "create", ...small, "--", "sh", "-c", "echo oops >&2; exit 4"])]);
  t.match(ok.stdout, /^job_[0-9A-Za-z]{24}\n$/, output(ok));
  t.match(failing.stdout, /^job_[0-9A-Za-z]{24}\n$/, output(failing));
  const [okId, failingId] = [ok.stdout.trim(), failing.stdout.trim()];
  const [followed, followedFailing] = await Promise.all([cli(["jobs", "logs", okId, "--follow"]), cli(["jobs", "logs", failingId, "--follow"])]);
  t.equal(followed.code, 0, "followed to its end: succeeded", output(followed));
  t.equal(followed.stdout, "hello from a job\n");
  t.equal(followed.stderr, "to stderr\n");
  t.equal(followedFailing.code, 1, "a failed job: exit 1", output(followedFailing));
  t.equal(followedFailing.stderr, `oops\ntributary: job ${failingId} failed (exit code 4)\n`);
  const [stored, stdoutOnly, list, listJson] = await Promise.all([
    cli(["jobs", "logs", okId]),
    cli(["jobs", "logs", okId, "--stream", "stdout"]),
    cli(["jobs", "list"]),
    cli(["jobs", "list", "--json", "--status", "failed"]),
  ]);
  t.match(stored.stdout, /hello from a job\n/);
  t.match(stored.stdout, /to stderr\n/);
  t.equal(stdoutOnly.stdout, "hello from a job\n");
  t.match(list.stdout, /^ID +STATUS +EXIT +ATTEMPT +CREATED +FINISHED +COMMAND\n/);
  t.match(list.stdout, new RegExp(`\\n${okId} +succeeded +0 +1 +\\S+ +\\S+ +echo hello from a job; echo to stderr >&2\\n`));
  t.match(list.stdout, new RegExp(`\\n${failingId} +failed +4 +1 `));
  t.match(JSON.parse(listJson.stdout).data, [{ id: failingId, status: "failed", exit_code: 4 }]);

  const long = await cli(["jobs", "create", ...small, "sleep 600"]);
  const cancelled = await cli(["jobs", "cancel", long.stdout.trim()]);
  t.equal(cancelled.code, 0, output(cancelled));
  t.match(cancelled.stdout, new RegExp(`^${long.stdout.trim()} (cancelling|cancelled)\\n$`));
  const unknown = await cli(["jobs", "logs", "job_nope"]);
  t.equal(unknown.code, 1);
  t.match(unknown.stderr, /^error: No such job: job_nope\n$/);
});

t.test("apps: list (none yet: the header), --json, and an unknown deployment", async (t) => {
  const [list, json, logs, stop] = await Promise.all([cli(["apps", "list"]), cli(["apps", "list", "--json"]), cli(["apps", "logs", "dep_nope"]), cli(["apps", "stop", "dep_nope"])]);
  t.equal(list.code, 0, output(list));
  t.equal(list.stdout, "ID  STATUS  ADDRESS  CREATED  RESTARTS\n");
  t.match(JSON.parse(json.stdout), { object: "list", data: [] });
  for (const r of [logs, stop]) {
    t.equal(r.code, 1, output(r));
    t.match(r.stderr, /^error: \S.*\n$/);
  }
});

t.test("where the gateway and the key come from: flags, then the environment, then TRIBUTARY_HOME", async (t) => {
  const closed = `http://127.0.0.1:${await freePort()}`;
  const recorded = mkdtempSync(join(home, "recorded-"));
  writeFileSync(join(recorded, "gateway-url"), stack.gateway.url + "\n");
  writeFileSync(join(recorded, "api-key"), stack.key + "\n");
  const stale = mkdtempSync(join(home, "stale-"));
  writeFileSync(join(stale, "gateway-url"), closed + "\n");
  writeFileSync(join(stale, "api-key"), stack.key + "\n");
  const unset = { TRIBUTARY_URL: "", TRIBUTARY_API_KEY: "", OPENAI_API_KEY: "" };
  const [fromHome, fromFlags, staleHome, openaiKey, noKey, badUrl] = await Promise.all([
    cli(["secrets", "list"], { env: { ...unset, TRIBUTARY_HOME: recorded } }),
    cli(["secrets", "list", "--url", `${stack.gateway.url.replace(/^http:\/\//, "")}/v1/`, "--api-key", stack.key], { env: { TRIBUTARY_URL: closed, TRIBUTARY_API_KEY: "sk-wrong" } }),
    cli(["secrets", "list"], { env: { ...unset, TRIBUTARY_HOME: stale } }),
    cli(["secrets", "list"], { env: { ...unset, TRIBUTARY_HOME: recorded, OPENAI_API_KEY: "sk-meant-for-openai" } }),
    cli(["secrets", "list"], { env: { ...unset, TRIBUTARY_HOME: join(home, "nothing-here") } }),
    cli(["secrets", "list", "--url", "ftp://127.0.0.1:8080"]),
  ]);
  t.equal(fromHome.code, 0, "the address and key a local stack recorded", output(fromHome));
  t.equal(fromFlags.code, 0, "flags win over the environment (host:port/v1/ as a person may paste it works)", output(fromFlags));
  t.equal(staleHome.code, 1);
  t.equal(staleHome.stderr, `error: cannot reach the gateway at ${closed} (connection refused; recorded in ${join(stale, "gateway-url")} by a \`tributary start\` that may have stopped)\n`);
  t.equal(openaiKey.code, 1, "OPENAI_API_KEY wins over the local key");
  t.match(openaiKey.stderr, /^error: .*\(the key from OPENAI_API_KEY\)\n$/, "a refused key says where it came from");
  t.equal(noKey.code, 2);
  t.match(noKey.stderr, /^no API key: pass --api-key or set TRIBUTARY_API_KEY/);
  t.equal(badUrl.code, 2);
  t.equal(badUrl.stderr, "--url: expected an http:// or https:// address, got 'ftp://127.0.0.1:8080'\n");
});
