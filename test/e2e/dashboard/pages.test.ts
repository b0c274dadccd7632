import t from "tap";
import OpenAI, { toFile } from "openai";
import { TEST_MODEL } from "../../harness/processes.js";
import { sharedStack } from "../../harness/shared-stack.js";
import { uniqueEmail } from "../../harness/stack.js";
import { CookieClient, ownerOrganization } from "../../harness/dashboard.js";

// The dashboard's organization and resource pages over HTTP: projects (owners create and rename,
// members get a 403 page), invitations of members (created with a role, shown once, redeemed on
// the public join page once, revoked), files (list, metadata, download, delete; another
// organization's file is not found) and rate limits (the catalog's limits per model). Every form
// needs its CSRF token; names are rendered as text.

const stack = await sharedStack(t);
const { gateway } = stack;
// Emails are platform-wide: addresses of this file only.
const OWNER = uniqueEmail("olga");
const ZED = uniqueEmail("zed");
const BOB = uniqueEmail("bob");
const CAROL = uniqueEmail("carol");
const DAVE = uniqueEmail("dave");
const PASSWORD = "owner's password";
const org = await ownerOrganization(stack, OWNER, PASSWORD);
const other = await ownerOrganization(stack, ZED, PASSWORD);
const owner = new CookieClient(gateway.url);
if ((await owner.signIn(OWNER, PASSWORD)).status !== 303) throw new Error("the owner cannot sign in");
const MARKUP = `<b onmouseover="alert(1)">bold</b>`;

/** Invites `email` as `role` and returns the code from the link shown once. */
async function invite(email: string, role: "member" | "owner") {
  const page = await owner.request("/dashboard/invitations");
  const res = await owner.request("/dashboard/invitations", { form: { csrf: CookieClient.csrfOf(page.text), email, role } });
  const link = /id="invitation-link">([^<]+)</.exec(res.text)?.[1] ?? "";
  return { res, code: decodeURIComponent(/code=([^&"<]+)/.exec(link.replaceAll("&amp;", "&"))?.[1] ?? "") };
}

/** Redeems a code on the join page as a browser would: the page's form (and its cookie), then the post. */
async function join(code: string, password: string, password2 = password) {
  const c = new CookieClient(gateway.url);
  const form = await c.request(`/dashboard/join?code=${encodeURIComponent(code)}`);
  const res = form.status === 200 ? await c.request("/dashboard/join", { form: { csrf: CookieClient.csrfOf(form.text), code, password, password2 } }) : form;
  return { c, form, res };
}

const bob = await (async () => {
  const { code } = await invite(BOB, "member");
  const { c } = await join(code, "bob's password");
  return c;
})();

t.test("the new pages need a session", async (t) => {
  const anon = new CookieClient(gateway.url);
  for (const path of ["/dashboard/projects", "/dashboard/invitations", "/dashboard/files", "/dashboard/limits", "/dashboard/files/file-abc", "/dashboard/files/file-abc/content"]) {
    const res = await anon.request(path);
    t.equal(res.status, 303, path);
    t.equal(res.headers.get("location"), "/dashboard/sign-in");
  }
  const post = await anon.request("/dashboard/projects", { form: { name: "x" } });
  t.equal(post.status, 303, "a post without a session changes nothing either");
});

t.test("projects: owners create and rename, names are text, members get a 403 page", async (t) => {
  const page = await owner.request("/dashboard/projects");
  t.equal(page.status, 200);
  t.match(page.text, "Dash Project");
  t.match(page.text, org.project.id);
  t.notMatch(page.text, other.project.id, "another organization's project is not listed");
  const csrf = CookieClient.csrfOf(page.text);
  const created = await owner.request("/dashboard/projects", { form: { csrf, name: MARKUP } });
  t.equal(created.status, 200);
  t.notMatch(created.text, MARKUP, "not as markup");
  t.match(created.text, "&lt;b onmouseover=&quot;alert(1)&quot;&gt;bold&lt;/b&gt;");
  const id = /\((proj_[A-Za-z0-9]+)\) created/.exec(created.text)?.[1];
  t.ok(id, "the new project's id");
  t.equal((await owner.request("/dashboard/projects", { form: { csrf, name: "a".repeat(200) } })).status, 200, "200 characters: accepted");
  t.equal((await owner.request("/dashboard/projects", { form: { csrf, name: "a".repeat(201) } })).status, 400, "201: refused");
  t.equal((await owner.request("/dashboard/projects", { form: { name: "no token" } })).status, 403, "no CSRF token");

  const renamed = await owner.request(`/dashboard/projects/${id}/rename`, { form: { csrf, name: "Renamed project" } });
  t.equal(renamed.status, 200);
  t.match(renamed.text, `Project ${id} is now called Renamed project`);
  t.equal((await owner.request(`/dashboard/projects/${other.project.id}/rename`, { form: { csrf, name: "Hijacked" } })).status, 404, "another organization's project");
  t.equal((await owner.request(`/dashboard/projects/${id}/rename`, { form: { name: "no token" } })).status, 403);
  // The project shows in every page's picker, so its resources are reachable.
  t.match((await owner.request("/dashboard/files")).text, "Renamed project");

  const bobPage = await bob.request("/dashboard/projects");
  t.equal(bobPage.status, 200, "members see the projects");
  t.match(bobPage.text, /Owners create and rename projects/);
  const bobCsrf = CookieClient.csrfOf(bobPage.text);
  const refused = await bob.request("/dashboard/projects", { form: { csrf: bobCsrf, name: "Bob's project" } });
  t.equal(refused.status, 403);
  t.match(refused.text, /Only owners/);
  t.equal((await bob.request(`/dashboard/projects/${id}/rename`, { form: { csrf: bobCsrf, name: "Bob's name" } })).status, 403);
  const after = await owner.request("/dashboard/projects");
  t.notMatch(after.text, /Bob&#39;s/, "nothing a member tried was done");
});

t.test("invitations: created with a role, the link shown once, redeemed once; revoked links fail", async (t) => {
  const { res, code } = await invite(CAROL, "owner");
  t.equal(res.status, 200);
  t.match(code, new RegExp(`^${org.organization.id}\\.minv_[A-Za-z0-9]+\\.[A-Za-z0-9]{32}$`));
  const listed = await owner.request("/dashboard/invitations");
  t.match(listed.text, CAROL);
  t.notMatch(listed.text, code, "the code is shown once");
  t.equal((await invite(CAROL, "member")).res.status, 400, "one pending invitation per email");
  t.equal((await invite(BOB, "member")).res.status, 400, "a member already");
  t.equal((await invite("not an email", "member")).res.status, 400);

  const form = await new CookieClient(gateway.url).request(`/dashboard/join?code=${encodeURIComponent(code)}`);
  t.equal(form.status, 200);
  t.match(form.text, CAROL);
  t.match(form.text, /invited as <strong>owner/);
  const noCookie = await fetch(gateway.url + "/dashboard/join", { method: "POST", headers: { "content-type": "application/x-www-form-urlencoded" }, body: new URLSearchParams({ csrf: CookieClient.csrfOf(form.text), code, password: "carol's password", password2: "carol's password" }).toString(), redirect: "manual" });
  t.equal(noCookie.status, 403, "the join form's token must match its cookie");
  t.equal((await join(code, "carol's password", "different!")).res.status, 400, "two different passwords");
  t.equal((await join(code, "1234567")).res.status, 400, "7 characters: too short");
  const ok = await join(code, "carol's password");
  t.equal(ok.res.status, 303, "joined");
  t.equal(ok.res.headers.get("location"), "/dashboard/usage");
  const home = await ok.c.request("/dashboard/invitations");
  t.equal(home.status, 200, "signed in at once");
  t.match(home.text, CAROL);
  t.match(home.text, /Invite<\/button>/, "as an owner: she may invite");
  t.equal((await join(code, "carol's password")).form.status, 409, "a code works once");
  t.equal((await new CookieClient(gateway.url).signIn(CAROL, "carol's password")).status, 303);

  const dave = await invite(DAVE, "member");
  const page = await owner.request("/dashboard/invitations");
  const invitationId = /(minv_[A-Za-z0-9]+)<\/code><\/td><td[^>]*>[^<]+<\/td><td[^>]*>[^<]+<\/td>\s*<td[^>]*><form class="inline" method="post" action="\/dashboard\/invitations\/\1\/revoke"/.exec(page.text)?.[1];
  t.ok(invitationId, "dave's pending invitation has a revoke button");
  const bobPage = await bob.request("/dashboard/invitations");
  t.match(bobPage.text, /Owners invite members/);
  t.notMatch(bobPage.text, /\/revoke"/, "members see no revoke button");
  const bobCsrf = CookieClient.csrfOf(bobPage.text);
  t.equal((await bob.request(`/dashboard/invitations/${invitationId}/revoke`, { form: { csrf: bobCsrf } })).status, 403, "members cannot revoke");
  t.equal((await bob.request("/dashboard/invitations", { form: { csrf: bobCsrf, email: "eve@example.com", role: "owner" } })).status, 403, "nor invite");
  t.equal((await owner.request(`/dashboard/invitations/${invitationId}/revoke`, { form: {} })).status, 403, "no CSRF token");
  const revoked = await owner.request(`/dashboard/invitations/${invitationId}/revoke`, { form: { csrf: CookieClient.csrfOf(page.text) } });
  t.equal(revoked.status, 200);
  t.match(revoked.text, `${DAVE} is revoked`);
  t.equal((await join(dave.code, "dave's password")).form.status, 404, "a revoked code is not found");
  t.equal((await owner.request(`/dashboard/invitations/${invitationId}/revoke`, { form: { csrf: CookieClient.csrfOf(page.text) } })).status, 409, "revoked already");
  const otherOwner = new CookieClient(gateway.url);
  await otherOwner.signIn(ZED, PASSWORD);
  const otherPage = await otherOwner.request("/dashboard/invitations");
  t.notMatch(otherPage.text, /carol|dave/, "another organization's invitations are not listed");
  t.equal((await otherOwner.request(`/dashboard/invitations/${invitationId}/revoke`, { form: { csrf: CookieClient.csrfOf(otherPage.text) } })).status, 404);
  const forged = code.replace(/\.[A-Za-z0-9]{32}$/, "." + "A".repeat(32));
  t.equal((await new CookieClient(gateway.url).request(`/dashboard/join?code=${encodeURIComponent(forged)}`)).status, 404, "a wrong secret");
  t.equal((await new CookieClient(gateway.url).request(`/dashboard/join?code=${"x".repeat(300)}`)).status, 404, "garbage");
});

t.test("files: list, metadata, download, delete; another organization's file is not found", async (t) => {
  const client = new OpenAI({ apiKey: org.api_key.value, baseURL: gateway.url + "/v1", maxRetries: 0 });
  const content = '{"hello": "<script>alert(1)</script>"}\n';
  const name = "<img src=x onerror=alert(1)>.jsonl";
  const file = await client.files.create({ file: await toFile(Buffer.from(content), name), purpose: "user_data" });
  const theirs = await new OpenAI({ apiKey: other.api_key.value, baseURL: gateway.url + "/v1", maxRetries: 0 }).files.create({ file: await toFile(Buffer.from("secret"), "theirs.txt"), purpose: "user_data" });

  const list = await owner.request("/dashboard/files");
  t.equal(list.status, 200);
  t.match(list.text, file.id);
  t.notMatch(list.text, name);
  t.match(list.text, "&lt;img src=x onerror=alert(1)&gt;.jsonl");
  t.notMatch(list.text, theirs.id);
  t.notMatch((await owner.request("/dashboard/files?purpose=batch")).text, file.id, "filtered by purpose");

  const detail = await owner.request(`/dashboard/files/${file.id}`);
  t.equal(detail.status, 200);
  t.match(detail.text, `${content.length} bytes`);
  t.match(detail.text, "user_data");
  const download = await owner.request(`/dashboard/files/${file.id}/content`);
  t.equal(download.status, 200);
  t.equal(download.text, content, "the contents, byte for byte");
  t.match(download.headers.get("content-disposition"), /^attachment; filename="<img src=x onerror=alert\(1\)>\.jsonl"$/);
  t.equal(download.headers.get("content-type"), "application/octet-stream");
  t.match(download.headers.get("content-security-policy"), /sandbox/);

  t.equal((await owner.request(`/dashboard/files/${theirs.id}`)).status, 404, "another organization's file");
  t.equal((await owner.request(`/dashboard/files/${theirs.id}/content`)).status, 404);
  t.equal((await owner.request(`/dashboard/files/${theirs.id}/delete`, { form: { csrf: CookieClient.csrfOf(detail.text) } })).status, 404);
  t.equal((await owner.request(`/dashboard/files/${file.id}/delete`, { form: {} })).status, 403, "no CSRF token");
  t.equal((await client.files.retrieve(file.id)).id, file.id, "still there");
  const deleted = await owner.request(`/dashboard/files/${file.id}/delete`, { form: { csrf: CookieClient.csrfOf(detail.text) } });
  t.equal(deleted.status, 200);
  t.match(deleted.text, `File ${file.id} deleted`);
  const gone = await client.files.retrieve(file.id).then(() => 200, (err: { status?: number }) => err.status);
  t.equal(gone, 404, "the API no longer has it");
  t.equal((await owner.request(`/dashboard/files/${file.id}`)).status, 404);
});

t.test("rate limits: each model's limits and its budget's window", async (t) => {
  const page = await bob.request("/dashboard/limits");
  t.equal(page.status, 200, "every member sees them");
  t.same(CookieClient.rowOf(page.text, TEST_MODEL)?.slice(0, 4), [TEST_MODEL, `organization ${org.organization.id}`, "250", "100.0k"], "the test catalog's limits, for the organization's budget");
  t.match(page.text, /Budgets are per model and organization/);
});

t.test("an organization keeps at most 100 invitations: the 100th is made, the 101st refused", async (t) => {
  const zed = new CookieClient(gateway.url);
  await zed.signIn(ZED, PASSWORD);
  const csrf = CookieClient.csrfOf((await zed.request("/dashboard/invitations")).text);
  for (let i = 1; i <= 99; i++) {
    const res = await zed.request("/dashboard/invitations", { form: { csrf, email: uniqueEmail(`person${i}`), role: "member" } });
    if (res.status !== 200) throw new Error(`invitation ${i}: ${res.status}`);
  }
  t.equal((await zed.request("/dashboard/invitations", { form: { csrf, email: uniqueEmail("person100"), role: "member" } })).status, 200, "the 100th");
  const refused = await zed.request("/dashboard/invitations", { form: { csrf, email: uniqueEmail("person101"), role: "member" } });
  t.equal(refused.status, 400, "the 101st");
  t.match(refused.text, /100 invitations already/);
});
