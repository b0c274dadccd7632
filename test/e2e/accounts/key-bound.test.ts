import t from "tap";
import { startNats } from "../../harness/processes.js";
import { AccountStore } from "../../../modules/accounts/mod.js";
import { Admission, ADMISSION_GRACE_MS } from "../../../lib/nats/admission.js";

// An organization may make at most MAX_KEYS_PER_ORGANIZATION (10,000) API keys, revoked ones
// included: every gateway caches every key, so a tenant creating keys in a loop must hit a wall.
// The bound is tested at its edge with a store whose bound is 3 (the mechanism is the same).
// Admission goes through a counter record (compare-and-set), so parallel creates from several
// processes (here: stores on their own connections) at the edge cannot overshoot, and a create
// that died between admission and its write frees its slot once past the grace. Names with
// control characters are refused too.

const BOUND = 3;
const nats = await startNats();
t.teardown(() => nats.stop());
const nc = await nats.connect("admin");
t.teardown(() => nc.close());
const store = await AccountStore.open(nc, { maxKeysPerOrganization: BOUND });
const { organization, project } = await store.createOrganization({ name: "Key Loop" });
const refusal = (err: unknown) => err as { _tag?: string; param?: string; code?: string };

t.test("the key bound at its edge, revoked keys included", async (t) => {
  const first = await store.createApiKey({ projectId: project.id, name: "first" });
  await store.revokeApiKey(first.key.id);
  await store.createApiKey({ organizationId: organization.id, name: "second" });
  const last = await store.createApiKey({ projectId: project.id, name: "last" });
  t.match(last.key, { name: "last" }, `key ${BOUND}: made`);
  const over = await store.createApiKey({ projectId: project.id, name: "one too many" }).catch(refusal);
  t.match(over, { _tag: "InvalidParam", param: "name", code: "too_many_keys" }, `key ${BOUND + 1}: refused`);
  const other = await store.createOrganization({ name: "Other" });
  t.ok(await store.createApiKey({ projectId: other.project.id }), "another organization has its own bound");
});

t.test("parallel creates at the edge: exactly one gets the last key", async (t) => {
  const { organization: org, project: proj } = await store.createOrganization({ name: "Racers" });
  for (let i = 0; i < BOUND - 1; i++) await store.createApiKey({ projectId: proj.id, name: `k${i}` });
  const connections = await Promise.all(Array.from({ length: 5 }, () => nats.connect("admin")));
  t.teardown(() => Promise.all(connections.map((c) => c.close())));
  const stores = await Promise.all(connections.map((c) => AccountStore.open(c, { maxKeysPerOrganization: BOUND })));
  const results = await Promise.all(stores.map((s, i) => s.createApiKey({ organizationId: org.id, name: `racer ${i}` }).then((k) => k, refusal)));
  const made = results.filter((r) => "secret" in (r as object));
  t.equal(made.length, 1, "one create got the last key");
  for (const r of results.filter((r) => !("secret" in (r as object))))
    t.match(r, { _tag: "InvalidParam", param: "name", code: "too_many_keys", message: new RegExp(`at most ${BOUND} API keys`) }, "the others: too_many_keys");
  t.equal((await store.listApiKeys({ organizationId: org.id })).length, BOUND, "the organization holds exactly the bound");
});

t.test("a create that died between admission and its write frees its slot past the grace", async (t) => {
  const { organization: org, project: proj } = await store.createOrganization({ name: "Crashes" });
  for (let i = 0; i < BOUND - 1; i++) await store.createApiKey({ projectId: proj.id });
  // The counter as the store keeps it; admissions as a dying process would leave them.
  const counter = (now: number) =>
    new Admission({ kv: store.kv, key: `keycount.${org.id}`, max: BOUND, now: () => now, written: async () => false, existing: async () => [] });
  t.ok((await counter(Date.now()).admit("key_dyingNow")).admitted, "a fresh admission takes the last slot");
  t.match(await store.createApiKey({ projectId: proj.id }).catch(refusal), { code: "too_many_keys" }, "it holds the slot within the grace");
  await counter(Date.now()).settle("key_dyingNow", false);
  t.ok((await counter(Date.now() - ADMISSION_GRACE_MS - 1000).admit("key_diedLongAgo")).admitted, "an admission from before the grace");
  t.ok(await store.createApiKey({ projectId: proj.id, name: "after a crash" }), "its slot is freed (its key was never written)");
  t.match(await store.createApiKey({ projectId: proj.id }).catch(refusal), { code: "too_many_keys" }, "and the bound holds again");
});

t.test("names with control characters are refused", async (t) => {
  for (const name of ["a\u0000b", "line\nbreak", "tab\there", "del\u007f"])
    t.match(await store.createOrganization({ name }).catch(refusal), { _tag: "InvalidParam", param: "name" }, JSON.stringify(name));
  t.ok(await store.createOrganization({ name: "Ünïcödé – fine" }), "other characters are fine");
});
