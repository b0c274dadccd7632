import t from "tap";
import { Kvm } from "@nats-io/kv";
import { sharedStackWithGateway } from "../../harness/shared-stack.js";
import { buckets } from "../../../lib/nats/subjects.js";

// Every sandbox route is scoped to the key's project (another project's sandbox is a 404), and
// every bound of the sandbox API holds at its edge: at the limit passes, one past it fails,
// naming the parameter.
// The bounds are the gateway's: a gateway of this file's own on the shared stack (and its sandbox host).
const stack = await sharedStackWithGateway(t, { TRIBUTARY_SANDBOX_MAX_MEMORY_MB: "1024", TRIBUTARY_SANDBOX_MAX_PER_PROJECT: "3" });
const OTHER_KEY = (await stack.project("other")).key;
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

// The limit counts sandboxes not yet stopped from the project's live index (a compare-and-set
// record bounded by the limit), never its 7 days of history.
const liveIds = async (): Promise<string[]> => {
  const ids: string[] = [];
  for (const status of ["starting", "running", "stopping"])
    ids.push(...(await json(await stack.fetch(`/v1/sandboxes?limit=100&status=${status}`))).data.map((s: { id: string }) => s.id));
  return ids;
};
const stopAll = async () => {
  await Promise.all((await liveIds()).map((id) => post(`/v1/sandboxes/${id}/stop`, {})));
};
const limitReached = async (res: Response) => res.status === 400 && (await json(res)).error.code === "sandbox_limit_reached";

t.test("racing creates at the limit: exactly the limit pass", async (t) => {
  await stopAll();
  const results = await Promise.all(Array.from({ length: 7 }, () => post("/v1/sandboxes", small)));
  t.equal(results.filter((r) => r.status === 200).length, 3, "the limit (3) pass");
  const refused = results.filter((r) => r.status !== 200);
  t.equal(refused.length, 4);
  for (const r of refused) t.ok(await limitReached(r), "one past it fails: sandbox_limit_reached");
  t.equal((await liveIds()).length, 3);
  await stopAll();
});

t.test("stopped sandboxes are not counted; the listing pages through them", async (t) => {
  await stopAll();
  const made: string[] = [];
  for (let round = 0; round < 3; round++) {
    const batch = await Promise.all(Array.from({ length: 3 }, async () => json(await post("/v1/sandboxes", small))));
    made.push(...batch.map((s) => s.id));
    await stopAll();
  }
  t.equal(made.length, 9);
  const kept = await Promise.all(Array.from({ length: 3 }, () => post("/v1/sandboxes", small)));
  t.same(kept.map((r) => r.status), [200, 200, 200], "9 stopped do not count");
  t.ok(await limitReached(await post("/v1/sandboxes", small)), "the 4th live one does");
  // Every sandbox once, newest first, 4 at a time.
  const seen: string[] = [];
  let after = "";
  for (let pages = 0; pages < 20; pages++) {
    const page = await json(await stack.fetch(`/v1/sandboxes?limit=4${after ? `&after=${after}` : ""}`));
    t.ok(page.data.length <= 4);
    seen.push(...page.data.map((s: { id: string }) => s.id));
    if (!page.has_more) break;
    after = page.last_id;
  }
  t.equal(new Set(seen).size, seen.length, "no sandbox twice");
  t.same([...seen].sort().reverse(), seen, "newest first");
  for (const id of made) t.ok(seen.includes(id), "every stopped one listed");
  const unknown = await stack.fetch(`/v1/sandboxes?after=sbx_${"Z".repeat(24)}`);
  t.equal(unknown.status, 400, "an after naming no sandbox of the project");
  t.equal((await json(unknown)).error.param, "after");
  const stopped = await json(await stack.fetch("/v1/sandboxes?limit=2&status=stopped&order=asc"));
  t.equal(stopped.data.length, 2);
  t.equal(stopped.has_more, true);
  t.ok(stopped.data.every((s: { status: string }) => s.status === "stopped"));
  await stopAll();
});

t.test("the count recovers when a sandbox expires", async (t) => {
  await stopAll();
  await Promise.all([post("/v1/sandboxes", small), post("/v1/sandboxes", small)]);
  // Long enough that the probe below comes before it expires on a loaded machine.
  const short = await json(await post("/v1/sandboxes", { ...small, timeout_seconds: 4 }));
  t.ok(await limitReached(await post("/v1/sandboxes", small)), "at the limit");
  let status = "";
  for (let i = 0; i < 150 && status !== "stopped"; i++) {
    await new Promise((r) => setTimeout(r, 200));
    status = (await json(await stack.fetch(`/v1/sandboxes/${short.id}`))).status;
  }
  t.equal(status, "stopped", "it expired");
  t.equal((await post("/v1/sandboxes", small)).status, 200, "its place is free again");
  await stopAll();
});

t.test("an admission a crash left without a record does not hold the project at its limit", async (t) => {
  await stopAll();
  const probe = await json(await post("/v1/sandboxes", small));
  const nc = await stack.nats.connect();
  t.teardown(() => nc.close());
  const kv = await new Kvm(nc).open(buckets.sandboxes);
  let indexKey = "";
  for await (const key of await kv.keys("*.index.live")) if ((await kv.get(key))!.string().includes(probe.id)) indexKey = key;
  t.ok(indexKey, "the project's live index");
  await post(`/v1/sandboxes/${probe.id}/stop`, {});
  // Three ids admitted long ago whose creates died before writing their records.
  const entry = await kv.get(indexKey);
  const index = JSON.parse(entry!.string());
  const old = Math.floor(Date.now() / 1000) - 3600;
  index.sandboxes = ["A", "B", "C"].map((c) => ({ id: "sbx_" + c.repeat(24), since: old }));
  index.checked_at = old;
  await kv.update(indexKey, JSON.stringify(index), entry!.revision);
  const res = await post("/v1/sandboxes", small);
  t.equal(res.status, 200, "reconciled at the limit: the leftovers are dropped");
  const after = JSON.parse((await kv.get(indexKey))!.string());
  t.same(after.sandboxes.map((s: { id: string }) => s.id), [(await json(res)).id]);
  await stopAll();
});
