import t from "tap";
import OpenAI from "openai";
import { Kvm } from "@nats-io/kv";
import { status } from "@grpc/grpc-js";
import { sharedStack } from "../../harness/shared-stack.js";
import { TEST_MODEL } from "../../harness/processes.js";
import { admin } from "../../harness/admin.js";
import { buckets } from "../../../lib/nats/subjects.js";
import { isAdminCallError } from "../../../modules/admin-api/mod.js";

// Registration in the private beta: an operator creates an invitation; redeeming it (the public
// HTTP route, or the admin service) creates the organization, its first project and first key.
// `tributary admin` runs only where its own part is tested (a duration flag, redemption, an exit
// code); everything else calls the admin service in process.

const stack = await sharedStack(t);
// Organizations are counted by name in the stack-wide list: names of this run only.
const RUN = Math.random().toString(36).slice(2, 8);
const redeem = (body: unknown) =>
  fetch(stack.gateway.url + "/v1/invitations/redeem", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });

t.test("an invitation redeemed over HTTP registers an organization with a working key, shown once", async (t) => {
  const cli = await admin(stack.actors, ["invitation", "create", "--note", "ada@example.com", "--expires-in", "7d"]);
  t.equal(cli.code, 0, cli.stderr);
  const created = cli.json;
  const code = created.code as string;
  t.match(code, /^inv_[A-Za-z0-9]{24}-[A-Za-z0-9]{32}$/);
  t.equal(created.invitation.status, "pending");
  t.equal(created.invitation.expiresAt - created.invitation.createdAt, 7 * 86400);

  const res = await redeem({ code, organization_name: "Ada's Lab", project_name: "Engine" });
  t.equal(res.status, 200);
  const body = (await res.json()) as {
    object: string;
    organization: { id: string; name: string };
    project: { id: string; name: string };
    api_key: { id: string; value: string; redacted_value: string };
  };
  t.equal(body.object, "invitation.redemption");
  t.match(body.organization, { name: "Ada's Lab" });
  t.match(body.organization.id, /^org-/);
  t.match(body.project, { name: "Engine" });
  t.match(body.api_key.value, /^sk-proj-/);
  t.equal(body.api_key.redacted_value, body.api_key.value.slice(0, 12) + "...");

  const client = new OpenAI({ apiKey: body.api_key.value, baseURL: stack.gateway.baseURL, maxRetries: 0 });
  const { response } = await client.chat.completions.create({ model: TEST_MODEL, messages: [{ role: "user", content: "Hi" }], max_tokens: 1 }).withResponse();
  t.equal(response.headers.get("openai-project"), body.project.id);

  const list = await stack.admin.listInvitations({});
  const inv = list.invitations.find((i) => i.id === created.invitation.id)!;
  t.equal(inv.status, "redeemed");
  t.equal(inv.organizationId, body.organization.id);
  t.equal(inv.note, "ada@example.com");
  t.notOk(JSON.stringify(list).includes(code.split("-")[1]!), "the code's secret is stored nowhere");

  const again = await redeem({ code, organization_name: `Twice ${RUN}` });
  t.equal(again.status, 409);
  t.match(await again.json(), { error: { code: "invitation_redeemed", param: "code", type: "invalid_request_error" } });
  const orgs = await stack.admin.listOrganizations({});
  t.equal(orgs.organizations.filter((o) => o.name === `Twice ${RUN}`).length, 0, "the second redemption created nothing");
});

t.test("two concurrent redemptions of one invitation: exactly one organization", async (t) => {
  const { code } = await stack.admin.createInvitation({ note: "", expiresInSeconds: 0 });
  const results = await Promise.all(Array.from({ length: 6 }, (_, i) => redeem({ code, organization_name: `Race ${RUN} ${i}` })));
  t.same(results.map((r) => r.status).sort(), [200, 409, 409, 409, 409, 409]);
  const orgs = await stack.admin.listOrganizations({});
  t.equal(orgs.organizations.filter((o) => o.name.startsWith(`Race ${RUN} `)).length, 1);
});

t.test("redemption through the admin service (tributary admin invitation redeem)", async (t) => {
  const { code } = await stack.admin.createInvitation({ note: "", expiresInSeconds: 0 });
  const cli = await admin(stack.actors, ["invitation", "redeem", code, "--org-name", "Via CLI", "--key-name", "first"]);
  t.equal(cli.code, 0, cli.stderr);
  const r = cli.json;
  t.equal(r.organization.name, "Via CLI");
  t.equal(r.key.name, "first");
  t.equal(r.key.projectId, r.project.id);
  t.match(r.secret, /^sk-proj-/);
  const used = await admin(stack.actors, ["invitation", "redeem", code, "--org-name", "Again"]);
  t.equal(used.code, 1);
  t.match(used.stderr, /used already.*FAILED_PRECONDITION/);
});

t.test("revoked, unknown, forged and expired codes are refused", async (t) => {
  const { code, invitation } = await stack.admin.createInvitation({ note: "", expiresInSeconds: 0 });
  const revoked = await stack.admin.revokeInvitation({ invitationId: invitation!.id });
  t.equal(revoked.status, "revoked");
  let res = await redeem({ code, organization_name: "Nope" });
  t.equal(res.status, 404);
  t.match(await res.json(), { error: { code: "invitation_not_found", param: "code" } });

  // The right invitation id with a wrong secret is no better than nothing.
  const fresh = await stack.admin.createInvitation({ note: "", expiresInSeconds: 0 });
  const forged = `${fresh.invitation!.id}-${"A".repeat(32)}`;
  for (const bad of [forged, "inv_nothing-" + "b".repeat(32), "garbage", "inv_x.y-z"]) {
    res = await redeem({ code: bad, organization_name: "Nope" });
    t.equal(res.status, 404, bad);
  }

  // Expiry (set in the record directly: invitations last at least a minute).
  const nc = await stack.nats.connect();
  t.teardown(() => nc.close());
  const kv = await new Kvm(nc).open(buckets.accounts);
  const key = `invitation.${fresh.invitation!.id}`;
  const entry = (await kv.get(key))!;
  await kv.put(key, JSON.stringify({ ...entry.json<Record<string, unknown>>(), expires_at: Math.floor(Date.now() / 1000) - 1 }));
  res = await redeem({ code: fresh.code, organization_name: "Late" });
  t.equal(res.status, 410);
  t.match(await res.json(), { error: { code: "invitation_expired" } });
  const list = await stack.admin.listInvitations({});
  t.equal(list.invitations.find((i) => i.id === fresh.invitation!.id)!.status, "expired");
  // The command line's exit code for a refused call is tested above (redeeming twice).
  const unknown = await stack.admin.revokeInvitation({ invitationId: "inv_unknown" }).catch((err: unknown) => err);
  t.ok(isAdminCallError(unknown), "revoking an unknown invitation is refused");
  t.match(unknown, { code: status.NOT_FOUND, details: /No invitation with id 'inv_unknown'/ });
});

t.test("bad redemption bodies are 400s naming the parameter", async (t) => {
  const cases: Array<[unknown, string | null, string | null]> = [
    [{ organization_name: "x" }, "code", "missing_required_parameter"],
    [{ code: "inv_a-b" }, "organization_name", "missing_required_parameter"],
    [{ code: "inv_a-b", organization_name: "" }, "organization_name", null],
    [{ code: "inv_a-b", organization_name: "x", admin: true }, "admin", "unknown_parameter"],
    [{ code: 12, organization_name: "x" }, "code", null],
  ];
  for (const [body, param, code] of cases) {
    const res = await redeem(body);
    t.equal(res.status, 400, JSON.stringify(body));
    const err = ((await res.json()) as { error: { param: string; code: string } }).error;
    t.equal(err.param, param);
    if (code) t.equal(err.code, code);
  }
  const notJson = await fetch(stack.gateway.url + "/v1/invitations/redeem", { method: "POST", body: "{" });
  t.equal(notJson.status, 400);
});
