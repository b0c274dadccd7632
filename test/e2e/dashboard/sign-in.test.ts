// tier: slow (a stack of its own)
import t from "tap";
import { startActorHost, startGateway, startNats } from "../../harness/processes.js";
import { testAdmin } from "../../harness/stack.js";
import { CookieClient, ownerOrganization } from "../../harness/dashboard.js";
import { admin } from "../../harness/admin.js";

// Dashboard sign-in: an invitation redeemed with an email and a password makes the first owner;
// sign-in sets an HttpOnly, SameSite=Strict session cookie; a wrong password, a form without its
// CSRF token and an expired session are refused; failed attempts are throttled per account (and,
// five times looser, per address).
// No runner is needed: nothing here generates.

const TTL = 6;
const ATTEMPTS = 3;
const nats = await startNats();
t.teardown(() => nats.stop());
const actors = await startActorHost(nats.url);
t.teardown(() => actors.kill());
const gateway = await startGateway(nats.url, { TRIBUTARY_SESSION_TTL_SECONDS: String(TTL), TRIBUTARY_SIGNIN_ATTEMPTS: String(ATTEMPTS) });
t.teardown(() => gateway.kill());
const stack = { admin: testAdmin(t, actors.adminAddr), gateway };
const EMAIL = "ada@example.com";
const PASSWORD = "correct horse battery";
const org = await ownerOrganization(stack, EMAIL, PASSWORD);

// The session that is to expire starts now, so that its lifetime passes while the other cases run.
const expiring = new CookieClient(gateway.url);
const expiringSignIn = (await expiring.signIn(EMAIL, PASSWORD)).status;
const expiringUse = (await expiring.request("/dashboard/usage")).status;
const expiringSince = Date.now();

t.test("redeeming an invitation with an email and password makes the first owner", async (t) => {
  t.match(org.owner, { id: /^user_/, email: EMAIL, role: "owner" });
  const again = await fetch(gateway.url + "/v1/invitations/redeem", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ code: "inv_x-yyyyyyyyyyyyyyyyyyyyyy", organization_name: "X", email: "bad", password: "long enough" }),
  });
  t.equal(again.status, 400, "a bad email is refused before the invitation is looked at");
  t.equal(((await again.json()) as { error: { param: string } }).error.param, "email");
});

t.test("an operator redeems an invitation with an owner (tributary admin, password on stdin)", async (t) => {
  const { code } = await stack.admin.createInvitation({ note: "", expiresInSeconds: 0 });
  const r = await admin(actors, ["invitation", "redeem", code, "--org-name", "Ops Org", "--owner-email", "ops@example.com"], { input: "ops password 123\n" });
  t.equal(r.code, 0, r.stderr);
  t.match(r.json.ownerId, /^user_/);
  const c = new CookieClient(gateway.url);
  t.equal((await c.signIn("ops@example.com", "ops password 123")).status, 303, "the owner signs in");
  const { code: second } = await stack.admin.createInvitation({ note: "", expiresInSeconds: 0 });
  const taken = await admin(actors, ["invitation", "redeem", second, "--org-name", "Again", "--owner-email", "nobody"], { input: "password 12345\n" });
  t.equal(taken.code, 1, "a bad email is refused");
  t.match(taken.stderr, /valid email/);
  const retry = await stack.admin.redeemInvitation({ code: second, organizationName: "Again", projectName: "", keyName: "", ownerEmail: "", ownerPassword: "" });
  t.equal(retry.organization!.name, "Again", "and the invitation was not used up");
});

t.test("pages need a session", async (t) => {
  const anon = new CookieClient(gateway.url);
  for (const path of ["/dashboard/traces", "/dashboard/usage", "/dashboard/keys"]) {
    const res = await anon.request(path);
    t.equal(res.status, 303, path);
    t.equal(res.headers.get("location"), "/dashboard/sign-in");
  }
  const page = await anon.request("/dashboard/sign-in");
  t.equal(page.status, 200);
  t.match(page.headers.get("content-security-policy"), /default-src 'none'/);
  t.match(page.headers.get("content-security-policy"), /frame-ancestors 'none'/);
  t.notMatch(page.text, /<script/i, "no script anywhere");
});

t.test("sign in, the cookie's attributes, sign out", async (t) => {
  const c = new CookieClient(gateway.url);
  const form = await c.request("/dashboard/sign-in");
  const res = await c.request("/dashboard/sign-in", { form: { csrf: CookieClient.csrfOf(form.text), email: "ADA@example.com ", password: PASSWORD } });
  t.equal(res.status, 303);
  t.equal(res.headers.get("location"), "/dashboard/traces");
  const setCookie = res.headers.get("set-cookie")!;
  t.match(setCookie, /^tributary_session=[A-Za-z0-9]{43};/);
  t.match(setCookie, /HttpOnly/);
  t.match(setCookie, /SameSite=Strict/);
  t.match(setCookie, /Path=\/dashboard/);
  t.notMatch(setCookie, /Secure/, "plain HTTP: no Secure");
  const traces = await c.request("/dashboard/traces");
  t.equal(traces.status, 200);
  t.match(traces.text, EMAIL);
  const csrf = CookieClient.csrfOf(traces.text);
  const out = await c.request("/dashboard/sign-out", { form: { csrf } });
  t.equal(out.status, 303);
  t.equal((await c.request("/dashboard/traces")).status, 303, "signed out");

  // Behind TLS (a proxy that says so), the cookie is Secure.
  const tls = new CookieClient(gateway.url);
  const f2 = await tls.request("/dashboard/sign-in", { headers: { "x-forwarded-proto": "https" } });
  const r2 = await tls.request("/dashboard/sign-in", { form: { csrf: CookieClient.csrfOf(f2.text), email: EMAIL, password: PASSWORD }, headers: { "x-forwarded-proto": "https" } });
  t.match(r2.headers.get("set-cookie"), /; Secure/);
});

t.test("a wrong password and an unknown email are refused alike", async (t) => {
  const c = new CookieClient(gateway.url);
  const wrong = await c.signIn(EMAIL, "not the password");
  t.equal(wrong.status, 401);
  t.match(wrong.text, /Wrong email or password/);
  t.notOk(c.cookies.has("tributary_session"));
  const unknown = await c.signIn("nobody@example.com", PASSWORD);
  t.equal(unknown.status, 401);
  t.match(unknown.text, /Wrong email or password/);
});

t.test("forms without their CSRF token change nothing", async (t) => {
  const c = new CookieClient(gateway.url);
  t.equal((await c.signIn(EMAIL, PASSWORD)).status, 303);
  const keys = await c.request("/dashboard/keys");
  const before = (keys.text.match(/class="danger"/g) ?? []).length;
  const noToken = await c.request("/dashboard/keys", { form: { name: "sneaky", scope: "project" } });
  t.equal(noToken.status, 403);
  const wrongToken = await c.request("/dashboard/keys", { form: { csrf: "x".repeat(32), name: "sneaky", scope: "project" } });
  t.equal(wrongToken.status, 403);
  const after = await c.request("/dashboard/keys");
  t.equal((after.text.match(/class="danger"/g) ?? []).length, before, "no key was created");
  t.notMatch(after.text, /sneaky/);
  const outNoToken = await c.request("/dashboard/sign-out", { form: {} });
  t.equal(outNoToken.status, 403, "sign-out needs it too");
  // The sign-in form is protected as well (login CSRF): a post without the cookie's token is refused.
  const bare = await fetch(gateway.url + "/dashboard/sign-in", { method: "POST", headers: { "content-type": "application/x-www-form-urlencoded" }, body: new URLSearchParams({ email: EMAIL, password: PASSWORD }).toString(), redirect: "manual" });
  t.equal(bare.status, 403);
  t.equal(bare.headers.get("set-cookie")?.includes("tributary_session"), false);
});

t.test("owners add members; members cannot", async (t) => {
  const owner = new CookieClient(gateway.url);
  t.equal((await owner.signIn(EMAIL, PASSWORD)).status, 303);
  const page = await owner.request("/dashboard/members");
  t.match(page.text, EMAIL);
  const csrf = CookieClient.csrfOf(page.text);
  const added = await owner.request("/dashboard/members", { form: { csrf, email: "bob@example.com", password: "bob's password", role: "member" } });
  t.equal(added.status, 200);
  t.match(added.text, /bob@example.com added as member/);
  const twice = await owner.request("/dashboard/members", { form: { csrf, email: "BOB@example.com", password: "another password", role: "member" } });
  t.equal(twice.status, 400, "an email is taken once");
  const short = await owner.request("/dashboard/members", { form: { csrf, email: "carol@example.com", password: "1234567", role: "member" } });
  t.equal(short.status, 400, "7 characters: too short");
  const noCsrf = await owner.request("/dashboard/members", { form: { email: "eve@example.com", password: "eve's password", role: "owner" } });
  t.equal(noCsrf.status, 403);
  const bob = new CookieClient(gateway.url);
  t.equal((await bob.signIn("bob@example.com", "bob's password")).status, 303, "the member signs in");
  const bobPage = await bob.request("/dashboard/members");
  t.match(bobPage.text, /Owners add members/);
  const refused = await bob.request("/dashboard/members", { form: { csrf: CookieClient.csrfOf(bobPage.text), email: "mallory@example.com", password: "mallory's password", role: "owner" } });
  t.equal(refused.status, 403, "a member cannot add members");
  t.notMatch((await owner.request("/dashboard/members")).text, /mallory|eve@/, "nobody was added");
});

t.test("failed sign-ins are throttled per account", async (t) => {
  const c = new CookieClient(gateway.url);
  const victim = "victim@example.com";
  await ownerOrganization(stack, victim, PASSWORD);
  for (let i = 0; i < ATTEMPTS; i++) t.equal((await c.signIn(victim, `guess ${i}`)).status, 401);
  const blocked = await c.signIn(victim, PASSWORD);
  t.equal(blocked.status, 429, "even the right password, once the account is throttled");
  t.notOk(c.cookies.has("tributary_session"));
});

t.test("a session expires", async (t) => {
  t.equal(expiringSignIn, 303);
  t.equal(expiringUse, 200);
  // Its lifetime (TTL seconds from the sign-in) and half a second more, counted from its last use.
  await new Promise((r) => setTimeout(r, Math.max(0, expiringSince + TTL * 1000 + 500 - Date.now())));
  const late = await expiring.request("/dashboard/usage");
  t.equal(late.status, 303, "expired: back to sign-in");
  t.equal(late.headers.get("location"), "/dashboard/sign-in");
});
