import t from "tap";
import OpenAI, { AuthenticationError } from "openai";
import { startStack } from "../../harness/stack.js";
import { TEST_MODEL } from "../../harness/processes.js";
import { admin, adminOk } from "../../harness/admin.js";

// The life cycle of organizations, projects and keys, driven through `tributary admin` as an
// operator would, and checked against a real gateway with the openai client.

const stack = await startStack(t, { gatewayEnv: { TRIBUTARY_KEY_USAGE_FLUSH_MS: "200" } });
const host = stack.actors;
const clientFor = (apiKey: string, project?: string) => new OpenAI({ apiKey, baseURL: stack.gateway.baseURL, maxRetries: 0, project });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

t.test("an organization comes with its default project; projects are listed per organization", async (t) => {
  const created = await adminOk(host, ["org", "create", "--name", "Acme Research", "--project-name", "Prod"]);
  t.match(created.organization.id, /^org-[A-Za-z0-9]{24}$/);
  t.equal(created.organization.name, "Acme Research");
  t.match(created.project.id, /^proj_[A-Za-z0-9]{24}$/);
  t.equal(created.organization.defaultProjectId, created.project.id);
  const orgId = created.organization.id as string;

  const second = await adminOk(host, ["project", "create", "--org", orgId, "--name", "Staging"]);
  t.equal(second.organizationId, orgId);
  const projects = await adminOk(host, ["project", "list", "--org", orgId]);
  t.same(projects.projects.map((p: { name: string }) => p.name), ["Prod", "Staging"]);

  const orgs = await adminOk(host, ["org", "list"]);
  t.ok(orgs.organizations.some((o: { id: string }) => o.id === orgId), "listed");
  // The configured test key lives in the local organization.
  t.ok(orgs.organizations.some((o: { id: string }) => o.id === "org-local"), "the local organization exists");
});

t.test("a project key is shown once, listed by prefix, works, records its last use, and dies when revoked", async (t) => {
  const { organization, project } = await adminOk(host, ["org", "create", "--name", "Keys Inc"]);
  const created = await adminOk(host, ["key", "create", "--project", project.id, "--name", "ci"]);
  const secret = created.secret as string;
  t.match(secret, /^sk-proj-[A-Za-z0-9]{48}$/);
  t.equal(created.key.projectId, project.id);
  t.equal(created.key.organizationId, organization.id);
  t.equal(created.key.name, "ci");
  t.equal(created.key.prefix, secret.slice(0, 12));
  t.equal(created.key.lastUsedAt, 0);

  const client = clientFor(secret);
  const models = await client.models.list();
  t.equal(models.data[0]?.id, TEST_MODEL);
  const { response } = await client.chat.completions.create({ model: TEST_MODEL, messages: [{ role: "user", content: "Hi" }], max_tokens: 2 }).withResponse();
  t.equal(response.headers.get("openai-project"), project.id, "the principal is the key's project");
  t.equal(response.headers.get("openai-organization"), organization.id);

  // Listed with the prefix only: the secret appears nowhere in the listing.
  let listed = await admin(host, ["key", "list", "--project", project.id]);
  t.equal(listed.code, 0);
  t.notOk(listed.stdout.includes(secret.slice(12)), "the secret is not in the listing");
  t.equal(listed.json.keys.length, 1);
  t.equal(listed.json.keys[0].id, created.key.id);
  t.equal(listed.json.keys[0].prefix, secret.slice(0, 12));

  // Last use is written in batches (every 200 ms here), not per request.
  let lastUsed = 0;
  for (let i = 0; i < 50 && lastUsed === 0; i++) {
    await sleep(100);
    lastUsed = (await adminOk(host, ["key", "list", "--project", project.id])).keys[0].lastUsedAt;
  }
  t.ok(Math.abs(lastUsed - Date.now() / 1000) < 30, `last used recorded (${lastUsed})`);

  const human = await admin(host, ["key", "list", "--org", organization.id], { json: false });
  t.match(human.stdout, /ID\s+PREFIX\s+NAME/);
  t.match(human.stdout, new RegExp(`${secret.slice(0, 12)}\\.\\.\\.`));

  const revoked = await adminOk(host, ["key", "revoke", created.key.id]);
  t.ok(revoked.revokedAt > 0);
  let err: unknown;
  for (let i = 0; i < 100; i++) {
    err = await client.models.list().then(() => undefined, (e: unknown) => e);
    if (err) break;
    await sleep(10);
  }
  t.ok(err instanceof AuthenticationError, "a revoked key is refused");
  t.equal((err as AuthenticationError).code, "invalid_api_key");

  listed = await admin(host, ["key", "list", "--project", project.id]);
  t.equal(listed.json.keys.length, 0, "revoked keys are hidden by default");
  listed = await admin(host, ["key", "list", "--project", project.id, "--all"]);
  t.equal(listed.json.keys.length, 1, "and listed with --all");
  const again = await adminOk(host, ["key", "revoke", created.key.id]);
  t.equal(again.revokedAt, revoked.revokedAt, "revoking twice changes nothing");
});

t.test("an organization key reaches every project of its organization, chosen with OpenAI-Project", async (t) => {
  const { organization, project: first } = await adminOk(host, ["org", "create", "--name", "Multi"]);
  const second = await adminOk(host, ["project", "create", "--org", organization.id, "--name", "Second"]);
  const other = await adminOk(host, ["org", "create", "--name", "Other"]);
  const created = await adminOk(host, ["key", "create", "--org", organization.id]);
  t.match(created.secret, /^sk-org-[A-Za-z0-9]{48}$/);
  t.equal(created.key.projectId, "");

  const chat = (c: OpenAI) => c.chat.completions.create({ model: TEST_MODEL, messages: [{ role: "user", content: "Hi" }], max_tokens: 1 }).withResponse();
  t.equal((await chat(clientFor(created.secret))).response.headers.get("openai-project"), first.id, "no header: the default project");
  t.equal((await chat(clientFor(created.secret, second.id))).response.headers.get("openai-project"), second.id, "the project named");
  const foreign = await chat(clientFor(created.secret, other.project.id)).catch((e: unknown) => e);
  t.ok(foreign instanceof AuthenticationError, "a project of another organization is refused");
  t.equal((foreign as AuthenticationError).code, "mismatched_project");

  const listed = await adminOk(host, ["key", "list", "--org", organization.id]);
  t.same(listed.keys.map((k: { id: string }) => k.id), [created.key.id]);
});

t.test("operator mistakes get clear errors and change nothing", async (t) => {
  const bad = await admin(host, ["key", "create", "--project", "proj_doesnotexist"]);
  t.equal(bad.code, 1);
  t.match(bad.stderr, /No project with id 'proj_doesnotexist'.*NOT_FOUND/);
  const both = await admin(host, ["key", "create", "--project", "p", "--org", "o"]);
  t.equal(both.code, 2, "usage error");
  t.match(both.stderr, /give --project .* or --org/);
  const noName = await admin(host, ["org", "create"]);
  t.equal(noName.code, 2);
  t.match(noName.stderr, /--name is required/);
  const unknown = await admin(host, ["key", "revoke", "key_nope"]);
  t.equal(unknown.code, 1);
  t.match(unknown.stderr, /NOT_FOUND/);
  const project = await admin(host, ["project", "create", "--org", "org-nope", "--name", "x"]);
  t.equal(project.code, 1);
  t.match(project.stderr, /No organization with id 'org-nope'/);
  const verb = await admin(host, ["key", "frobnicate"]);
  t.equal(verb.code, 2);
  t.match(verb.stderr, /unknown command/);
});

t.test("the admin service refuses a wrong or missing token", async (t) => {
  const wrong = await admin(host, ["org", "list"], { token: "tadm-wrong" });
  t.equal(wrong.code, 1);
  t.match(wrong.stderr, /UNAUTHENTICATED/);
});

t.test("the configured key (TRIBUTARY_API_KEY) is a real key: listed in the local organization", async (t) => {
  const keys = await adminOk(host, ["key", "list", "--org", "org-local"]);
  t.equal(keys.keys.length, 1);
  t.equal(keys.keys[0].projectId, "proj-local");
  t.equal(keys.keys[0].prefix, "sk-test-trib");
});
