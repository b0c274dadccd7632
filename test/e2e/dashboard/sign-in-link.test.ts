import t, { type Test } from "tap";
import { dashboardConfig, readConfig } from "../../../lib/config.js";
import { AccountStore, LOCAL_OWNER_EMAIL, LOCAL_PROJECT_ID, localOwnerSignInToken, MemberStore, SIGN_IN_LINK_PATH, signInLinkPath } from "../../../modules/accounts/mod.js";
import { admin } from "../../harness/admin.js";
import { CookieClient } from "../../harness/dashboard.js";
import { TEST_KEY, TEST_MODEL } from "../../harness/processes.js";
import { sharedStackWithGateway } from "../../harness/shared-stack.js";

// One-time sign-in links of the local organization's owner (what `tributary start` prints): a
// link signs a browser in once, as the owner of the local organization, onto the usage page of its
// project, where what the local key did shows; a used, made-up, malformed, overlong or expired link
// gets the sign-in page with a 4xx and no session, and refusals count per address. The gateway is
// this file's own, so that its throttle counts this file's refusals only.

const ATTEMPTS = 2; // a client address gets five times as many failures: 10
const stack = await sharedStackWithGateway(t, { TRIBUTARY_SIGNIN_ATTEMPTS: String(ATTEMPTS) });
const { gateway } = stack;
const nc = await stack.nats.connect();
t.teardown(() => nc.close());
const accounts = await AccountStore.open(nc);
const members = await MemberStore.open(nc, readConfig(dashboardConfig).sessionTtlSeconds);

/** Opens a link in a fresh browser: its answer, and the client (with the cookies it was given). */
async function open(path: string) {
  const browser = new CookieClient(gateway.url);
  return { browser, res: await browser.request(path) };
}

/** The link page refused: the sign-in page with `status`, `reason` on it, and no session. */
function refused(t: Test, opened: Awaited<ReturnType<typeof open>>, status: number, reason: RegExp) {
  t.equal(opened.res.status, status);
  t.match(opened.res.text, reason);
  t.match(opened.res.text, /tributary admin sign-in-link/, "says how to get a new link");
  t.match(opened.res.text, /action="\/dashboard\/sign-in"/, "on the sign-in page");
  t.notOk(opened.browser.cookies.has("tributary_session"), "no session");
}

let failures = 0;

t.test("a link signs in once, as the local owner, onto the local project's usage", async (t) => {
  const before = Math.floor(Date.now() / 1000);
  const link = await stack.admin.createSignInLink({});
  t.match(link, { organizationId: "org-local", memberEmail: LOCAL_OWNER_EMAIL });
  t.match(link.path, new RegExp(`^${SIGN_IN_LINK_PATH}\\?token=[A-Za-z0-9]{43}$`));
  t.ok(link.expiresAt >= before + 24 * 3600 && link.expiresAt <= before + 24 * 3600 + 60, "valid for a day");

  const { browser, res } = await open(link.path);
  t.equal(res.status, 303);
  t.equal(res.headers.get("location"), "/dashboard/usage");
  const cookie = res.headers.get("set-cookie") ?? "";
  t.match(cookie, /^tributary_session=[A-Za-z0-9]{43}; Path=\/dashboard; HttpOnly; SameSite=Strict; Max-Age=\d+$/, "the session cookie the password sign-in sets");
  const usage = await browser.request("/dashboard/usage");
  t.equal(usage.status, 200);
  t.match(usage.text, LOCAL_OWNER_EMAIL, "signed in as the local owner");
  t.match(usage.text, new RegExp(`<option value="${LOCAL_PROJECT_ID}" selected>`), "on the local project");
  const membersPage = await browser.request("/dashboard/members");
  t.match(membersPage.text, /<td>owner@localhost<\/td><td>owner<\/td>/, "with the owner role");
  t.match(membersPage.text, /Add a member/, "and what owners may do");

  refused(t, await open(link.path), 401, /used already/);
  failures++;
  t.equal((await browser.request("/dashboard/usage")).status, 200, "the first session is unaffected");
});

t.test("the session sees what the local key did", async (t) => {
  const browser = new CookieClient(gateway.url);
  t.equal((await browser.request((await stack.admin.createSignInLink({})).path)).status, 303);
  const marker = `marker${Date.now()}x${Math.random().toString(36).slice(2)}`;
  const completion = await fetch(`${gateway.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${TEST_KEY}`, "content-type": "application/json" },
    body: JSON.stringify({ model: TEST_MODEL, messages: [{ role: "user", content: `Once upon a time ${marker}` }], max_tokens: 4, log: true }),
  });
  t.equal(completion.status, 200);
  const requestId = completion.headers.get("x-request-id");
  let traceId: string | undefined;
  for (let i = 0; i < 100 && !traceId; i++) {
    const list = (await (await fetch(`${gateway.url}/v1/traces?limit=100`, { headers: { authorization: `Bearer ${TEST_KEY}` } })).json()) as { data: Array<{ id: string; request_id: string }> };
    traceId = list.data.find((tr) => tr.request_id === requestId)?.id;
    if (!traceId) await new Promise((r) => setTimeout(r, 50));
  }
  t.ok(traceId, "the request was logged");
  const trace = await browser.request(`/dashboard/traces/${traceId}`);
  t.equal(trace.status, 200);
  t.match(trace.text, marker, "the dashboard shows the local key's request");

  // Usage counts it (folded from the gateways' rows within a moment).
  const row = new RegExp(`<td>${TEST_MODEL.replace("/", "\\/")}</td><td class="num">([\\d,]+)</td>`);
  let requests = 0;
  for (let i = 0; i < 100 && requests === 0; i++) {
    requests = Number(row.exec((await browser.request("/dashboard/usage")).text)?.[1]?.replaceAll(",", "") ?? 0);
    if (requests === 0) await new Promise((r) => setTimeout(r, 100));
  }
  t.ok(requests >= 1, `usage shows ${requests} request(s) of ${TEST_MODEL}`);
});

t.test("tributary admin sign-in-link prints a link", async (t) => {
  const r = await admin(stack.actors, ["sign-in-link"], { json: false });
  t.equal(r.code, 0, r.stderr);
  t.match(r.stdout, /as owner@localhost \(org-local\).*works once/);
  // On the configured gateway address (this test's environment sets none: the default).
  const url = /\n {2}(http:\/\/127\.0\.0\.1:8080(\/dashboard\/sign-in\/link\?token=[A-Za-z0-9]{43}))\n/.exec(r.stdout);
  t.ok(url, r.stdout);
  t.equal((await open(url![2]!)).res.status, 303, "it signs in");
});

t.test("made-up, malformed, overlong and expired links are refused", async (t) => {
  refused(t, await open(signInLinkPath("A".repeat(43))), 401, /not valid/);
  refused(t, await open(`${SIGN_IN_LINK_PATH}?token=abc`), 400, /incomplete or altered/);
  refused(t, await open(SIGN_IN_LINK_PATH), 400, /incomplete or altered/);
  const token = /token=(\w+)/.exec((await stack.admin.createSignInLink({})).path)![1]!;
  refused(t, await open(signInLinkPath(token + "x".repeat(2000))), 400, /incomplete or altered/);
  refused(t, await open(signInLinkPath(token.slice(0, 42) + "%00")), 400, /incomplete or altered/);
  failures += 5;
  // A link whose lifetime is over (made here with none left: the setting's minimum is a minute).
  const expired = await localOwnerSignInToken(accounts, members, 0);
  refused(t, await open(signInLinkPath(expired.token)), 401, /expired/);
  failures++;
  t.equal((await open(signInLinkPath(token))).res.status, 303, "the link the altered ones came from still works");
});

t.test("refusals are throttled per address: past the limit even a good link waits", async (t) => {
  for (; failures < ATTEMPTS * 5; failures++) t.equal((await open(signInLinkPath("B".repeat(43)))).res.status, 401);
  const link = await localOwnerSignInToken(accounts, members, 3600);
  const throttled = await open(signInLinkPath(link.token));
  t.equal(throttled.res.status, 429);
  t.match(throttled.res.text, /Too many failed sign-ins/);
  t.notOk(throttled.browser.cookies.has("tributary_session"));
  t.equal((await members.redeemSignInToken(link.token)).email, LOCAL_OWNER_EMAIL, "the throttled link was not used up");
});
