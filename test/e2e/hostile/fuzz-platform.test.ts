// tier: serial (hostile cases run beside another tenant's streams, whose timing they check)
import t from "tap";
import { createHash } from "node:crypto";
import { assertStillServing, startHostileStack } from "../../harness/hostile.js";
import { appDir, hosted, uploadBundle, waitForDeployment } from "../../harness/apps.js";
import { CookieClient, ownerOrganization } from "../../harness/dashboard.js";
import { HOSTILE_IDS, HOSTILE_QUERY_VALUES, type Json, mutate, wrongTypes, nestedArrayText, nestedText, Prober, type ProbeRequest, seeded } from "../../harness/fuzz.js";
import { startSandboxHost, TEST_KEY, TEST_MODEL } from "../../harness/processes.js";
import { bytesTakenOfMore, chunkFrame, rawConnect, rawWrite, sleep } from "../../harness/raw-http.js";

// Seeded fuzzing of the platform routes (artifacts and multipart uploads, app deployments and
// hosted addresses, traces, secrets, sandboxes, jobs, the dashboard's forms), with the machinery
// of fuzz.test.ts (test/harness/fuzz.ts): every hostile id, query value and body gets an answer
// below 500, every 4xx is OpenAI's error without internals (with its `param` where the case names
// one), and afterwards every process (gateway, actor host, runner, sandbox and app host) is the
// one that started and still serves, the deployed app included. FUZZ_SEED=<seed> replays a run.

const { seed, rng } = seeded(t);
const BODIES = Number(process.env.FUZZ_BODIES ?? 12);
const secretsKey = { TRIBUTARY_SECRETS_KEY: "k1:" + Buffer.alloc(32, 7).toString("base64") };
// Each project may hold 3 jobs: the bound is tested at its edge below (and keeps the fuzzed jobs few).
const MAX_JOBS = 3;
const hostile = await startHostileStack(t, { sandboxHosts: 0, env: secretsKey, gatewayEnv: { TRIBUTARY_JOB_MAX_PER_PROJECT: String(MAX_JOBS) } });
const { stack, a, b } = hostile;
// The sandbox host is also the app host: its instances call this gateway, so it starts after it.
const host = await startSandboxHost(stack.nats.url, { ...secretsKey, TRIBUTARY_APP_PLATFORM_URL: stack.gateway.url, TRIBUTARY_APP_SWITCH_DELAY_MS: "100" });
t.teardown(() => host.kill());

const prober = new Prober(stack.gateway.url, a.key);
const local = new Prober(stack.gateway.url, TEST_KEY);
const probe = (r: ProbeRequest) => prober.probe(r);
const json = (value: unknown) => JSON.stringify(value);

// An app of the local project (the stack's configured key), for the deployment and hosted-address cases.
const ADDRESS = "default-project.local.apps.localhost";
const MANIFEST = { entrypoint: "app:app", organization_slug: "local", project: "Default project", project_slug: "default-project", cpu_mhz: 200, gpu_count: 0, memory_size_mb: 96 };
const yaml = (fields: Record<string, unknown>) => Object.entries(fields).map(([k, v]) => `${k}: ${JSON.stringify(v)}`).join("\n") + "\n";
/** Answers with the number of body bytes it received; on /early, 401 at once, its body unread (as an app checking a header would). */
const ECHO_APP = `
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    if scope["path"] == "/early":
        await send({"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"no"})
        return
    n = 0
    while True:
        m = await receive()
        n += len(m.get("body", b""))
        if not m.get("more_body"):
            break
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": str(n).encode()})
`;
const appArtifact = await uploadBundle(stack.gateway.url, TEST_KEY, appDir(undefined, { "app.py": ECHO_APP, "tributary.yaml": yaml(MANIFEST) }));
const created = (await (await stack.fetch("/v1/apps/deployments", { method: "POST", body: json({ artifact_id: appArtifact }) })).json()) as { id: string };
const deployment = await waitForDeployment(stack.gateway.url, TEST_KEY, created.id, ["healthy"]);

// Things of A's for the paths to name: a ready artifact, an unfinished upload, a secret, a trace, a sandbox, a job.
const uploadForm = (file: Uint8Array | string, filename = "a.tar.gz", manifest?: string) => {
  const form = new FormData();
  if (manifest !== undefined) form.set("manifest", manifest);
  form.set("file", new Blob([file]), filename);
  return form;
};
const artifact = (await (await fetch(stack.gateway.url + "/v1/artifacts", { method: "POST", body: uploadForm("hello"), headers: { authorization: `Bearer ${a.key}` } })).json()) as { id: string };
const upload = (await (await a.fetch("/v1/multipart", { method: "POST", body: json({ filename: "big.bin", bytes: 3000 }) })).json()) as { id: string };
await a.fetch("/v1/secrets", { method: "POST", body: json({ name: "FUZZ_SECRET", value: "v" }) });
await a.client.chat.completions.create({ model: TEST_MODEL, messages: [{ role: "user", content: "Hi" }], max_tokens: 2, log: true } as never);
const sandbox = (await (await a.fetch("/v1/sandboxes", { method: "POST", body: json({ cpu_mhz: 100, memory_mb: 64, timeout_seconds: 900 }) })).json()) as { id: string };
const job = (await (await a.fetch("/v1/jobs", { method: "POST", body: json({ command: ["true"], cpu_mhz: 100, memory_mb: 64 }) })).json()) as { id: string };

t.test("setup: the app, an artifact, an upload, a sandbox and a job exist", async (t) => {
  t.equal(deployment.status, "healthy");
  t.match(artifact, { id: /^artifact-/ });
  t.match(upload, { id: /^artifact-/ });
  t.match(sandbox, { id: /^sbx_/ });
  t.match(job, { id: /^job_/ });
});

/** Bodies mutated from a valid base (BODIES of them), each must be answered below 500 (2xx allowed). */
async function fuzzBodies(method: string, path: string, base: Json, count = BODIES, p = prober): Promise<void> {
  for (let i = 0; i < count; i++) await p.probe({ method, path, body: mutate(rng, base), expect: { status: "ok-or-4xx" } });
}

/** Bodies every JSON route must refuse with a 4xx in OpenAI's shape: empty, deep, broken, the wrong type. */
const JUNK_BODIES: readonly string[] = ["", " ", "null", "[]", "1", '"x"', "{", nestedText(10_000), nestedArrayText(10_000), "\u0000", '{"a":1}garbage'];

t.test(`artifacts: hostile ids, query values and bodies (seed ${seed})`, async (t) => {
  const before = prober.failures.length;
  for (const id of HOSTILE_IDS) {
    for (const [method, path] of [["GET", `/v1/artifacts/${id}`], ["GET", `/v1/artifacts/${id}/content`], ["DELETE", `/v1/artifacts/${id}`], ["GET", `/v1/multipart/${id}/parts`], ["POST", `/v1/multipart/${id}/finish`]] as const)
      await probe({ method, path, expect: { status: 404 } });
    await probe({ method: "POST", path: `/v1/multipart/${id}/part?part_number=1`, body: "x", expect: { status: 404 } });
  }
  for (const v of HOSTILE_QUERY_VALUES) {
    await probe({ method: "GET", path: `/v1/artifacts?limit=${v}`, expect: { status: 400, param: "limit" } });
    await probe({ method: "GET", path: `/v1/artifacts?order=${v}`, expect: { status: 400, param: "order" } });
    await probe({ method: "GET", path: `/v1/artifacts?status=${v}`, expect: { status: 400, param: "status" } });
    await probe({ method: "GET", path: `/v1/artifacts?after=${v}`, expect: { status: "ok-or-4xx" } });
    await probe({ method: "POST", path: `/v1/multipart/${upload.id}/part?part_number=${v}`, body: "x", expect: { status: 400, param: "part_number" } });
  }
  await probe({ method: "GET", path: "/v1/artifacts?limit=5&limit=x&order=asc&order=sideways", expect: { status: "ok-or-4xx" } });
  for (const body of JUNK_BODIES) {
    await probe({ method: "POST", path: "/v1/multipart", body, expect: { status: 400 } });
    await probe({ method: "POST", path: `/v1/multipart/${upload.id}/finish`, body: body || "{", expect: { status: 400 } });
  }
  await fuzzBodies("POST", "/v1/multipart", { filename: "a.bin", bytes: 3000, sha256: "0".repeat(64), manifest: "entrypoint: app:app" });
  await fuzzBodies("POST", `/v1/multipart/${upload.id}/finish`, { parts: [{ part_number: 1, sha256: "0".repeat(64) }, { part_number: 2 }] });
  // Single-shot uploads that are not well-formed forms.
  const form = async (body: string, contentType?: string) =>
    probe({ method: "POST", path: "/v1/artifacts", body, headers: contentType === undefined ? {} : { "content-type": contentType }, expect: { status: "4xx" } });
  await form("", "multipart/form-data; boundary=x");
  await form("--x\r\ncontent-disposition: form-data; name=\"file\"; filename=\"a\"\r\n\r\nabc", "multipart/form-data; boundary=x"); // never ends
  await form("{}", "application/json");
  await form("junk", "multipart/form-data");
  await form("junk", "multipart/form-data; boundary=" + "b".repeat(3000));
  await form("junk", "text/plain");
  const many = new FormData();
  for (let i = 0; i < 50; i++) many.append(`f${i}`, "v");
  await probe({ method: "POST", path: "/v1/artifacts", body: many, headers: { "content-type": undefined }, expect: { status: 400 } });
  // A filename at its limit (255 bytes), and one with dots that is no path, are taken.
  for (const filename of ["x".repeat(255), "a..b"])
    await probe({ method: "POST", path: "/v1/artifacts", body: uploadForm("x", filename), headers: { "content-type": undefined }, what: `upload named ${JSON.stringify(filename.slice(0, 20))}`, expect: { status: 200 } });
  for (const filename of ["", "a/b", "..", ".", "a\\b", "x".repeat(256), "\u0000"])
    await probe({ method: "POST", path: "/v1/artifacts", body: uploadForm("x", filename), headers: { "content-type": undefined }, what: `upload named ${JSON.stringify(filename.slice(0, 20))}`, expect: { status: 400, param: "file" } });
  await probe({ method: "POST", path: "/v1/artifacts", body: uploadForm("x", "a", "m".repeat(64 * 1024)), headers: { "content-type": undefined }, expect: { status: 200 } });
  await probe({ method: "POST", path: "/v1/artifacts", body: uploadForm("x", "a", "m".repeat(64 * 1024 + 1)), headers: { "content-type": undefined }, expect: { status: 400, param: "manifest" } });
  t.same(prober.failures.slice(before), [], `every answer below 500, in OpenAI's shape (${prober.sent} sent so far)`);
});

t.test("artifacts: the edges of part_number and the finish list", async (t) => {
  const before = prober.failures.length;
  await probe({ method: "POST", path: `/v1/multipart/${upload.id}/part?part_number=10000`, body: "x", expect: { status: 200 } });
  await probe({ method: "POST", path: `/v1/multipart/${upload.id}/part?part_number=10001`, body: "x", expect: { status: 400, param: "part_number" } });
  await probe({ method: "POST", path: `/v1/multipart/${upload.id}/part?part_number=0`, body: "x", expect: { status: 400, param: "part_number" } });
  const list = (n: number) => json({ parts: Array.from({ length: n }, (_, i) => ({ part_number: i + 1 })) });
  await probe({ method: "POST", path: `/v1/multipart/${upload.id}/finish`, body: list(10_001), expect: { status: 400, param: "parts" } });
  await probe({ method: "POST", path: `/v1/multipart/${upload.id}/finish`, body: list(10_000), expect: { status: 400, code: "missing_part" } });
  t.same(prober.failures.slice(before), []);
});

t.test("app deployments: hostile ids, bodies and manifests", async (t) => {
  const before = prober.failures.length;
  for (const id of HOSTILE_IDS) {
    await probe({ method: "GET", path: `/v1/apps/deployments/${id}`, expect: { status: 404, param: "deployment_id" } });
    await probe({ method: "POST", path: `/v1/apps/deployments/${id}/stop`, expect: { status: 404, param: "deployment_id" } });
    await probe({ method: "GET", path: `/v1/apps/deployments/${id}/logs?follow=true`, expect: { status: 404, param: "deployment_id" } });
  }
  // (follow=true on a healthy deployment is a stream that lasts as long as the app.)
  for (const v of HOSTILE_QUERY_VALUES.filter((v) => v !== "true"))
    await local.probe({ method: "GET", path: `/v1/apps/deployments/${deployment.id}/logs?follow=${v}`, expect: { status: 400, param: "follow" } });
  for (const v of HOSTILE_QUERY_VALUES) {
    await local.probe({ method: "GET", path: `/v1/apps/deployments?limit=${v}`, expect: { status: 400, param: "limit" } });
    if (v !== "") await local.probe({ method: "GET", path: `/v1/apps/deployments?after=${v}`, expect: { status: 400, param: "after" } });
  }
  await local.probe({ method: "GET", path: "/v1/apps/deployments?limit=100", expect: { status: 200 } });
  await local.probe({ method: "GET", path: "/v1/apps/deployments?limit=101", expect: { status: 400, param: "limit" } });
  await local.probe({ method: "GET", path: "/v1/apps/deployments?order=asc", expect: { status: 400, param: "order" } });
  const page = (await (await stack.fetch("/v1/apps/deployments?limit=1")).json()) as { data: Array<{ id: string }>; has_more: boolean };
  t.same(page.data.map((d) => d.id), [deployment.id], "a page of one: the newest");
  const next = (await (await stack.fetch(`/v1/apps/deployments?after=${deployment.id}`)).json()) as { data: unknown[]; has_more: boolean };
  t.same([next.data.length, next.has_more], [0, false], "nothing after the only one");
  await probe({ method: "GET", path: `/v1/apps/deployments/${deployment.id}`, expect: { status: 404 } }); // another project's deployment
  await probe({ method: "GET", path: `/v1/apps/deployments/${deployment.id}/logs?follow=true`, expect: { status: 404 } });
  for (const body of JUNK_BODIES) await probe({ method: "POST", path: "/v1/apps/deployments", body, expect: { status: 400 } });
  for (const id of HOSTILE_IDS) await probe({ method: "POST", path: "/v1/apps/deployments", body: json({ artifact_id: decodeURIComponentSafe(id) }), expect: { status: "4xx", param: "artifact_id" } });
  await fuzzBodies("POST", "/v1/apps/deployments", { artifact_id: artifact.id }, BODIES, local);
  // Hostile manifests: each one a refused deploy naming the manifest (or one of its fields), nothing started.
  const manifests: string[] = [
    "", "---\n---\n", "a: &a [1]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: [*d,*d,*d,*d,*d,*d,*d,*d,*d]\n",
    "[".repeat(5000) + "]".repeat(5000), "a:\n" + Array.from({ length: 300 }, (_, i) => " ".repeat(i + 1) + `k${i}:`).join("\n"),
    "!!binary AAAA", "!!js/function 'function(){}'", "__proto__: {polluted: 1}\n" + yaml(MANIFEST), "<<: {entrypoint: 'a:b'}\n",
    yaml({ ...MANIFEST, cpu_mhz: "200" }), yaml({ ...MANIFEST, memory_size_mb: 1e308 }), yaml({ ...MANIFEST, gpu_count: -1 }), yaml({ ...MANIFEST, entrypoint: "x".repeat(300) + ":app" }),
    yaml({ ...MANIFEST, env: Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`V${i}`, "x"])) }), yaml({ ...MANIFEST, env: { A: { b: 1 } } }), yaml({ ...MANIFEST, env: { TRIBUTARY_X: "1" } }),
    yaml({ ...MANIFEST, env: { A: "x".repeat(4097) } }), yaml({ ...MANIFEST, secrets: Array.from({ length: 33 }, (_, i) => `S${i}`) }), yaml({ ...MANIFEST, secrets: ["a.b*>"] }),
    yaml({ ...MANIFEST, project_slug: "é" }), yaml({ ...MANIFEST, project: "x".repeat(300) }), yaml({ ...MANIFEST, project_slug: "a".repeat(64) }), "entrypoint: 'app:app'\u0085\u2028",
  ];
  for (const manifest of manifests) {
    const form = uploadForm("bundle", "bundle.tar.gz", manifest);
    const res = await fetch(stack.gateway.url + "/v1/artifacts", { method: "POST", body: form, headers: { authorization: `Bearer ${TEST_KEY}` } });
    const uploaded = (await res.json()) as { id?: string };
    if (!uploaded.id) {
      local.failures.push(`manifest ${JSON.stringify(manifest.slice(0, 60))}: the upload failed: ${res.status}`);
      continue;
    }
    const answer = await local.probe({ method: "POST", path: "/v1/apps/deployments", body: json({ artifact_id: uploaded.id }), what: `deploy of manifest ${JSON.stringify(manifest.slice(0, 60))}`, expect: { status: "4xx" } });
    if (answer && answer.status >= 400 && !/^manifest/.test(String((JSON.parse(answer.body) as { error: { param: unknown } }).error.param)))
      local.failures.push(`deploy of manifest ${JSON.stringify(manifest.slice(0, 60))}: param does not name the manifest: ${answer.body.slice(0, 200)}`);
  }
  t.same([...prober.failures.slice(before), ...local.failures], []);
  const current = await waitForDeployment(stack.gateway.url, TEST_KEY, deployment.id, ["healthy"]);
  t.equal(current.status, "healthy", "the deployed app is untouched");
});

function decodeURIComponentSafe(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}

/** One raw request to the gateway with exactly these header lines (Host included, or not): its status, or how the connection ended. */
async function raw(headLines: string[], body?: Buffer): Promise<number | string> {
  const conn = await rawConnect({ port: stack.gateway.port });
  await rawWrite(conn, Buffer.concat([Buffer.from(headLines.join("\r\n") + "\r\n\r\n", "latin1"), body ?? Buffer.alloc(0)]));
  const answer = await Promise.race([conn.response, sleep(10_000).then(() => "timeout" as const)]);
  conn.destroy();
  if (answer === "timeout") return "no answer within 10 s";
  if (!answer) return `closed without an answer (${await conn.ended})`;
  if (answer.status >= 400) {
    const error = (() => {
      try {
        return answer.json().error;
      } catch {
        return undefined;
      }
    })();
    if (!error || typeof error.message !== "string") return `${answer.status} not in OpenAI's shape: ${answer.body.slice(0, 200)}`;
  }
  return answer.status;
}

t.test("hosted addresses: hostile Host headers, header counts and body framings", async (t) => {
  const auth = `authorization: Bearer ${TEST_KEY}`;
  const get = (host: string | undefined, path = "/") => raw([`GET ${path} HTTP/1.1`, ...(host === undefined ? [] : [`host: ${host}`]), auth]);
  // Nothing here may reach the app of another address, or fail: a Host that is not a hosted address is the API's.
  const hosts: Array<[string | undefined, number]> = [
    [ADDRESS, 200], [ADDRESS.toUpperCase(), 200], [`${ADDRESS}:8080`, 200], [`${ADDRESS}.`, 200], [`${ADDRESS}:99999999`, 404],
    ["x".repeat(64) + ".local.apps.localhost", 404], ["a.b.c.local.apps.localhost", 404], ["a." + "b.".repeat(120) + "apps.localhost", 404],
    ["dëfault-project.local.apps.localhost", 404], ["xn--dfault-project-ksb.local.apps.localhost", 404], ["", 404],
    [".apps.localhost", 404], ["..apps.localhost", 404], ["*.local.apps.localhost", 404], [">.local.apps.localhost", 404], ["nobody.local.apps.localhost", 404],
    ["default-project.local.apps.localhost:", 404], [ADDRESS + " " + ADDRESS, 404], ["x".repeat(3000), 404],
  ];
  for (const [host, expected] of hosts) t.equal(await get(host), expected, `Host ${JSON.stringify(host?.slice(0, 80))}`);
  // HTTP/1.1 without a Host, and heads past uWebSockets.js's own header count: it closes the connection.
  t.match(await get(undefined), /^closed/, "no Host: closed by uWS");
  t.match(await raw([`GET / HTTP/1.1`, `host: ${ADDRESS}`, auth, ...Array.from({ length: 500 }, (_, i) => `x-h${i}: v`)]), /^closed/, "500 headers: closed by uWS");
  t.equal(await raw([`GET / HTTP/1.1`, `host: ${ADDRESS}`, auth, ...Array.from({ length: 30 }, (_, i) => `x-h${i}: v`)]), 200, "32 headers (the limit): served");
  t.equal(await raw([`GET / HTTP/1.1`, `host: ${ADDRESS}`, auth, ...Array.from({ length: 31 }, (_, i) => `x-h${i}: v`)]), 431, "33 headers: 431");
  t.equal(await raw([`GET / HTTP/1.1`, `host: ${ADDRESS}`, auth, `x-big: ${"v".repeat(8000)}`]), 431, "an 8 KB header: 431");
  const post = (framing: string[], body: Buffer) => raw([`POST /echo HTTP/1.1`, `host: ${ADDRESS}`, auth, ...framing], body);
  t.equal(await post(["content-length: 5"], Buffer.from("hello")), 200, "a body with its length");
  t.equal(await post([], Buffer.alloc(0)), 200, "a POST without a body");
  t.equal(await post(["transfer-encoding: chunked"], Buffer.from("5\r\nhello\r\n3\r\nabc\r\n0\r\n\r\n")), 200, "a chunked body");
  t.equal(await post(["content-length: 0"], Buffer.alloc(0)), 200, "an empty body");
  const res = await hosted(stack.gateway.port, ADDRESS, "/", { method: "POST", key: TEST_KEY, body: "x".repeat(100_000) });
  t.equal(res.body, "100000", "a 100 KB body arrives whole");
  // A declared body past TRIBUTARY_APPS_MAX_BODY_BYTES (16 MiB) is refused before a byte of it is
  // read (and, too large to drain, the rest is held unread until the connection closes: docs/architecture.md "Bounds at the edge").
  t.equal(await post([`content-length: ${16 * 1024 * 1024 + 1}`], Buffer.alloc(0)), 413, "a body past 16 MiB: 413");
  // Framing the server cannot trust: refused (uWS closes such a connection) without touching the app or the process.
  // (Two different content-lengths: uWS takes one and waits for the body, until its idle timeout: not tried here.)
  for (const framing of [["content-length: 5", "transfer-encoding: chunked"], ["content-length: -1"], ["transfer-encoding: chunked"]]) {
    const outcome = await post(framing, Buffer.from(framing.length === 1 && framing[0] === "transfer-encoding: chunked" ? "zz\r\nhello\r\n0\r\n\r\n" : "hello"));
    t.ok(typeof outcome === "string" ? /closed/.test(outcome) : outcome >= 400 && outcome < 500, `${framing.join(", ")}: ${outcome}`);
  }
  t.equal(await get(ADDRESS), 200, "the app still answers");
});

t.test("an app that answers before reading a body the client goes on sending", async (t) => {
  const MB = 1024 * 1024;
  const conn = await rawConnect({ port: stack.gateway.port });
  await rawWrite(conn, `POST /early HTTP/1.1\r\nhost: ${ADDRESS}\r\nauthorization: Bearer ${TEST_KEY}\r\ntransfer-encoding: chunked\r\n\r\n`);
  // A first chunk well under the body reader's high-water mark: the socket is still read when the answer comes.
  await rawWrite(conn, chunkFrame(Buffer.from("hello")));
  const res = await Promise.race([conn.response, sleep(10_000).then(() => undefined)]);
  t.equal(res?.status, 401, "the app's answer arrives");
  t.equal(res?.body, "no");
  // (Connection: close is added only when the app's response arrives whole; streamed, its head went out first.)
  // The app is done with the request: what the client sends after is not the gateway's to keep.
  // 64 MiB more (4x TRIBUTARY_APPS_MAX_BODY_BYTES): held unread, only the sockets' buffers take any.
  const taken = await bytesTakenOfMore(conn, 64);
  t.ok(taken < 32 * MB, `the gateway stopped reading (${(taken / MB).toFixed(1)} of 64 MiB more left the client)`);
  t.equal(conn.writeError(), undefined, "the client was not reset");
  conn.destroy();
  t.equal((await hosted(stack.gateway.port, ADDRESS, "/", { method: "POST", key: TEST_KEY, body: "abc" })).body, "3", "the app still answers");
});

t.test("traces, secrets, sandboxes and jobs: hostile ids, query values and bodies", async (t) => {
  const before = prober.failures.length;
  for (const id of HOSTILE_IDS) {
    await probe({ method: "GET", path: `/v1/traces/${id}`, expect: { status: 404 } });
    for (const [method, path] of [["GET", `/v1/secrets/${id}`], ["POST", `/v1/secrets/${id}`], ["DELETE", `/v1/secrets/${id}`]] as const)
      await probe({ method, path, body: method === "POST" ? json({ value: "v" }) : undefined, expect: { status: 404 } });
    for (const [method, path] of [["GET", `/v1/sandboxes/${id}`], ["POST", `/v1/sandboxes/${id}/stop`], ["DELETE", `/v1/sandboxes/${id}`], ["GET", `/v1/sandboxes/${id}/files`], ["GET", `/v1/jobs/${id}`], ["POST", `/v1/jobs/${id}/cancel`], ["GET", `/v1/jobs/${id}/logs?follow=true`]] as const)
      await probe({ method, path, body: method === "POST" ? "{}" : undefined, expect: { status: 404 } });
  }
  for (const v of HOSTILE_QUERY_VALUES) {
    await probe({ method: "GET", path: `/v1/traces?limit=${v}`, expect: { status: 400, param: "limit" } });
    await probe({ method: "GET", path: `/v1/traces?after=${v}`, expect: { status: 400, param: "after" } });
    if (v !== "0") await probe({ method: "GET", path: `/v1/traces?start_time=${v}`, expect: { status: 400, param: "start_time" } });
    for (const list of ["/v1/sandboxes", "/v1/jobs"]) {
      await probe({ method: "GET", path: `${list}?limit=${v}`, expect: { status: 400, param: "limit" } });
      await probe({ method: "GET", path: `${list}?order=${v}`, expect: { status: 400, param: "order" } });
      await probe({ method: "GET", path: `${list}?after=${v}`, expect: { status: "4xx", param: "after" } });
    }
    await probe({ method: "GET", path: `/v1/sandboxes/${sandbox.id}/files?limit=${v}`, expect: { status: 400, param: "limit" } });
    await probe({ method: "GET", path: `/v1/jobs/${job.id}/logs?stream=${v}`, expect: { status: 400, param: "stream" } });
  }
  await probe({ method: "GET", path: "/v1/traces?limit=100", expect: { status: 200 } });
  await probe({ method: "GET", path: "/v1/traces?limit=101", expect: { status: 400, param: "limit" } });
  await probe({ method: "GET", path: "/v1/traces?" + Array.from({ length: 200 }, (_, i) => `model=m${i}`).join("&"), expect: { status: "ok-or-4xx" } });
  for (const list of ["/v1/sandboxes", "/v1/jobs"]) {
    await probe({ method: "GET", path: `${list}?limit=100`, expect: { status: 200 } });
    await probe({ method: "GET", path: `${list}?limit=101`, expect: { status: 400, param: "limit" } });
    await probe({ method: "GET", path: `${list}?limit=1e2`, expect: { status: 400, param: "limit" } });
  }
  await probe({ method: "GET", path: `/v1/sandboxes/${sandbox.id}/files?limit=1000`, expect: { status: 200 } });
  await probe({ method: "GET", path: `/v1/sandboxes/${sandbox.id}/files?limit=1001`, expect: { status: 400, param: "limit" } });
  await probe({ method: "GET", path: `/v1/sandboxes?${Array.from({ length: 17 }, (_, i) => `metadata[k${i}]=v`).join("&")}`, expect: { status: 400, param: "metadata" } });
  for (const body of JUNK_BODIES)
    for (const path of ["/v1/secrets", "/v1/secrets/FUZZ_SECRET", "/v1/sandboxes", `/v1/sandboxes/${sandbox.id}/exec`, `/v1/sandboxes/${sandbox.id}/timeout`, "/v1/jobs"])
      await probe({ method: "POST", path, body, expect: { status: 400 } });
  // Oversize bodies (past the 8 MiB body limit, or the route's smaller one): 413 in OpenAI's shape.
  const oversize = JSON.stringify({ value: "x".repeat(8 * 1024 * 1024) });
  for (const path of ["/v1/multipart", `/v1/multipart/${upload.id}/finish`, "/v1/apps/deployments", "/v1/secrets", "/v1/secrets/FUZZ_SECRET", "/v1/sandboxes", `/v1/sandboxes/${sandbox.id}/exec`, "/v1/jobs"])
    await probe({ method: "POST", path, body: oversize, what: `POST ${path} with 8 MiB`, expect: { status: 413, code: "request_too_large" } });
  await fuzzBodies("POST", "/v1/secrets", { name: "FUZZ_OTHER", value: "v" });
  await fuzzBodies("POST", "/v1/secrets/FUZZ_SECRET", { value: "v2" });
  await fuzzBodies("POST", "/v1/sandboxes", { cpu_mhz: 100, memory_mb: 64, timeout_seconds: 5, metadata: { k: "v" }, env: { A: "1" }, network: "none" }, 6);
  await fuzzBodies("POST", `/v1/sandboxes/${sandbox.id}/exec`, { command: ["true"], cwd: "/workspace", env: { A: "1" }, stdin: "", timeout_seconds: 5 });
  await fuzzBodies("POST", `/v1/sandboxes/${sandbox.id}/timeout`, { timeout_seconds: 60 });
  await fuzzBodies("POST", "/v1/jobs", { command: ["true"], cpu_mhz: 100, memory_mb: 64, timeout_seconds: 10, max_retries: 0, metadata: { k: "v" } }, 6);
  t.same(prober.failures.slice(before), []);
});

t.test("jobs: the per-project bound at its edge, and pages read by id", async (t) => {
  const ids: string[] = [];
  for (let i = 0; i < MAX_JOBS; i++) {
    const res = await stack.fetch("/v1/jobs", { method: "POST", body: json({ command: ["true"], cpu_mhz: 100, memory_mb: 64 }) });
    t.equal(res.status, 200, `job ${i + 1} of ${MAX_JOBS}: made`);
    ids.push(((await res.json()) as { id: string }).id);
  }
  await local.probe({ method: "POST", path: "/v1/jobs", body: json({ command: ["true"] }), expect: { status: 400, code: "too_many_jobs" } });
  const page = async (query: string) => (await (await stack.fetch(`/v1/jobs?${query}`)).json()) as { data: Array<{ id: string }>; has_more: boolean };
  const first = await page("limit=2");
  t.same([first.data.map((j) => j.id), first.has_more], [[ids[2], ids[1]], true], "newest first, two of three");
  const second = await page(`limit=2&after=${ids[1]}`);
  t.same([second.data.map((j) => j.id), second.has_more], [[ids[0]], false], "then the oldest");
  const ascending = await page("order=asc&limit=1");
  t.same(ascending.data.map((j) => j.id), [ids[0]], "oldest first when asked");
  await local.probe({ method: "GET", path: "/v1/jobs?after=job_000000000000000000000000", expect: { status: 400, param: "after" } });
  t.same(local.failures, []);
});

t.test("the dashboard's forms: sign-in, keys and CSRF", async (t) => {
  const email = "fuzz@example.com";
  const password = "correct horse battery";
  await ownerOrganization(stack, email, password);
  const browser = new CookieClient(stack.gateway.url);
  t.equal((await browser.signIn(email, password)).status, 303, "signed in");
  const cookie = [...browser.cookies].map(([k, v]) => `${k}=${v}`).join("; ");
  const keysPage = await browser.request("/dashboard/keys");
  const csrf = CookieClient.csrfOf(keysPage.text);
  // Forms without the session's CSRF token (they must change nothing), then names no key may have.
  const forms = [
    "", "=", "&&&", "csrf=", `csrf=${csrf}x`, "csrf=%00", "csrf=%FF%FE", `csrf=${"a".repeat(3000)}`, Array.from({ length: 2000 }, (_, i) => `k${i}=v`).join("&"),
    `csrf=other&csrf=${csrf}`, "email[]=a&password[]=b", "%", "a=%zz", "x".repeat(200_000), `csrf=${csrf}&name=${"n".repeat(5000)}`, `csrf=${csrf}&name=%00%01`, `csrf=${csrf}&name=a%0Ab`,
  ];
  const statuses: string[] = [];
  for (const form of forms)
    for (const [path, withCookie] of [
      ["/dashboard/sign-in", false],
      ["/dashboard/keys", true],
      ["/dashboard/members", true],
      // The platform's forms, on objects no project has: a 404 at most, never a change.
      ["/dashboard/secrets", true],
      ["/dashboard/secrets/NO_SUCH_SECRET/rotate", true],
      ["/dashboard/secrets/NO_SUCH_SECRET/delete", true],
      [`/dashboard/sandboxes/sbx_${"0".repeat(24)}/stop`, true],
      [`/dashboard/jobs/job_${"0".repeat(24)}/cancel`, true],
      [`/dashboard/apps/dep_${"0".repeat(24)}/stop`, true],
    ] as const) {
      const res = await fetch(stack.gateway.url + path, {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded", ...(withCookie ? { cookie } : {}) },
        body: form,
        redirect: "manual",
        signal: AbortSignal.timeout(10_000),
      });
      await res.arrayBuffer();
      if (res.status >= 500) statuses.push(`${path} ${JSON.stringify(form.slice(0, 40))}: ${res.status}`);
    }
  t.same(statuses, [], "no form is a server error");
  const keys = await browser.request("/dashboard/keys");
  t.equal((keys.text.match(/\/revoke\?/g) ?? []).length, (keysPage.text.match(/\/revoke\?/g) ?? []).length, "no forged form and no hostile name created a key");
  t.match((await browser.request("/dashboard/secrets")).text, /No secrets in this project/, "nor a secret");
});

t.test("the wrong type for every field: a 400 naming the field", async (t) => {
  const before = prober.failures.length;
  const bases: Array<[string, { [key: string]: Json }]> = [
    ["/v1/multipart", { filename: "a.bin", bytes: 3000, sha256: "0".repeat(64), manifest: "entrypoint: app:app" }],
    [`/v1/multipart/${upload.id}/finish`, { parts: [{ part_number: 1, sha256: "0".repeat(64) }] }],
    ["/v1/apps/deployments", { artifact_id: artifact.id }],
    ["/v1/secrets", { name: "FUZZ_TYPED", value: "v" }],
    ["/v1/secrets/FUZZ_SECRET", { value: "v" }],
    ["/v1/sandboxes", { cpu_mhz: 100, memory_mb: 64, disk_mb: 64, timeout_seconds: 5, idle_timeout_seconds: 5, metadata: { k: "v" }, env: { A: "1" }, secrets: ["FUZZ_SECRET"], network: "none" }],
    [`/v1/sandboxes/${sandbox.id}/exec`, { command: ["true"], cwd: "/workspace", env: { A: "1" }, stdin: "", timeout_seconds: 5, stream: false }],
    [`/v1/sandboxes/${sandbox.id}/timeout`, { timeout_seconds: 60 }],
    ["/v1/jobs", { command: ["true"], cwd: "/workspace", env: { A: "1" }, secrets: ["FUZZ_SECRET"], cpu_mhz: 100, memory_mb: 64, disk_mb: 64, timeout_seconds: 10, max_retries: 0, network: "none", metadata: { k: "v" } }],
  ];
  for (const [path, base] of bases)
    for (const { param, value, body } of wrongTypes(base)) {
      // null stands for "not given" in most optional fields, and a string command is a shell
      // line: valid bodies, left out (each would start a sandbox or a job).
      if (value === null || (param === "command" && typeof value === "string")) continue;
      await probe({ method: "POST", path, body, what: `POST ${path.slice(0, 40)} with ${param} = ${JSON.stringify(value)}`, expect: { status: 400, param } });
    }
  t.same(prober.failures.slice(before), []);
});

t.test("one tenant's hostile traffic does not fail another project's concurrent requests", async (t) => {
  const before = prober.failures.length;
  const hostileLoop = (async () => {
    for (let i = 0; i < 40; i++) {
      const id = rng.pick(HOSTILE_IDS);
      await Promise.all([
        probe({ method: "GET", path: `/v1/artifacts/${id}`, expect: { status: 404 } }),
        probe({ method: "POST", path: "/v1/multipart", body: nestedText(10_000), expect: { status: 400 } }),
        probe({ method: "GET", path: `/v1/traces?after=${id}`, expect: { status: 400 } }),
        probe({ method: "POST", path: "/v1/apps/deployments", body: mutate(rng, { artifact_id: artifact.id }), expect: { status: "4xx" } }),
      ]);
    }
  })();
  const normal: string[] = [];
  const normalLoop = (async () => {
    for (let i = 0; i < 5; i++) {
      const up = await fetch(stack.gateway.url + "/v1/artifacts", { method: "POST", body: uploadForm(`b${i}`), headers: { authorization: `Bearer ${b.key}` } });
      const body = (await up.json()) as { id?: string };
      if (up.status !== 200 || !body.id) normal.push(`upload: ${up.status}`);
      else {
        const content = await b.fetch(`/v1/artifacts/${body.id}/content`);
        if ((await content.text()) !== `b${i}`) normal.push(`content: ${content.status}`);
      }
      const listed = await b.fetch("/v1/traces?limit=5");
      if (listed.status !== 200) normal.push(`traces: ${listed.status}`);
      const chat = await b.client.chat.completions.create({ model: TEST_MODEL, messages: [{ role: "user", content: "Hi" }], max_tokens: 4 });
      if (chat.choices[0]?.finish_reason !== "length") normal.push("chat did not finish");
      const app = await hosted(stack.gateway.port, ADDRESS, "/", { method: "POST", key: TEST_KEY, body: "abc" });
      if (app.status !== 200 || app.body !== "3") normal.push(`app: ${app.status} ${app.body}`);
    }
  })();
  await Promise.all([hostileLoop, normalLoop]);
  t.same(normal, [], "every normal request of the other projects succeeded");
  t.same(prober.failures.slice(before), []);
});

t.test("afterwards every process is the one that started, and serves", async (t) => {
  await assertStillServing(t, hostile);
  for (const runner of stack.runners) t.equal(runner.child.exitCode, null, "the runner is alive");
  t.equal(host.child.exitCode, null, "the sandbox and app host is alive");
  const app = await hosted(stack.gateway.port, ADDRESS, "/", { method: "POST", key: TEST_KEY, body: "abcd" });
  t.equal(app.body, "4", "the app still answers");
  const current = await waitForDeployment(stack.gateway.url, TEST_KEY, deployment.id, ["healthy"]);
  t.equal(current.restarts, 0, "the app instance never restarted");
  // A fresh sandbox (the fuzzed ones may have been given a timeout of a second).
  const fresh = (await (await a.fetch("/v1/sandboxes", { method: "POST", body: json({ cpu_mhz: 100, memory_mb: 64, timeout_seconds: 30 }) })).json()) as { id: string };
  const exec = await a.fetch(`/v1/sandboxes/${fresh.id}/exec`, { method: "POST", body: json({ command: ["echo", "ok"] }) });
  t.match(await exec.json(), { stdout: "ok\n" }, "the sandbox host still runs commands");
  await a.fetch(`/v1/sandboxes/${fresh.id}`, { method: "DELETE" });
  await a.fetch(`/v1/sandboxes/${sandbox.id}`, { method: "DELETE" });
  t.same(stack.gateway.logs.filter((r) => r.level === "error"), [], "the gateway logged no error");
  t.same(host.logs.filter((r) => r.level === "error"), [], "the sandbox host logged no error");
  // A JetStream consumer that missed its heartbeats on a loaded machine restarts its actor: the
  // machine's doing, not a request's; any other error of the actor host fails the test.
  const actorErrors = stack.actors.logs.filter((r) => r.level === "error");
  const missedHeartbeats = actorErrors.filter((r) => (r.err as { message?: string } | undefined)?.message === "heartbeats missed");
  if (missedHeartbeats.length > 0) t.comment(`${missedHeartbeats.length} actor restart(s) after missed JetStream heartbeats (machine load)`);
  t.same(actorErrors.filter((r) => !missedHeartbeats.includes(r)), [], "the actor host logged no other error");
  t.same([...prober.failures, ...local.failures], [], `no breach in ${prober.sent + local.sent} requests (replay: FUZZ_SEED=${seed})`);
});
