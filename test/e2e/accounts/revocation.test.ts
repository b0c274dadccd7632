// tier: slow (a stack of its own)
import t from "tap";
import { Kvm } from "@nats-io/kv";
import { startStack } from "../../harness/stack.js";
import { startGateway, TEST_KEY } from "../../harness/processes.js";
import { buckets } from "../../../lib/nats/subjects.js";
import { sha256Hex, AccountStore } from "../../../modules/accounts/mod.js";

// A revocation reaches every gateway within a second: each caches keys, and each watches the
// accounts bucket. Three gateways, each with the key cached, are polled while the key is revoked.

const stack = await startStack(t);
const more = await Promise.all([startGateway(stack.nats.url), startGateway(stack.nats.url)]);
for (const g of more) t.teardown(() => g.kill());
const gateways = [stack.gateway, ...more];

t.test("a key revoked through the admin service is refused by every gateway within a second", async (t) => {
  const { project } = await stack.admin.createOrganization({ name: "Revocation", projectName: "" });
  const { key, secret } = await stack.admin.createApiKey({ projectId: project!.id, organizationId: "", name: "" });
  const get = (url: string) => fetch(url + "/v1/models", { headers: { authorization: `Bearer ${secret}` } }).then((r) => r.status);
  // Warm every gateway's cache: from now on, none of them reads the key from KV by itself.
  t.same(await Promise.all(gateways.map((g) => get(g.url))), [200, 200, 200]);

  const nc = await stack.nats.connect();
  t.teardown(() => nc.close());
  const kv = await new Kvm(nc).open(buckets.accounts);

  let polling = true;
  const refusedAt: Array<number | undefined> = gateways.map(() => undefined);
  const statuses = new Set<number>();
  const pollers = gateways.map(async (g, i) => {
    while (polling && refusedAt[i] === undefined) {
      const status = await get(g.url);
      statuses.add(status);
      if (status === 401) refusedAt[i] = Date.now();
      else await new Promise((r) => setTimeout(r, 5));
    }
  });
  await stack.admin.revokeApiKey({ keyId: key!.id });
  // The moment the revocation was stored, by the NATS server's clock (same machine).
  const revokedAt = (await kv.get(`apikey.${sha256Hex(secret)}`))!.created.getTime();
  const deadline = setTimeout(() => (polling = false), 5_000);
  await Promise.all(pollers);
  clearTimeout(deadline);

  t.same([...statuses].sort(), [200, 401], "only 200 before and 401 after");
  refusedAt.forEach((at, i) => {
    t.ok(at !== undefined, `gateway ${i + 1} refuses the key`);
    const lag = at! - revokedAt;
    t.ok(lag < 1000, `gateway ${i + 1} refused it ${lag} ms after the revocation was stored`);
  });
});

t.test("a key created after the gateways cached its absence works on all of them at once", async (t) => {
  // Gateways remember unknown keys too (a flood of wrong keys costs no KV reads); the watch must
  // clear that memory when the key appears. The key is registered straight in KV, as the
  // configured keys are, so the test knows it before it exists.
  const { project, organization } = await stack.admin.createOrganization({ name: "Late key", projectName: "" });
  const secret = `sk-proj-${"late".repeat(12)}`;
  const get = (url: string) => fetch(url + "/v1/models", { headers: { authorization: `Bearer ${secret}` } }).then((r) => r.status);
  t.same(await Promise.all(gateways.map((g) => get(g.url))), [401, 401, 401]);

  const nc = await stack.nats.connect();
  t.teardown(() => nc.close());
  const store = await AccountStore.open(nc);
  await store.registerKey(secret, { organizationId: organization!.id, projectId: project!.id, name: "late" });
  const deadline = Date.now() + 1000;
  let statuses: number[] = [];
  while (Date.now() < deadline) {
    statuses = await Promise.all(gateways.map((g) => get(g.url)));
    if (statuses.every((s) => s === 200)) break;
    await new Promise((r) => setTimeout(r, 10));
  }
  t.same(statuses, [200, 200, 200], "accepted by every gateway within a second");
});

t.test("the configured key is revocable like any other, and stays revoked when gateways restart", async (t) => {
  const keys = await stack.admin.listApiKeys({ organizationId: "org-local", projectId: "", includeRevoked: false });
  const configured = keys.keys.find((k) => TEST_KEY.startsWith(k.prefix));
  t.ok(configured, "TRIBUTARY_API_KEY is listed in the local organization");
  await stack.admin.revokeApiKey({ keyId: configured!.id });
  const restarted = await startGateway(stack.nats.url); // registers TRIBUTARY_API_KEY again
  t.teardown(() => restarted.kill());
  const res = await fetch(restarted.url + "/v1/models", { headers: { authorization: `Bearer ${TEST_KEY}` } });
  t.equal(res.status, 401, "re-registering did not bring it back");
  const again = await stack.admin.listApiKeys({ organizationId: "org-local", projectId: "", includeRevoked: true });
  t.equal(again.keys.filter((k) => TEST_KEY.startsWith(k.prefix)).length, 1, "still one key, revoked");
});
