import t from "tap";
import { startNats } from "../../harness/processes.js";
import { AccountStore } from "../../../modules/accounts/mod.js";
import { openAIError } from "../../../modules/openai/mod.js";
import { isDomainError } from "../../../modules/errors/mod.js";
import { getRecord } from "../../../lib/nats/kv-records.js";
import { admissionRecord } from "../../../lib/nats/admission.js";

// An organization has at most MAX_PROJECTS_PER_ORGANIZATION (1,000) projects: every dashboard
// page lists them. The bound is tested at its edge with stores whose bound is 3 (the mechanism is
// the same). Admission goes through a counter record (compare-and-set), so parallel creates from
// several processes (here: stores on their own connections) cannot overshoot it; a create whose
// caller-chosen id is taken fails as it always did (409 already_exists) and takes no place.

const BOUND = 3;
const nats = await startNats();
t.teardown(() => nats.stop());
const nc = await nats.connect("admin");
t.teardown(() => nc.close());
const store = await AccountStore.open(nc, { maxProjectsPerOrganization: BOUND });
/** What a client would get: the gateway's one mapping of domain errors to OpenAI's error. */
const refusal = (err: unknown) => {
  if (!isDomainError(err)) throw err;
  const { status, body } = openAIError(err, "req_test");
  return { status, ...body.error };
};
const tooMany = { status: 400, type: "invalid_request_error", param: "name", code: "too_many_projects", message: `An organization has at most ${BOUND} projects.` };
const taken = { status: 409, param: "project_id", code: "already_exists" };
const projectIds = async (orgId: string) => (await store.listProjects(orgId)).map((p) => p.id);

t.test("the project bound at its edge: the default project counts", async (t) => {
  const { organization } = await store.createOrganization({ name: "Edge" });
  t.ok(await store.createProject({ organizationId: organization.id, name: "second" }), "project 2: made");
  t.match(await store.createProject({ organizationId: organization.id, name: "last" }), { name: "last" }, `project ${BOUND}: made`);
  t.match(await store.createProject({ organizationId: organization.id, name: "one too many" }).catch(refusal), tooMany, `project ${BOUND + 1}: refused`);
  t.equal((await projectIds(organization.id)).length, BOUND);
  const other = await store.createOrganization({ name: "Other" });
  t.ok(await store.createProject({ organizationId: other.organization.id, name: "p" }), "another organization has its own bound");
});

t.test("parallel creates at the edge: exactly one gets the last place", async (t) => {
  const { organization } = await store.createOrganization({ name: "Racers" });
  for (let i = 1; i < BOUND - 1; i++) await store.createProject({ organizationId: organization.id, name: `p${i}` });
  const connections = await Promise.all(Array.from({ length: 5 }, () => nats.connect("admin")));
  t.teardown(() => Promise.all(connections.map((c) => c.close())));
  const stores = await Promise.all(connections.map((c) => AccountStore.open(c, { maxProjectsPerOrganization: BOUND })));
  const results = await Promise.all(stores.map((s, i) => s.createProject({ organizationId: organization.id, name: `racer ${i}` }).catch(refusal)));
  const made = results.filter((r) => "organization_id" in r);
  t.equal(made.length, 1, "one create got the last project");
  const refused = results.filter((r) => !("organization_id" in r));
  t.equal(refused.length, 4);
  for (const r of refused) t.match(r, tooMany, "the others: 400 too_many_projects naming the param");
  t.equal((await projectIds(organization.id)).length, BOUND, "the organization holds exactly the bound");
});

t.test("a taken id fails as it always did and takes no place", async (t) => {
  const { organization, project: first } = await store.createOrganization({ name: "Ids", projectId: "proj_ids_first" });
  // One place left after the default project and this one.
  await store.createProject({ organizationId: organization.id, name: "second", id: "proj_ids_second" });
  for (const id of [first.id, "proj_ids_second"])
    t.match(await store.createProject({ organizationId: organization.id, name: "again", id }).catch(refusal), taken, `${id}: 409 already_exists`);
  // Five creates of one new id at once (stores with room for all five): one makes it, the others
  // find it taken, and it takes one place: the counter holds the three projects, nothing pending.
  const connections = await Promise.all(Array.from({ length: 5 }, () => nats.connect("admin")));
  t.teardown(() => Promise.all(connections.map((c) => c.close())));
  const stores = await Promise.all(connections.map((c) => AccountStore.open(c, { maxProjectsPerOrganization: BOUND + 5 })));
  const same = await Promise.all(stores.map((s) => s.createProject({ organizationId: organization.id, name: "same", id: "proj_ids_same" }).catch(refusal)));
  t.equal(same.filter((r) => "organization_id" in r).length, 1, "one create of the id made it");
  for (const r of same.filter((r) => !("organization_id" in r))) t.match(r, taken, "the others: 409 already_exists");
  const counter = await getRecord(store.kv, `projectcount.${organization.id}`, admissionRecord);
  t.same(counter?.value, { counts: [{ at: 0, n: 3 }], pending: [] }, "the counter: three projects, the repeats counted nowhere");
  t.match(await store.createProject({ organizationId: organization.id, name: "over" }).catch(refusal), tooMany, `the bound (${BOUND}) is reached`);
  t.match(await store.createProject({ organizationId: organization.id, name: "again", id: first.id }).catch(refusal), taken, "a taken id at the bound: still 409 already_exists");
  const roomier = await AccountStore.open(nc, { maxProjectsPerOrganization: BOUND + 1 });
  t.match(await roomier.createProject({ organizationId: organization.id, name: "fourth" }), { name: "fourth" }, "with a bound of 4, one place was left");
  t.equal((await projectIds(organization.id)).length, BOUND + 1);
});

t.test("an organization's own projects count: the default and the configured ones", async (t) => {
  const { organization } = await store.createOrganization({ name: "Registered" });
  t.ok(await store.registerProject({ id: "proj_reg_1", organization_id: organization.id, name: "configured", created_at: 0 }), "a configured project");
  t.notOk(await store.registerProject({ id: "proj_reg_1", organization_id: organization.id, name: "configured", created_at: 0 }), "registered again: left as it is");
  t.ok(await store.createProject({ organizationId: organization.id, name: "third" }));
  t.match(await store.createProject({ organizationId: organization.id, name: "fourth" }).catch(refusal), tooMany);
});

t.test("a create with an existing organization's id is refused and writes nothing", async (t) => {
  const { organization } = await store.createOrganization({ name: "Existing", projectId: "proj_existing_default" });
  await store.createProject({ organizationId: organization.id, name: "second" });
  const before = { projects: await projectIds(organization.id), counter: await getRecord(store.kv, `projectcount.${organization.id}`, admissionRecord) };
  const orgTaken = { status: 409, param: "organization_id", code: "already_exists", message: `Organization ${organization.id} already exists.` };
  t.match(await store.createOrganization({ id: organization.id, name: "Again" }).catch(refusal), orgTaken, "a new default project: 409 already_exists");
  t.match(await store.createOrganization({ id: organization.id, name: "Again", projectId: "proj_existing_again" }).catch(refusal), orgTaken, "a chosen project id: the same");
  t.match(await store.createOrganization({ id: organization.id, name: "Again", projectId: "proj_existing_default" }).catch(refusal), orgTaken, "its own default project's id: the same");
  t.same(await projectIds(organization.id), before.projects, "its projects are as they were");
  t.notOk(await store.findProject("proj_existing_again"), "the refused default project exists nowhere");
  t.same(await getRecord(store.kv, `projectcount.${organization.id}`, admissionRecord), before.counter, "its counter is untouched");
  t.match(await store.getOrganization(organization.id), { name: "Existing", default_project_id: "proj_existing_default" });
  t.match(await store.createProject({ organizationId: organization.id, name: "last" }), { name: "last" }, `the place of project ${BOUND} is still free`);
  t.match(await store.createProject({ organizationId: organization.id, name: "over" }).catch(refusal), tooMany, "and then the bound is reached");
});

t.test("parallel creates of one organization id: one organization with one project", async (t) => {
  const connections = await Promise.all(Array.from({ length: 5 }, () => nats.connect("admin")));
  t.teardown(() => Promise.all(connections.map((c) => c.close())));
  const stores = await Promise.all(connections.map((c) => AccountStore.open(c, { maxProjectsPerOrganization: BOUND })));
  const id = "org-raced";
  const results = await Promise.all(stores.map((s, i) => s.createOrganization({ id, name: `racer ${i}`, projectId: `proj_raced_${i}` }).catch(refusal)));
  const made = results.filter((r): r is Awaited<ReturnType<AccountStore["createOrganization"]>> => "organization" in r);
  t.equal(made.length, 1, "one create made the organization");
  for (const r of results.filter((r) => !("organization" in r))) t.match(r, { status: 409, param: "organization_id", code: "already_exists" }, "the others: 409 already_exists");
  t.same(await projectIds(id), [made[0]!.project.id], "it holds its default project only: the losers' projects went again");
  for (let i = 2; i <= BOUND; i++) t.ok(await store.createProject({ organizationId: id, name: `p${i}` }), `project ${i}: made`);
  t.match(await store.createProject({ organizationId: id, name: "over" }).catch(refusal), tooMany, `the bound (${BOUND}) holds`);
});
