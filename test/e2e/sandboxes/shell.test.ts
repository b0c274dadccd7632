import t from "tap";
import WebSocket from "ws";
import { startStack } from "../../harness/stack.js";
import { TEST_KEY } from "../../harness/processes.js";

// The interactive shell: a WebSocket on the gateway to bash on a real terminal in the sandbox.
const OTHER_KEY = "sk-test-shell-other";
const stack = await startStack(t, { runners: 0, sandboxHosts: 1, gatewayEnv: { TRIBUTARY_API_KEYS: `${OTHER_KEY}=proj-shell-other` } });
const post = (path: string, body: unknown) => stack.fetch(path, { method: "POST", body: JSON.stringify(body) });
const sandbox = (await (await post("/v1/sandboxes", { memory_mb: 64, disk_mb: 8 })).json()) as { id: string };
const url = (id: string, query = "") => `ws://127.0.0.1:${stack.gateway.port}/v1/sandboxes/${id}/shell${query}`;

function refused(address: string, key?: string): Promise<number> {
  return new Promise((resolve) => {
    const ws = new WebSocket(address, { headers: key ? { authorization: `Bearer ${key}` } : {} });
    ws.on("unexpected-response", (_req, res) => resolve(res.statusCode ?? 0));
    ws.on("open", () => {
      ws.close();
      resolve(101);
    });
    ws.on("error", () => {});
  });
}

t.test("a terminal: commands, its size, a resize, and exit", async (t) => {
  const ws = new WebSocket(url(sandbox.id, "?rows=30&cols=90"), { headers: { authorization: `Bearer ${TEST_KEY}` } });
  let output = "";
  const frames: string[] = [];
  const closed = new Promise<number>((resolve) => ws.on("close", (code) => resolve(code)));
  ws.on("message", (data, isBinary) => {
    if (isBinary) output += data.toString();
    else frames.push(data.toString());
  });
  await new Promise((resolve, reject) => (ws.on("open", resolve), ws.on("error", reject)));
  const waitFor = async (pattern: RegExp) => {
    for (let i = 0; i < 100 && !pattern.test(output); i++) await new Promise((r) => setTimeout(r, 50));
    return pattern.test(output);
  };
  ws.send(Buffer.from("echo $((6*7)); tty; stty size\n"));
  t.ok(await waitFor(/[\r\n]42\r\n/), `the command ran: ${JSON.stringify(output)}`);
  t.ok(await waitFor(/\/dev\/pts\/\d+/), "on a terminal of its own");
  t.ok(await waitFor(/30 90/), "of the size asked");
  ws.send(JSON.stringify({ type: "resize", rows: 40, cols: 100 }));
  await new Promise((r) => setTimeout(r, 200));
  ws.send(Buffer.from("stty size\n"));
  t.ok(await waitFor(/40 100/), "resized");
  ws.send(Buffer.from("exit 3\n"));
  t.equal(await closed, 1000);
  t.match(JSON.parse(frames.at(-1)!), { type: "exit", exit_code: 3 });
});

t.test("the key is checked on the upgrade, and another project's sandbox is a 404", async (t) => {
  t.equal(await refused(url(sandbox.id)), 401);
  t.equal(await refused(url(sandbox.id), OTHER_KEY), 404);
  t.equal(await refused(url("sbx_nope"), TEST_KEY), 404);
  t.equal(await refused(url(sandbox.id, "?rows=0"), TEST_KEY), 400);
});

t.test("tributary sandbox shell, without a terminal: stdin in, output out, the shell's exit code", async (t) => {
  const { spawn } = await import("node:child_process");
  const { join } = await import("node:path");
  const { repoRoot } = await import("../../harness/processes.js");
  const cli = spawn(process.execPath, [join(repoRoot, "dist/cli/main.js"), "sandbox", "shell", sandbox.id, "--url", stack.gateway.url, "--key", TEST_KEY], { stdio: ["pipe", "pipe", "pipe"] });
  let out = "";
  cli.stdout.on("data", (d: Buffer) => (out += d.toString()));
  cli.stdin.write("echo from-the-cli\nexit 5\n");
  const code = await new Promise<number | null>((resolve) => cli.on("exit", resolve));
  t.match(out, /from-the-cli/);
  t.equal(code, 5);
});
