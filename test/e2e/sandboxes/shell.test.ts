import t from "tap";
import WebSocket from "ws";
import { sharedStack } from "../../harness/shared-stack.js";
import { spawnCli } from "../../harness/cli.js";

// The interactive shell: a WebSocket on the gateway to bash on a real terminal in the sandbox.
const stack = await sharedStack(t);
// Another project of the same organization.
const other = await stack.project("shell-other");
const post = (path: string, body: unknown) => stack.fetch(path, { method: "POST", body: JSON.stringify(body) });
// Small, and given back at the end: the sandbox host is shared with other files.
const sandbox = (await (await post("/v1/sandboxes", { cpu_mhz: 250, memory_mb: 64, disk_mb: 8 })).json()) as { id: string };
t.teardown(() => stack.fetch(`/v1/sandboxes/${sandbox.id}`, { method: "DELETE" }));
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
  const ws = new WebSocket(url(sandbox.id, "?rows=30&cols=90"), { headers: { authorization: `Bearer ${stack.key}` } });
  let output = "";
  const frames: string[] = [];
  const closed = new Promise<number>((resolve) => ws.on("close", (code) => resolve(code)));
  ws.on("message", (data, isBinary) => {
    if (isBinary) output += data.toString();
    else frames.push(data.toString());
  });
  await new Promise((resolve, reject) => (ws.on("open", resolve), ws.on("error", reject)));
  const waitFor = async (pattern: RegExp, timeoutMs = 5_000) => {
    for (const deadline = Date.now() + timeoutMs; !pattern.test(output) && Date.now() < deadline; ) await new Promise((r) => setTimeout(r, 50));
    return pattern.test(output);
  };
  ws.send(Buffer.from("echo $((6*7)); tty; stty size\n"));
  t.ok(await waitFor(/[\r\n]42\r\n/), `the command ran: ${JSON.stringify(output)}`);
  t.ok(await waitFor(/\/dev\/pts\/\d+/), "on a terminal of its own");
  t.ok(await waitFor(/30 90/), "of the size asked");
  ws.send(JSON.stringify({ type: "resize", rows: 40, cols: 100 }));
  // The resize and the input travel as separate calls to the host: ask for the size until it shows.
  let resized = false;
  for (const deadline = Date.now() + 5_000; !resized && Date.now() < deadline; ) {
    ws.send(Buffer.from("stty size\n"));
    resized = await waitFor(/40 100/, 200);
  }
  t.ok(resized, "resized");
  ws.send(Buffer.from("exit 3\n"));
  t.equal(await closed, 1000);
  t.match(JSON.parse(frames.at(-1)!), { type: "exit", exit_code: 3 });
});

t.test("the key is checked on the upgrade, and another project's sandbox is a 404", async (t) => {
  t.equal(await refused(url(sandbox.id)), 401);
  t.equal(await refused(url(sandbox.id), other.key), 404);
  t.equal(await refused(url("sbx_nope"), stack.key), 404);
  t.equal(await refused(url(sandbox.id, "?rows=0"), stack.key), 400);
});

t.test("tributary sandbox shell, without a terminal: stdin in, output out, the shell's exit code", async (t) => {
  const cli = spawnCli(["sandbox", "shell", sandbox.id, "--url", stack.gateway.url, "--api-key", stack.key]);
  let out = "";
  cli.stdout!.on("data", (d: Buffer) => (out += d.toString()));
  cli.stdin!.write("echo from-the-cli\nexit 5\n");
  const code = await new Promise<number | null>((resolve) => cli.on("exit", resolve));
  t.match(out, /from-the-cli/);
  t.equal(code, 5);
});
