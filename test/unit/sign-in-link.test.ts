import t from "tap";
import { isSignInTokenShape, SIGN_IN_LINK_PATH, signInLinkPath, signInTokenStatus, type SignInTokenRecord } from "../../modules/accounts/mod.js";
import { newSignInToken } from "../../modules/accounts/sign-in-links.js";
import { StartSignInLink } from "../../cli/sign-in-link.js";
import type { LogRecord } from "../../lib/log.js";
import { localOrigin } from "../../lib/local-origin.js";

// The pure parts of one-time sign-in links: the token's shape (checked before any lookup), a
// record's status, where a browser reaches the gateway, and how `tributary start` holds the
// gateway's "listening" line until the link for its footer is made.

t.test("tokens: 43 base62 characters, anything else is refused before a lookup", async (t) => {
  const token = newSignInToken();
  t.match(token, /^[A-Za-z0-9]{43}$/);
  t.not(token, newSignInToken());
  t.ok(isSignInTokenShape(token));
  t.equal(signInLinkPath(token), `${SIGN_IN_LINK_PATH}?token=${token}`);
  for (const bad of ["", token.slice(1), token + "a", token.slice(1) + "-", token.slice(1) + "%", token.slice(1) + " ", token.slice(1) + "é", "a".repeat(64 * 1024)])
    t.notOk(isSignInTokenShape(bad), JSON.stringify(bad.slice(0, 50)));
});

t.test("a token record is unused until used or past its expiry", async (t) => {
  const record: SignInTokenRecord = { member_id: "user_x", organization_id: "org-local", created_at: 100, expires_at: 200, used_at: null };
  t.equal(signInTokenStatus(record, 199), "unused");
  t.equal(signInTokenStatus(record, 200), "expired", "refused from its expiry on");
  t.equal(signInTokenStatus({ ...record, used_at: 150 }, 160), "used");
  t.equal(signInTokenStatus({ ...record, used_at: 150 }, 300), "used", "a used link says so after its expiry too");
});

t.test("the gateway's origin for a browser on this machine", async (t) => {
  t.equal(localOrigin("127.0.0.1", 8080), "http://127.0.0.1:8080");
  t.equal(localOrigin("0.0.0.0", 8080), "http://127.0.0.1:8080", "a wildcard bind is reached on loopback");
  t.equal(localOrigin("::", 9000), "http://[::1]:9000");
  t.equal(localOrigin("::1", 9000), "http://[::1]:9000");
  t.equal(localOrigin("dash.internal", 80), "http://dash.internal:80");
});

const listening = (port: number) => ({ level: "info", msg: "gateway listening", port, host: "127.0.0.1" });

t.test("start: the listening record waits for a fresh link; other records pass at once", async (t) => {
  const made: Array<(path: string | undefined) => void> = [];
  const link = new StartSignInLink({ makePath: () => new Promise((resolve) => made.push(resolve)), origin: (port) => `http://127.0.0.1:${port}` });
  const passed: LogRecord[] = [];
  link.fromGateway({ msg: "nats connected" }, (l) => passed.push(l));
  link.fromGateway({ msg: "gateway listening" }, (l) => passed.push(l));
  link.fromGateway({ msg: "gateway listening soon", port: 1 }, (l) => passed.push(l));
  t.equal(passed.length, 3, "records other than 'gateway listening' with a port are not held");
  t.equal(made.length, 0, "and make no link");

  link.fromGateway(listening(41234), (l) => passed.push(l));
  t.equal(passed.length, 3, "the listening line is held while the link is made");
  t.equal(link.footerLine(), undefined);
  made[0]!("/dashboard/sign-in/link?token=abc");
  await new Promise((r) => setImmediate(r));
  t.same(passed.slice(3), [listening(41234)], "then passed on");
  t.equal(link.footerLine(), "Dashboard (a sign-in link that works once): http://127.0.0.1:41234/dashboard/sign-in/link?token=abc", "with the port the gateway got");

  // A restarted gateway gets a fresh link; the used one is not shown again meanwhile.
  link.fromGateway(listening(41235), (l) => passed.push(l));
  t.equal(made.length, 2);
  t.equal(link.footerLine(), undefined, "the old link is gone once a new gateway listens");
  made[1]!(undefined);
  await new Promise((r) => setImmediate(r));
  t.equal(passed.length, 5, "a gateway whose link could not be made is announced all the same");
  t.equal(link.footerLine(), undefined, "without a link");
});

t.test("start: a failure to make the link does not hold the line", async (t) => {
  const link = new StartSignInLink({ makePath: () => Promise.reject(new Error("boom")), origin: (port) => `http://h:${port}` });
  const passed: LogRecord[] = [];
  link.fromGateway(listening(1), (l) => passed.push(l));
  await new Promise((r) => setImmediate(r));
  t.equal(passed.length, 1);
  t.equal(link.footerLine(), undefined);
});
