import t from "tap";
import { startStack } from "../../harness/stack.js";

// Every sandbox route is scoped to the key's project (another project's sandbox is a 404), and
// every bound of the sandbox API holds at its edge: at the limit passes, one past it fails,
// naming the parameter.
const OTHER_KEY = "sk-test-sandboxes-other";
const stack = await startStack(t, {
  runners: 0,
  sandboxHosts: 1,
  gatewayEnv: { TRIBUTARY_API_KEYS: `${OTHER_KEY}=proj-sandboxes-other`, TRIBUTARY_SANDBOX_MAX_MEMORY_MB: "1024", TRIBUTARY_SANDBOX_MAX_PER_PROJECT: "3" },
});
const post = (path: string, body: unknown, key?: string) =>
  stack.fetch(path, { method: "POST", body: JSON.stringify(body), headers: key ? { authorization: `Bearer ${key}` } : {} });
const json = async (res: Response) => (await res.json()) as any;
const small = { memory_mb: 32, disk_mb: 1, cpu_mhz: 100 };

const mine = await json(await post("/v1/sandboxes", { ...small, metadata: { team: "a" } }));

t.test("another project's sandbox is a 404 on every route", async (t) => {
  const other = { authorization: `Bearer ${OTHER_KEY}` };
  t.equal((await stack.fetch(`/v1/sandboxes/${mine.id}`, { headers: other })).status, 404);
  t.equal((await post(`/v1/sandboxes/${mine.id}/exec`, { command: "true" }, OTHER_KEY)).status, 404);
  t.equal((await post(`/v1/sandboxes/${mine.id}/stop`, {}, OTHER_KEY)).status, 404);
  t.equal((await post(`/v1/sandboxes/${mine.id}/timeout`, { timeout_seconds: 10 }, OTHER_KEY)).status, 404);
  t.equal((await stack.fetch(`/v1/sandboxes/${mine.id}/files?path=x`, { method: "POST", body: "x", headers: other })).status, 404);
  t.equal((await stack.fetch(`/v1/sandboxes/${mine.id}/files/content?path=x`, { headers: other })).status, 404);
  t.equal((await stack.fetch(`/v1/sandboxes/${mine.id}`, { method: "DELETE", headers: other })).status, 404);
  t.same((await json(await stack.fetch("/v1/sandboxes", { headers: other }))).data, []);
  t.match(await json(await stack.fetch(`/v1/sandboxes/${mine.id}`)), { status: "running" }, "untouched");
});

t.test("ids by shape", async (t) => {
  for (const id of ["sbx_short", "x".repeat(3000), "sbx_" + "A".repeat(25), "../../v1/secrets"]) {
    const res = await stack.fetch(`/v1/sandboxes/${encodeURIComponent(id)}`);
    t.equal(res.status, 404, `${id.slice(0, 30)} -> ${(await res.text()).slice(0, 200)}`);
  }
});

t.test("create bounds at their edges", async (t) => {
  const edge = async (body: Record<string, unknown>, ok: boolean, param?: string) => {
    const res = await post("/v1/sandboxes", { ...small, ...body });
    const out = await json(res);
    if (ok) {
      t.equal(res.status, 200, JSON.stringify(body));
      await post(`/v1/sandboxes/${out.id}/stop`, {});
    } else {
      t.equal(res.status, 400, JSON.stringify(body).slice(0, 80));
      t.equal(out.error.param, param);
    }
  };
  await edge({ timeout_seconds: 86_400 }, true);
  await edge({ timeout_seconds: 86_401 }, false, "timeout_seconds");
  await edge({ timeout_seconds: 0 }, false, "timeout_seconds");
  await edge({ memory_mb: 1024 }, true);
  await edge({ memory_mb: 1025 }, false, "memory_mb");
  await edge({ idle_timeout_seconds: 86_401 }, false, "idle_timeout_seconds");
  await edge({ env: { "1BAD": "x" } }, false, "env.1BAD");
  await edge({ env: Object.fromEntries(Array.from({ length: 64 }, (_, i) => [`V${i}`, "x"])) }, true);
  await edge({ env: Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`V${i}`, "x"])) }, false, "env");
  await edge({ metadata: Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, "x"])) }, false, "metadata");
  await edge({ network: "internet" }, false, "network");
  await edge({ image: "ubuntu" }, false, "image");
  const empty = await stack.fetch("/v1/sandboxes", { method: "POST", body: "" });
  t.equal(empty.status, 400, "an empty body is not {}");
});

t.test("exec bounds at their edges", async (t) => {
  const edge = async (body: Record<string, unknown>, status: number, param?: string) => {
    const res = await post(`/v1/sandboxes/${mine.id}/exec`, body);
    const out = await res.text();
    t.equal(res.status, status, `${JSON.stringify(body).slice(0, 60)} -> ${out.slice(0, 300)}`);
    if (param) t.equal(JSON.parse(out).error.param, param);
  };
  await edge({ command: Array.from({ length: 1024 }, (_, i) => (i === 0 ? "true" : "x")) }, 200);
  await edge({ command: Array.from({ length: 1025 }, () => "x") }, 400, "command");
  await edge({ command: [] }, 400, "command");
  await edge({ command: "" }, 400, "command");
  await edge({ command: "true", timeout_seconds: 3600 }, 200);
  await edge({ command: "true", timeout_seconds: 3601 }, 400, "timeout_seconds");
  await edge({ command: "true", cwd: "x".repeat(4097) }, 400, "cwd");
  await edge({ command: "true", cwd: "/etc" }, 400, "cwd");
  await edge({}, 400, "command");
  // (A path past 4,096 characters cannot arrive: the request head is bounded at 4 KiB.)
  const nul = await stack.fetch(`/v1/sandboxes/${mine.id}/files/content?path=a%00b`);
  t.equal(nul.status, 400);
  t.equal((await stack.fetch(`/v1/sandboxes/${mine.id}/files/content`)).status, 400, "a missing path");
  t.equal((await stack.fetch(`/v1/sandboxes/${mine.id}/files?path=dir&limit=1001`)).status, 400);
});

t.test("listing: filters and pages", async (t) => {
  const second = await json(await post("/v1/sandboxes", { ...small, metadata: { team: "b" } }));
  const byTeam = await json(await stack.fetch("/v1/sandboxes?metadata[team]=b"));
  t.same(byTeam.data.map((s: { id: string }) => s.id), [second.id]);
  const page = await json(await stack.fetch("/v1/sandboxes?limit=1&status=running"));
  t.equal(page.data.length, 1);
  t.equal(page.has_more, true);
  const next = await json(await stack.fetch(`/v1/sandboxes?limit=1&status=running&after=${page.last_id}`));
  t.not(next.data[0].id, page.data[0].id);
  t.equal((await stack.fetch("/v1/sandboxes?status=zombie")).status, 400);
  // The per-project count: 3 not yet stopped.
  await post("/v1/sandboxes", small);
  const over = await post("/v1/sandboxes", small);
  t.equal(over.status, 400);
  t.equal((await json(over)).error.code, "sandbox_limit_reached");
});
