import t from "tap";
import OpenAI, { AuthenticationError } from "openai";
import { status } from "@grpc/grpc-js";
import { sharedStack } from "../../harness/shared-stack.js";
import { TEST_MODEL } from "../../harness/processes.js";
import { admin } from "../../harness/admin.js";

// The life cycle of organizations, projects and keys, as an operator drives it with
// `tributary admin`, checked against a real gateway with the openai client. The command line runs
// once for each thing of its own (flags, JSON and table output, exit codes, usage errors, the
// token); the rest of the life cycle goes through the same admin service in process.

const stack = await sharedStack(t);
const host = stack.actors;
const clientFor = (apiKey: string, project?: string) => new OpenAI({ apiKey, baseURL: stack.gateway.baseURL, maxRetries: 0, project });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const keysOf = (projectId: string, includeRevoked = false) => stack.admin.listApiKeys({ organizationId: "", projectId, includeRevoked }).then((r) => r.keys);

t.test("an organization comes with its default project; projects are listed per organization", async (t) => {
  const cli = await admin(host, ["org", "create", "--name", "Acme Research", "--project-name", "Prod"]);
  t.equal(cli.code, 0, cli.stderr);
  const created = cli.json;
  t.match(created.organization.id, /^org-[A-Za-z0-9]{24}$/);
  t.equal(created.organization.name, "Acme Research");
  t.match(created.project.id, /^proj_[A-Za-z0-9]{24}$/);
  t.equal(created.project.name, "Prod");
  t.equal(created.organization.defaultProjectId, created.project.id);
  const orgId = created.organization.id as string;

  const second = await stack.admin.createProject({ organizationId: orgId, name: "Staging" });
  t.equal(second.organizationId, orgId);
  const projects = await stack.admin.listProjects({ organizationId: orgId });
  t.same(projects.projects.map((p) => p.name), ["Prod", "Staging"]);

  const orgs = await stack.admin.listOrganizations({});
  t.ok(orgs.organizations.some((o) => o.id === orgId), "listed");
  // The configured test key lives in the local organization.
  t.ok(orgs.organizations.some((o) => o.id === "org-local"), "the local organization exists");
});

t.test("a project key is shown once, listed by prefix, works, records its last use, and dies when revoked", async (t) => {
  const { organization, project } = await stack.admin.createOrganization({ name: "Keys Inc", projectName: "" });
  const created = await stack.admin.createApiKey({ projectId: project!.id, organizationId: "", name: "ci" });
  const secret = created.secret;
  t.match(secret, /^sk-proj-[A-Za-z0-9]{48}$/);
  t.equal(created.key!.projectId, project!.id);
  t.equal(created.key!.organizationId, organization!.id);
  t.equal(created.key!.name, "ci");
  t.equal(created.key!.prefix, secret.slice(0, 12));
  t.equal(created.key!.lastUsedAt, 0);

  const client = clientFor(secret);
  const models = await client.models.list();
  t.equal(models.data[0]?.id, TEST_MODEL);
  const { response } = await client.chat.completions.create({ model: TEST_MODEL, messages: [{ role: "user", content: "Hi" }], max_tokens: 2 }).withResponse();
  t.equal(response.headers.get("openai-project"), project!.id, "the principal is the key's project");
  t.equal(response.headers.get("openai-organization"), organization!.id);

  const listed = await keysOf(project!.id);
  t.same(listed.map((k) => [k.id, k.prefix]), [[created.key!.id, secret.slice(0, 12)]], "listed");

  // Last use is written in batches (every 200 ms on the test stacks), not per request.
  let lastUsed = 0;
  for (let i = 0; i < 50 && lastUsed === 0; i++) {
    await sleep(100);
    lastUsed = (await keysOf(project!.id))[0]!.lastUsedAt;
  }
  t.ok(Math.abs(lastUsed - Date.now() / 1000) < 30, `last used recorded (${lastUsed})`);

  const human = await admin(host, ["key", "list", "--org", organization!.id], { json: false });
  t.match(human.stdout, /ID\s+PREFIX\s+NAME/);
  t.match(human.stdout, new RegExp(`${secret.slice(0, 12)}\\.\\.\\.`));

  const revoked = await stack.admin.revokeApiKey({ keyId: created.key!.id });
  t.ok(revoked.revokedAt > 0);
  let err: unknown;
  for (let i = 0; i < 100; i++) {
    err = await client.models.list().then(() => undefined, (e: unknown) => e);
    if (err) break;
    await sleep(10);
  }
  t.ok(err instanceof AuthenticationError, "a revoked key is refused");
  t.equal((err as AuthenticationError).code, "invalid_api_key");

  t.equal((await keysOf(project!.id)).length, 0, "revoked keys are hidden by default");
  // Listed with the prefix only: the secret appears nowhere in the listing.
  const all = await admin(host, ["key", "list", "--project", project!.id, "--all"]);
  t.equal(all.code, 0, all.stderr);
  t.notOk(all.stdout.includes(secret.slice(12)), "the secret is not in the listing");
  t.equal(all.json.keys.length, 1, "and listed with --all");
  t.equal(all.json.keys[0].id, created.key!.id);
  t.equal(all.json.keys[0].prefix, secret.slice(0, 12));
  const again = await stack.admin.revokeApiKey({ keyId: created.key!.id });
  t.equal(again.revokedAt, revoked.revokedAt, "revoking twice changes nothing");
});

t.test("an organization key reaches every project of its organization, chosen with OpenAI-Project", async (t) => {
  const { organization, project: first } = await stack.admin.createOrganization({ name: "Multi", projectName: "" });
  const second = await stack.admin.createProject({ organizationId: organization!.id, name: "Second" });
  const other = await stack.admin.createOrganization({ name: "Other", projectName: "" });
  const created = await stack.admin.createApiKey({ projectId: "", organizationId: organization!.id, name: "" });
  t.match(created.secret, /^sk-org-[A-Za-z0-9]{48}$/);
  t.equal(created.key!.projectId, "");

  const chat = (c: OpenAI) => c.chat.completions.create({ model: TEST_MODEL, messages: [{ role: "user", content: "Hi" }], max_tokens: 1 }).withResponse();
  t.equal((await chat(clientFor(created.secret))).response.headers.get("openai-project"), first!.id, "no header: the default project");
  t.equal((await chat(clientFor(created.secret, second.id))).response.headers.get("openai-project"), second.id, "the project named");
  const foreign = await chat(clientFor(created.secret, other.project!.id)).catch((e: unknown) => e);
  t.ok(foreign instanceof AuthenticationError, "a project of another organization is refused");
  t.equal((foreign as AuthenticationError).code, "mismatched_project");

  const listed = await stack.admin.listApiKeys({ organizationId: organization!.id, projectId: "", includeRevoked: false });
  t.same(listed.keys.map((k) => k.id), [created.key!.id]);
});

t.test("operator mistakes get clear errors and change nothing", async (t) => {
  // The command line's own checks (usage errors, exit code 2), side by side; then one refused
  // call through it (exit code 1, the service's message and status on stderr).
  const [both, noName, verb] = await Promise.all([
    admin(host, ["key", "create", "--project", "p", "--org", "o"]),
    admin(host, ["org", "create"]),
    admin(host, ["key", "frobnicate"]),
  ]);
  t.equal(both.code, 2, "usage error");
  t.match(both.stderr, /give --project .* or --org/);
  t.equal(noName.code, 2);
  t.match(noName.stderr, /--name is required/);
  t.equal(verb.code, 2);
  t.match(verb.stderr, /unknown command/);
  const bad = await admin(host, ["key", "create", "--project", "proj_doesnotexist"]);
  t.equal(bad.code, 1);
  t.match(bad.stderr, /No project with id 'proj_doesnotexist'.*NOT_FOUND/);

  // The service's refusals of the other mistakes.
  const refusal = (call: Promise<unknown>) => call.then(() => undefined, (err: unknown) => err);
  t.match(await refusal(stack.admin.revokeApiKey({ keyId: "key_nope" })), { code: status.NOT_FOUND }, "an unknown key");
  t.match(await refusal(stack.admin.createProject({ organizationId: "org-nope", name: "x" })), { code: status.NOT_FOUND, details: /No organization with id 'org-nope'/ });
});

t.test("the admin service refuses a wrong or missing token", async (t) => {
  const wrong = await admin(host, ["org", "list"], { token: "tadm-wrong" });
  t.equal(wrong.code, 1);
  t.match(wrong.stderr, /UNAUTHENTICATED/);
});

t.test("the configured key (TRIBUTARY_API_KEY) is a real key: listed in the local organization", async (t) => {
  // Exactly one key: on the shared stack nothing adds keys to org-local (its gateway registers
  // only TEST_KEY, and every file works in organizations of its own).
  const keys = await stack.admin.listApiKeys({ organizationId: "org-local", projectId: "", includeRevoked: false });
  t.equal(keys.keys.length, 1);
  t.equal(keys.keys[0]!.projectId, "proj-local");
  t.equal(keys.keys[0]!.prefix, "sk-test-trib");
});
