import t from "tap";
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { request } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { hostedAddressOf, LAUNCHER_PATH, LAUNCHER_SOURCE, pathAddressOf, pathUrlOf, responseHeadsUnder } from "../../modules/apps/mod.js";

// The two addresses of a hosted app: the host name and the path, each parsed at its edges (what a
// client may send is anything); what a path address changes in the app's response head; and the
// launcher that gives the app its root_path.

t.test("hosted addresses: two DNS labels under the apps domain", async (t) => {
  const of = (host: string | undefined) => hostedAddressOf(host, "apps.localhost");
  t.equal(of("chat.acme.apps.localhost"), "chat.acme");
  t.equal(of("Chat.ACME.Apps.Localhost:8080"), "chat.acme", "case and port aside");
  t.equal(of("chat.acme.apps.localhost."), "chat.acme", "a trailing dot");
  t.equal(of(`${"a".repeat(63)}.acme.apps.localhost`), `${"a".repeat(63)}.acme`, "a 63-character label");
  for (const host of [undefined, "", "apps.localhost", "acme.apps.localhost", "x.chat.acme.apps.localhost", `${"a".repeat(64)}.acme.apps.localhost`, "-chat.acme.apps.localhost", "chat_x.acme.apps.localhost", "chat.acme.apps.localhost.evil", "chat.acme.xapps.localhost", "127.0.0.1:8080", `${"a.".repeat(200)}apps.localhost`])
    t.equal(of(host), undefined, String(host).slice(0, 60));
});

t.test("path addresses: /apps/<organization>/<project>, the same labels, the rest for the app", async (t) => {
  t.same(pathAddressOf("/apps/acme/chat/v1/chat/completions"), { address: "chat.acme", prefix: "/apps/acme/chat", path: "/v1/chat/completions" });
  t.same(pathAddressOf("/apps/acme/chat/"), { address: "chat.acme", prefix: "/apps/acme/chat", path: "/" });
  t.same(pathAddressOf("/apps/acme/chat"), { address: "chat.acme", prefix: "/apps/acme/chat", path: "/" }, "without the slash: the app's root");
  t.same(pathAddressOf("/apps/ACME/Chat/x"), { address: "chat.acme", prefix: "/apps/ACME/Chat", path: "/x" }, "case aside, as in a Host header; the prefix as sent");
  t.same(pathAddressOf("/apps/acme/chat//x/%2e%2e/y/"), { address: "chat.acme", prefix: "/apps/acme/chat", path: "//x/%2e%2e/y/" }, "the rest is the app's, as sent");
  const long = "a".repeat(63);
  t.same(pathAddressOf(`/apps/${long}/${long}/`), { address: `${long}.${long}`, prefix: `/apps/${long}/${long}`, path: "/" }, "63-character labels");
  for (const path of [
    "/",
    "/apps",
    "/apps/",
    "/apps/acme",
    "/apps/acme/",
    "/apps//chat/",
    "/apps/acme//x",
    "//apps/acme/chat/",
    "/Apps/acme/chat/",
    "/appsx/acme/chat/",
    "/v1/apps/acme/chat",
    "/apps/-acme/chat/",
    "/apps/acme/chat-/",
    "/apps/ac_me/chat/",
    "/apps/acme/ch.at/",
    "/apps/%61cme/chat/",
    "/apps/acme/chat%2Fx",
    `/apps/${"a".repeat(64)}/chat/`,
    `/apps/acme/${"a".repeat(64)}/`,
    `/apps/acme/${"a".repeat(5000)}`,
  ])
    t.equal(pathAddressOf(path), undefined, path.slice(0, 60));
  t.equal(pathUrlOf("http://127.0.0.1:8080", { organizationSlug: "acme", projectSlug: "chat" }), "http://127.0.0.1:8080/apps/acme/chat/");
});

t.test("under a path address, absolute paths in Location and cookie paths are the app's: put under the prefix", async (t) => {
  const under = (name: string, value: string) => responseHeadsUnder([[name, value]], "/apps/acme/chat")[0]![1];
  t.equal(under("location", "/login?next=/x"), "/apps/acme/chat/login?next=/x");
  t.equal(under("location", "/"), "/apps/acme/chat/");
  for (const kept of ["/apps/acme/chat", "/apps/acme/chat/", "/apps/acme/chat/login", "/apps/acme/chat?x=1", "http://elsewhere/x", "https://127.0.0.1:8080/y", "//elsewhere/x", "/\\elsewhere/x", "login", "../x", "?page=2", ""])
    t.equal(under("location", kept), kept, `Location ${kept} kept`);
  t.equal(under("location", "/apps/acme/chatty"), "/apps/acme/chat/apps/acme/chatty", "another path that merely starts like the prefix is the app's own");

  t.equal(under("set-cookie", "session=abc; Path=/; HttpOnly"), "session=abc; Path=/apps/acme/chat; HttpOnly", "Path=/ matches the prefix with and without a slash");
  t.equal(under("set-cookie", "session=abc; HttpOnly; path=/account"), "session=abc; HttpOnly; path=/apps/acme/chat/account");
  t.equal(under("set-cookie", "session=abc;Path = /a ;Secure"), "session=abc;Path = /apps/acme/chat/a;Secure");
  t.equal(under("set-cookie", "path=/x; Max-Age=60"), "path=/x; Max-Age=60", "a cookie named path is not its Path");
  for (const kept of ["session=abc", "session=abc; Path=/apps/acme/chat/account", "session=abc; Domain=example.com; Secure", "session=abc; Path=relative"])
    t.equal(under("set-cookie", kept), kept, `Set-Cookie ${kept} kept`);

  t.same(
    responseHeadsUnder([["content-type", "text/html"], ["link", "</style.css>; rel=preload"], ["refresh", "0; url=/x"], ["location", "/x"]], "/apps/acme/chat"),
    [["content-type", "text/html"], ["link", "</style.css>; rel=preload"], ["refresh", "0; url=/x"], ["location", "/apps/acme/chat/x"]],
    "other headers are the app's, untouched",
  );
});

t.test("the launcher (launcher.py) is read from the source tree and compiles under Debian's python3", async (t) => {
  t.match(LAUNCHER_SOURCE, /^PREFIX_HEADER = b"x-forwarded-prefix"$/m);
  // compile() only: nothing of it runs, and no .pyc lands beside the source.
  t.doesNotThrow(() => execFileSync("/usr/bin/python3", ["-I", "-S", "-c", "import sys; compile(open(sys.argv[1]).read(), sys.argv[1], 'exec')", LAUNCHER_PATH.pathname], { stdio: "pipe" }));
});

t.test("the launcher serves the app with uvicorn and sets root_path per request from the prefix header", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "launcher-test-"));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(
    join(dir, "echo.py"),
    `import json
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    body = json.dumps({"root_path": scope["root_path"], "path": scope["path"], "raw_path": scope["raw_path"].decode()}).encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
`,
  );
  const socketPath = join(dir, "app.sock");
  const child = spawn("/usr/bin/python3", ["-c", LAUNCHER_SOURCE, "echo:app", socketPath, dir], { cwd: tmpdir(), stdio: ["ignore", "pipe", "pipe"], env: { PATH: "/usr/bin:/bin", PYTHONDONTWRITEBYTECODE: "1" } });
  let logs = "";
  child.stderr.on("data", (c: Buffer) => (logs += c.toString()));
  t.teardown(() => void child.kill("SIGKILL"));
  const get = (path: string, headers: Record<string, string> = {}) =>
    new Promise<any>((resolve, reject) => {
      const req = request({ socketPath, path, headers }, (res) => {
        let body = "";
        res.setEncoding("utf8").on("data", (c) => (body += c)).on("end", () => resolve(JSON.parse(body)));
      });
      req.on("error", reject).end();
    });
  const deadline = Date.now() + 20_000;
  for (;;) {
    try {
      await get("/");
      break;
    } catch (err) {
      if (Date.now() > deadline || child.exitCode !== null) throw new Error(`the launcher did not serve: ${logs}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  t.same(await get("/x/y?q=1"), { root_path: "", path: "/x/y", raw_path: "/x/y" }, "no header: mounted at the root");
  t.same(await get("/x/y", { "x-forwarded-prefix": "/apps/acme/chat" }), { root_path: "/apps/acme/chat", path: "/x/y", raw_path: "/x/y" }, "the prefix header: the root_path, the path as asked");
  t.same(await get("/x"), { root_path: "", path: "/x", raw_path: "/x" }, "per request: the next one without it is at the root again");
  t.match(logs, /Uvicorn running on unix socket/, "uvicorn's own log lines");
});
