// tier: slow (a stack of its own)
import t from "tap";
import { Kvm } from "@nats-io/kv";
import { startStack } from "../../harness/stack.js";
import { buckets } from "../../../lib/nats/subjects.js";
import { runCli } from "../../harness/cli.js";
import { loadKeyRing, SecretStore } from "../../../modules/secrets/mod.js";

// Secrets: write-only values, encrypted at rest, injected into sandboxes by name, and never in a
// response, an error or a log line.
const VALUE = "s3cr3t-Value-that-must-not-leak";
const ROTATED = "r0tated-Value-that-must-not-leak";
const env = { TRIBUTARY_SECRETS_MAX_VALUE_BYTES: "64", TRIBUTARY_SECRETS_MAX_PER_PROJECT: "3", TRIBUTARY_SECRETS_KEY: "k1:" + Buffer.alloc(32, 7).toString("base64") };
const stack = await startStack(t, { runners: 0, sandboxHosts: 1, env });
// Another project of the same organization.
const other = await stack.project("secrets-other");
const post = (path: string, body: unknown, key?: string) =>
  stack.fetch(path, { method: "POST", body: JSON.stringify(body), headers: key ? { authorization: `Bearer ${key}` } : {} });
const json = async (res: Response) => (await res.json()) as any;
const bodies: string[] = [];
const text = async (res: Response) => {
  const body = await res.text();
  bodies.push(body);
  return body;
};

t.test("create, list, get, rotate, delete: metadata only", async (t) => {
  const created = await post("/v1/secrets", { name: "API_TOKEN", value: VALUE });
  t.equal(created.status, 200);
  t.same(Object.keys(JSON.parse(await text(created))).sort(), ["created_at", "name", "object", "updated_at", "version"]);
  const dup = await post("/v1/secrets", { name: "API_TOKEN", value: "x" });
  t.equal(dup.status, 409);
  t.match(JSON.parse(await text(dup)).error, { param: "name", code: "secret_exists" });
  t.match(JSON.parse(await text(await stack.fetch("/v1/secrets"))).data, [{ name: "API_TOKEN", version: 1 }]);
  t.match(JSON.parse(await text(await stack.fetch("/v1/secrets/API_TOKEN"))), { name: "API_TOKEN", version: 1 });
  t.match(JSON.parse(await text(await post("/v1/secrets/API_TOKEN", { value: ROTATED }))), { name: "API_TOKEN", version: 2 });
  t.equal((await post("/v1/secrets/NOPE", { value: "x" })).status, 404);
  t.equal((await stack.fetch("/v1/secrets/API_TOKEN", { headers: { authorization: `Bearer ${other.key}` } })).status, 404, "another project sees nothing");
});

t.test("values are encrypted in KV", async (t) => {
  const nc = await stack.nats.connect();
  t.teardown(() => nc.close());
  const kv = await new Kvm(nc).open(buckets.secrets);
  const keys: string[] = [];
  // Besides the secrets: the project's counter of them (<project>.index.admitted, no value in it).
  for await (const k of await kv.keys()) if (!k.endsWith(".index.admitted")) keys.push(k);
  t.equal(keys.length, 1);
  const raw = (await kv.get(keys[0]!))!.string();
  t.notMatch(raw, VALUE);
  t.notMatch(raw, ROTATED);
  t.notMatch(raw, Buffer.from(ROTATED).toString("base64"));
  t.match(JSON.parse(raw), { key_id: "k1", version: 2 });
});

t.test("injected into a sandbox by name; an unknown name is refused", async (t) => {
  const sandbox = await json(await post("/v1/sandboxes", { secrets: ["API_TOKEN"], env: { PLAIN: "visible" } }));
  t.match(sandbox, { status: "running", secrets: ["API_TOKEN"], env_names: ["PLAIN"] });
  t.notMatch(JSON.stringify(sandbox), ROTATED);
  const exec = await json(await post(`/v1/sandboxes/${sandbox.id}/exec`, { command: 'test "$API_TOKEN" = "$EXPECTED" && echo same; echo $PLAIN', env: { EXPECTED: ROTATED } }));
  t.equal(exec.stdout, "same\nvisible\n");
  const missing = await post("/v1/sandboxes", { secrets: ["NOT_THERE"] });
  t.equal(missing.status, 400);
  t.match(JSON.parse(await text(missing)).error, { param: "secrets", code: "secret_not_found" });
  t.equal((await post("/v1/sandboxes", { secrets: ["API_TOKEN"] }, other.key)).status, 400, "another project's secret is not found");
});

t.test("limits at their edges", async (t) => {
  t.equal((await post("/v1/secrets", { name: "A".repeat(128), value: "x".repeat(64) })).status, 200, "128-character name, 64-byte value");
  const long = await post("/v1/secrets", { name: "B".repeat(129), value: "x" });
  t.equal(long.status, 400);
  t.equal((await json(long)).error.param, "name");
  const big = await post("/v1/secrets", { name: "BIG", value: "x".repeat(65) });
  t.equal(big.status, 400);
  t.equal((await json(big)).error.param, "value");
  for (const name of ["lower", "1ST", "A-B", ""]) t.equal((await post("/v1/secrets", { name, value: "x" })).status, 400, `name ${JSON.stringify(name)}`);
  t.equal((await post("/v1/secrets", { name: "THIRD", value: "x" })).status, 200);
  const fourth = await post("/v1/secrets", { name: "FOURTH", value: "x" });
  t.equal(fourth.status, 400, "the per-project count");
  t.equal((await json(fourth)).error.code, "secret_limit_reached");
  t.equal((await stack.fetch("/v1/secrets/THIRD", { method: "DELETE" })).status, 200);
  t.equal((await stack.fetch("/v1/secrets/THIRD", { method: "DELETE" })).status, 404);
});

t.test("master key rotation: every data key re-wrapped, values intact", async (t) => {
  const k2 = "k2:" + Buffer.alloc(32, 9).toString("base64");
  const rewrap = async (previous: string) => {
    const { code, stdout, stderr } = await runCli(["admin", "secrets", "rewrap"], {
      env: { NATS_URL: stack.nats.url, ...stack.nats.env("admin"), TRIBUTARY_SECRETS_KEY: k2, TRIBUTARY_SECRETS_PREVIOUS_KEYS: previous },
    });
    t.equal(code, 0, stderr);
    return stdout;
  };
  t.match(await rewrap(env.TRIBUTARY_SECRETS_KEY), /re-wrapped 2 data keys with master key k2; 0 were/);
  t.match(await rewrap(""), /re-wrapped 0 data keys with master key k2; 2 were/, "idempotent, and needs no old key once done");
  const nc = await stack.nats.connect();
  t.teardown(() => nc.close());
  const kv = await new Kvm(nc).open(buckets.secrets);
  const raw = JSON.parse((await kv.get(`${stack.projectId}.API_TOKEN`))!.string());
  t.equal(raw.key_id, "k2");
  const store = await SecretStore.open(nc, loadKeyRing(k2, "", "/nonexistent"));
  t.same((await store.reveal(stack.projectId, ["API_TOKEN"])).values, { API_TOKEN: ROTATED }, "the new key alone opens it");
  const old = await SecretStore.open(nc, loadKeyRing(env.TRIBUTARY_SECRETS_KEY, "", "/nonexistent"));
  await t.rejects(old.reveal(stack.projectId, ["API_TOKEN"]), "the old key no longer does");
});

t.test("no value in any response body or log line", async (t) => {
  for (const body of bodies) {
    t.notMatch(body, VALUE);
    t.notMatch(body, ROTATED);
  }
  for (const proc of [stack.gateway, ...stack.sandboxHosts, stack.actors])
    for (const rec of proc.logs) {
      const line = JSON.stringify(rec);
      if (line.includes(VALUE) || line.includes(ROTATED)) t.fail(`a value in a log line: ${line}`);
    }
  t.pass("checked");
});
