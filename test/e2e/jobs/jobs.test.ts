// tier: slow (a stack of its own)
import t from "tap";
import { startStack } from "../../harness/stack.js";

// Jobs on a real sandbox host: success, failure with its exit code, retries, timeout, cancel
// (queued and running), logs (stored and followed), a secret injected, input and output files,
// and bad input.
const stack = await startStack(t, { runners: 0, sandboxHosts: 1, actorsEnv: { TRIBUTARY_JOB_CONCURRENCY: "2" } });
const post = (path: string, body: unknown) => stack.fetch(path, { method: "POST", body: JSON.stringify(body) });
const json = async (res: Response) => (await res.json()) as any;
const small = { memory_mb: 64, disk_mb: 8, cpu_mhz: 500 };

async function settled(id: string, timeoutMs = 30_000): Promise<any> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const job = await json(await stack.fetch(`/v1/jobs/${id}`));
    if (["succeeded", "failed", "cancelled"].includes(job.status) || Date.now() > end) return job;
    await new Promise((r) => setTimeout(r, 200));
  }
}

await post("/v1/secrets", { name: "JOB_SECRET", value: "job-secret-value" });

t.test("success: output in the logs, a secret injected", async (t) => {
  const created = await json(await post("/v1/jobs", { ...small, command: 'echo out; echo err >&2; test "$JOB_SECRET" = job-secret-value && echo secret-ok', secrets: ["JOB_SECRET"], metadata: { kind: "ok" } }));
  t.match(created, { object: "job", status: "queued", attempt: 0 });
  const done = await settled(created.id);
  t.match(done, { status: "succeeded", exit_code: 0, attempt: 1, error: null });
  t.ok(done.finished_at >= done.started_at);
  t.equal(await (await stack.fetch(`/v1/jobs/${created.id}/logs?stream=stdout`)).text(), "out\nsecret-ok\n");
  t.equal(await (await stack.fetch(`/v1/jobs/${created.id}/logs?stream=stderr`)).text(), "err\n");
  const sandbox = await json(await stack.fetch(`/v1/sandboxes/${done.sandbox_id}`));
  t.equal(sandbox.status, "stopped", "its sandbox is stopped");
});

t.test("a job's sandbox takes the network option", async (t) => {
  const created = await json(await post("/v1/jobs", { ...small, network: "egress", command: "cat /etc/resolv.conf" }));
  t.equal(created.network, "egress");
  t.match(await settled(created.id), { status: "succeeded", network: "egress" });
  t.equal(await (await stack.fetch(`/v1/jobs/${created.id}/logs?stream=stdout`)).text(), "nameserver 10.0.2.3\n", "egress sandboxes resolve through slirp4netns");
  const plain = await json(await post("/v1/jobs", { ...small, command: "true" }));
  t.equal(plain.network, "none", "none by default");
});

t.test("failure with its exit code, after its retries", async (t) => {
  const created = await json(await post("/v1/jobs", { ...small, command: "echo try; exit 7", max_retries: 1 }));
  const done = await settled(created.id);
  t.match(done, { status: "failed", exit_code: 7, attempt: 2, error: { code: "exit_code" } });
  t.equal(await (await stack.fetch(`/v1/jobs/${created.id}/logs`)).text(), "try\ntry\n", "both attempts' output");
});

t.test("timeout", async (t) => {
  const created = await json(await post("/v1/jobs", { ...small, command: "sleep 30", timeout_seconds: 1 }));
  t.match(await settled(created.id), { status: "failed", error: { code: "timeout" } });
});

t.test("cancel while running, with its logs followed live", async (t) => {
  const created = await json(await post("/v1/jobs", { ...small, command: "for i in 1 2 3 4 5 6 7 8 9 10; do echo tick $i; sleep 0.3; done" }));
  const follow = await stack.fetch(`/v1/jobs/${created.id}/logs?follow=true`);
  let text = "";
  const read = (async () => {
    const decoder = new TextDecoder();
    for await (const chunk of follow.body!) text += decoder.decode(chunk, { stream: true });
  })();
  // Cancelled once it has ticked: the follower has its first line.
  const deadline = Date.now() + 30_000;
  while (!text.includes('"data":"tick 1\\n"')) {
    if (Date.now() > deadline) throw new Error(`no first tick within 30 s: ${JSON.stringify(text)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  const cancelling = await json(await post(`/v1/jobs/${created.id}/cancel`, {}));
  t.match(cancelling.status, /cancelling|cancelled/);
  t.match(await settled(created.id), { status: "cancelled" });
  await read;
  t.match(text, /event: stdout\ndata: \{"attempt":1,"data":"tick 1\\n"\}/);
  t.notMatch(text, /tick 10/, "stopped before the end");
  t.match(text, /event: end\ndata: \{"status":"cancelled"/);
  t.match(await json(await post(`/v1/jobs/${created.id}/cancel`, {})), { status: "cancelled" }, "idempotent");
});

t.test("cancel while queued", async (t) => {
  // Two slots: two long jobs hold them, the third waits.
  const long = [await json(await post("/v1/jobs", { ...small, command: "sleep 3" })), await json(await post("/v1/jobs", { ...small, command: "sleep 3" }))];
  const queued = await json(await post("/v1/jobs", { ...small, command: "echo never" }));
  // It waits for good once both long jobs have started (each holds its slot for 3 s).
  const started = async (id: string) => (await json(await stack.fetch(`/v1/jobs/${id}`))).status !== "queued";
  const deadline = Date.now() + 30_000;
  while (!(await started(long[0].id)) || !(await started(long[1].id))) {
    if (Date.now() > deadline) throw new Error("the two long jobs had not both started within 30 s");
    await new Promise((r) => setTimeout(r, 50));
  }
  t.equal((await json(await stack.fetch(`/v1/jobs/${queued.id}`))).status, "queued");
  const cancelled = await json(await post(`/v1/jobs/${queued.id}/cancel`, {}));
  t.equal(cancelled.status, "cancelled");
  for (const j of long) t.equal((await settled(j.id)).status, "succeeded");
  t.match(await json(await stack.fetch(`/v1/jobs/${queued.id}`)), { status: "cancelled", attempt: 0 }, "it never ran");
});

t.test("input files in, output files out", async (t) => {
  const form = new FormData();
  form.append("purpose", "user_data");
  form.append("file", new Blob(["hello job\n"]), "in.txt");
  const upload = await fetch(`${stack.gateway.url}/v1/files`, { method: "POST", body: form, headers: { authorization: `Bearer ${stack.key}` } });
  const file = await json(upload);
  t.equal(upload.status, 200);
  const created = await json(await post("/v1/jobs", { ...small, input_files: [file.id], command: "mkdir -p /workspace/output && tr a-z A-Z < /workspace/input/in.txt > /workspace/output/out.txt" }));
  const done = await settled(created.id);
  t.match(done, { status: "succeeded", input_files: [file.id] });
  t.equal(done.output_files.length, 1);
  const meta = await json(await stack.fetch(`/v1/files/${done.output_files[0]}`));
  t.match(meta, { filename: "out.txt", purpose: "user_data", bytes: 10 });
  t.equal(await (await stack.fetch(`/v1/files/${done.output_files[0]}/content`)).text(), "HELLO JOB\n");
  // The inputs are mounted read-only: the command can neither change, remove nor add to them.
  const tries = [
    "echo changed >> /workspace/input/in.txt",
    "rm /workspace/input/in.txt",
    "touch /workspace/input/new.txt",
    "chmod 777 /workspace/input/in.txt",
    "mv /workspace/input/in.txt /workspace/moved.txt",
  ];
  const write = await json(await post("/v1/jobs", { ...small, input_files: [file.id], command: `${tries.map((c) => `${c} 2>/dev/null && echo 'wrote: ${c}'`).join("; ")}; ls /workspace/input; cat /workspace/input/in.txt` }));
  t.match(await settled(write.id), { status: "succeeded" });
  t.equal(await (await stack.fetch(`/v1/jobs/${write.id}/logs?stream=stdout`)).text(), "in.txt\nhello job\n", "every write failed; the input is intact");
  const missing = await post("/v1/jobs", { command: "true", input_files: ["file-doesnotexist"] });
  t.equal(missing.status, 400);
  t.equal((await json(missing)).error.param, "input_files[0]");
});

t.test("bad input names the parameter; listing filters", async (t) => {
  for (const [body, param] of [
    [{}, "command"],
    [{ command: "x", max_retries: 11 }, "max_retries"],
    [{ command: "x", timeout_seconds: 86_401 }, "timeout_seconds"],
    [{ command: "x", memory_mb: 1_000_000 }, "memory_mb"],
    [{ command: "x", secrets: ["lower"] }, "secrets[0]"],
    [{ command: "x", retries: 1 }, "retries"],
  ] as const) {
    const res = await post("/v1/jobs", body);
    t.equal(res.status, 400, JSON.stringify(body));
    t.equal((await json(res)).error.param, param);
  }
  t.equal((await stack.fetch("/v1/jobs/job_nope")).status, 404);
  const failed = await json(await stack.fetch("/v1/jobs?status=failed"));
  t.ok(failed.data.length >= 2 && failed.data.every((j: { status: string }) => j.status === "failed"));
});
