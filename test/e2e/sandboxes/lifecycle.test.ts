import t from "tap";
import { sharedStack } from "../../harness/shared-stack.js";

// A sandbox's life through the API, on a real sandbox host (bubblewrap): create ({} is valid),
// exec (JSON and SSE), files in /workspace, stop (idempotent), delete; and its deadline.
const stack = await sharedStack(t);
const post = (path: string, body: unknown) => stack.fetch(path, { method: "POST", body: JSON.stringify(body) });
const json = async (res: Response) => (await res.json()) as any;
// The sandbox host is shared with other files: the cases after the first take little of it, and give it back.
const small = { cpu_mhz: 250, memory_mb: 64, disk_mb: 8 };
const remove = (id: string) => stack.fetch(`/v1/sandboxes/${id}`, { method: "DELETE" });

t.test("create, exec, files, stop, delete", async (t) => {
  const created = await post("/v1/sandboxes", {});
  t.equal(created.status, 200);
  const sandbox = await json(created);
  t.match(sandbox, { object: "sandbox", status: "running", termination_reason: null, timeout_seconds: 300, network: "none" });
  t.match(sandbox.id, /^sbx_/);
  t.equal(sandbox.expires_at - sandbox.created_at, 300);

  const exec = await json(await post(`/v1/sandboxes/${sandbox.id}/exec`, { command: "echo hello; echo oops >&2; exit 3" }));
  t.match(exec, { exit_code: 3, stdout: "hello\n", stderr: "oops\n", timed_out: false, truncated: false });

  const argv = await json(await post(`/v1/sandboxes/${sandbox.id}/exec`, { command: ["/usr/bin/python3", "-c", "import sys; print(sys.stdin.read().upper())"], stdin: "abc" }));
  t.equal(argv.stdout, "ABC\n");

  const up = await stack.fetch(`/v1/sandboxes/${sandbox.id}/files?path=dir/a.txt`, { method: "POST", body: "file contents", headers: { "content-type": "application/octet-stream" } });
  t.same(await json(up), { object: "sandbox.file", path: "dir/a.txt", size: 13 });
  const cat = await json(await post(`/v1/sandboxes/${sandbox.id}/exec`, { command: "cat /workspace/dir/a.txt", cwd: "dir" }));
  t.equal(cat.stdout, "file contents");
  const down = await stack.fetch(`/v1/sandboxes/${sandbox.id}/files/content?path=/workspace/dir/a.txt`);
  t.equal(await down.text(), "file contents");
  const listing = await json(await stack.fetch(`/v1/sandboxes/${sandbox.id}/files?path=dir`));
  t.match(listing.data, [{ name: "a.txt", type: "file", size: 13 }]);

  // A large file goes through in pieces both ways.
  const big = Buffer.alloc(1024 * 1024 + 17, "z");
  t.equal((await json(await stack.fetch(`/v1/sandboxes/${sandbox.id}/files?path=big.bin`, { method: "POST", body: big }))).size, big.length);
  t.equal((await (await stack.fetch(`/v1/sandboxes/${sandbox.id}/files/content?path=big.bin`)).arrayBuffer()).byteLength, big.length);
  t.equal((await stack.fetch(`/v1/sandboxes/${sandbox.id}/files/content?path=missing.txt`)).status, 404);

  const sse = await post(`/v1/sandboxes/${sandbox.id}/exec`, { command: "echo one; sleep 0.1; echo two; exit 4", stream: true });
  t.match(sse.headers.get("content-type"), /text\/event-stream/);
  const text = await sse.text();
  t.match(text, /event: start/);
  t.match(text, /event: stdout\ndata: \{"data":"one\\n"\}/);
  t.match(text, /event: exit\ndata: \{"exit_code":4/);

  const listed = await json(await stack.fetch("/v1/sandboxes?status=running"));
  t.ok(listed.data.some((s: { id: string }) => s.id === sandbox.id), "listed as running");

  const stopped = await json(await post(`/v1/sandboxes/${sandbox.id}/stop`, {}));
  t.match(stopped, { status: "stopped", termination_reason: "user_stop" });
  t.ok(stopped.stopped_at >= stopped.started_at);
  t.match(await json(await post(`/v1/sandboxes/${sandbox.id}/stop`, {})), { status: "stopped", termination_reason: "user_stop" }, "stop is idempotent");
  t.equal((await post(`/v1/sandboxes/${sandbox.id}/exec`, { command: "true" })).status, 409, "a stopped sandbox runs nothing");

  t.equal((await stack.fetch(`/v1/sandboxes/${sandbox.id}`, { method: "DELETE" })).status, 200);
  t.equal((await stack.fetch(`/v1/sandboxes/${sandbox.id}`)).status, 404);
});

t.test("an exec deadline kills the command and its background children", async (t) => {
  const sandbox = await json(await post("/v1/sandboxes", small));
  t.teardown(() => remove(sandbox.id));
  const exec = await json(await post(`/v1/sandboxes/${sandbox.id}/exec`, { command: "sleep 1000 & echo started; sleep 1000", timeout_seconds: 1 }));
  t.match(exec, { timed_out: true, signal: "SIGKILL", stdout: "started\n" });
  const ps = await json(await post(`/v1/sandboxes/${sandbox.id}/exec`, { command: "ls /proc | grep -c '^[0-9]'" }));
  // bwrap's init, the agent, sh and ls (grep counts what ls printed): no sleep left.
  const sleeping = await json(await post(`/v1/sandboxes/${sandbox.id}/exec`, { command: "cat /proc/[0-9]*/comm | grep -c sleep || true" }));
  t.equal(sleeping.stdout.trim(), "0", `no sleep survived (${ps.stdout.trim()} processes)`);
});

t.test("timeout and idle expiry", async (t) => {
  // A deadline runs from the request, and starting a sandbox can take a second or more on a busy
  // machine: the extended one has 3 s to be extended in.
  const idle = await json(await post("/v1/sandboxes", { ...small, idle_timeout_seconds: 1 }));
  const extended = await json(await post("/v1/sandboxes", { ...small, timeout_seconds: 3 }));
  t.teardown(() => remove(extended.id));
  t.equal((await post(`/v1/sandboxes/${extended.id}/timeout`, { timeout_seconds: 60 })).status, 200);
  // Made after the extended one: once it has timed out, the extended one's first deadline has passed too.
  const short = await json(await post("/v1/sandboxes", { ...small, timeout_seconds: 3 }));
  const statuses = async () => Promise.all([short, idle].map(async (s) => (await json(await stack.fetch(`/v1/sandboxes/${s.id}`))).status as string));
  const deadline = Date.now() + 15_000;
  for (let now = await statuses(); !now.every((s) => s === "stopped" || s === "failed"); now = await statuses()) {
    if (Date.now() > deadline) throw new Error(`the short and idle sandboxes had not ended 15 s after their deadlines: ${now.join(", ")}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  t.match(await json(await stack.fetch(`/v1/sandboxes/${short.id}`)), { status: "stopped", termination_reason: "timeout" });
  t.match(await json(await stack.fetch(`/v1/sandboxes/${idle.id}`)), { status: "stopped", termination_reason: "idle" });
  t.match(await json(await stack.fetch(`/v1/sandboxes/${extended.id}`)), { status: "running" }, "an extended sandbox runs on");
});
