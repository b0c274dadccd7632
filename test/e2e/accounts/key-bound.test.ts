import t from "tap";
import { startNats } from "../../harness/processes.js";
import { AccountStore } from "../../../modules/accounts/mod.js";

// An organization may make at most MAX_KEYS_PER_ORGANIZATION (10,000) API keys, revoked ones
// included: every gateway caches every key, so a tenant creating keys in a loop must hit a wall.
// The bound is tested at its edge with a store whose bound is 3 (the mechanism is the same).
// Names with control characters are refused too.

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

t.test("names with control characters are refused", async (t) => {
  for (const name of ["a\u0000b", "line\nbreak", "tab\there", "del\u007f"])
    t.match(await store.createOrganization({ name }).catch(refusal), { _tag: "InvalidParam", param: "name" }, JSON.stringify(name));
  t.ok(await store.createOrganization({ name: "Ünïcödé – fine" }), "other characters are fine");
});
