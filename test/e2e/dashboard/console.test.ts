import t from "tap";
import { chromium, type Browser, type Page } from "playwright-core";
import { sharedStack } from "../../harness/shared-stack.js";
import { uniqueEmail } from "../../harness/stack.js";
import { TEST_MODEL } from "../../harness/processes.js";
import { ownerOrganization, screenshot } from "../../harness/dashboard.js";
import OpenAI, { toFile } from "openai";
import { readFileSync } from "node:fs";
import { chatLine, createBatch, waitForBatch } from "../../harness/batches.js";

// The console in real headless Chromium (Debian's chromium, driven with playwright-core): sign
// in, a wrong password, find a logged request by model and open its detail, see the usage plot and
// a batch's progress,
// create a key (shown once) and revoke it (the API refuses it at once), create and rename a
// project, invite a member who joins with the link, a file's list, detail, download and deletion,
// the rate limits' use, and a prompt and a file name holding markup rendered as text (no dialog
// fires). With TEST_SCREENSHOTS=DIR, screenshots of the pages go there.

// The shared stack flushes traces and usage within tens of milliseconds; emails are platform-wide.
const stack = await sharedStack(t);
const EMAIL = uniqueEmail("grace");
const LINUS = uniqueEmail("linus");
const PASSWORD = "a long enough password";
const org = await ownerOrganization(stack, EMAIL, PASSWORD);
const KEY = org.api_key.value;
const escaped = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
const XSS = `<img src=x onerror=alert(1)> and <script>alert(2)</script>`;

async function api(path: string, body: unknown, key = KEY) {
  const res = await fetch(stack.gateway.url + path, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, body: JSON.stringify(body) });
  await res.text();
  return res;
}
// Logged requests of the organization's project, one of them carrying markup in its prompt.
for (let i = 0; i < 3; i++) await api("/v1/chat/completions", { model: TEST_MODEL, messages: [{ role: "user", content: `Story number ${i}` }], max_tokens: 8, log: true });
const xssRequest = await api("/v1/chat/completions", { model: TEST_MODEL, messages: [{ role: "user", content: XSS }], max_tokens: 8, log: true });
const xssRequestId = xssRequest.headers.get("x-request-id")!;
await api("/v1/chat/completions", { model: TEST_MODEL, messages: [{ role: "user", content: "Unlogged" }], max_tokens: 4 });

const browser: Browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
t.teardown(() => browser.close());
const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
const page: Page = await context.newPage();
const dialogs: string[] = [];
page.on("dialog", (d) => {
  dialogs.push(d.message());
  void d.dismiss();
});
const cspViolations: string[] = [];
page.on("console", (m) => {
  if (/Content Security Policy/i.test(m.text())) cspViolations.push(m.text());
});
const base = stack.gateway.url;

async function signIn(email: string, password: string) {
  await page.goto(base + "/dashboard/sign-in");
  await page.fill('input[name="email"]', email);
  await page.fill('input[name="password"]', password);
  await page.click('button[type="submit"]');
}

t.test("a wrong password, then signing in", async (t) => {
  await signIn(EMAIL, "wrong password!");
  t.match(await page.textContent('[role="alert"]'), /Wrong email or password/);
  t.equal(new URL(page.url()).pathname, "/dashboard/sign-in");
  await screenshot(page, "sign-in-error", false);
  await signIn(EMAIL, PASSWORD);
  t.equal(new URL(page.url()).pathname, "/dashboard/usage", "onto the project's usage");
  t.match(await page.textContent("header"), EMAIL);
  const cookies = await context.cookies();
  const session = cookies.find((c) => c.name === "tributary_session");
  t.ok(session?.httpOnly, "HttpOnly");
  t.equal(session?.sameSite, "Strict");
  t.equal(await page.evaluate("document.cookie.includes('tributary_session')"), false, "scripts cannot read it");
});

t.test("logs: find a logged request by model and open its detail", async (t) => {
  // Traces are written in the background: reload until all four are listed.
  await page.goto(base + "/dashboard/traces");
  for (let i = 0; i < 50 && (await page.locator("tbody tr").count()) < 4; i++) {
    await page.waitForTimeout(100);
    await page.goto(base + "/dashboard/traces");
  }
  t.equal(await page.locator("tbody tr").count(), 4, "the four logged requests, not the unlogged one");
  await page.fill('input[name="model"]', "other/model");
  await page.click('form.filters button[type="submit"]');
  t.equal(await page.locator("tbody tr").count(), 0, "another model: none");
  await page.fill('input[name="model"]', TEST_MODEL);
  await page.click('form.filters button[type="submit"]');
  t.equal(await page.locator("tbody tr").count(), 4);
  await screenshot(page, "logs");
  await page.locator("tbody tr a").last().click();
  t.match(new URL(page.url()).pathname, /^\/dashboard\/traces\/trace_/);
  t.match(await page.textContent("main"), /Timeline/);
  t.match(await page.textContent("main"), /Story number 0/, "the oldest: its prompt");
  t.ok(await page.locator("main svg rect").count() >= 3, "timeline bars");
  await screenshot(page, "trace-detail");
});

t.test("markup in a prompt is rendered as text", async (t) => {
  await page.goto(base + "/dashboard/traces");
  const links = page.locator("tbody tr a");
  let found = false;
  for (let i = 0; i < (await links.count()) && !found; i++) {
    await page.goto(base + "/dashboard/traces");
    await page.locator("tbody tr a").nth(i).click();
    found = ((await page.textContent("main")) ?? "").includes(xssRequestId);
  }
  t.ok(found, "the trace of the request with markup");
  const text = (await page.textContent("main")) ?? "";
  t.ok(text.includes("<img src=x onerror=alert(1)>"), "shown literally");
  t.equal(await page.locator("main img").count(), 0, "no img element was made");
  t.equal(await page.locator("script").count(), 0, "no script element");
  await page.waitForTimeout(200);
  t.same(dialogs, [], "no dialog fired");
  await screenshot(page, "trace-markup-as-text");
});

t.test("usage: plots of requests, tokens and errors", async (t) => {
  let requests = "";
  for (let i = 0; i < 50 && requests !== "5"; i++) {
    await page.goto(base + "/dashboard/usage?width=1m");
    requests = (await page.locator("#by-model tbody tr td").nth(1).textContent().catch(() => "")) ?? "";
    if (requests !== "5") await page.waitForTimeout(100);
  }
  t.equal(requests, "5", "five requests, logged or not (the batch below comes later)");
  t.match(await page.textContent("#by-model tbody tr td"), TEST_MODEL);
  const bars = await page.locator("figure svg rect").evaluateAll((rects) => rects.filter((r) => Number(r.getAttribute("height")) > 0).length);
  t.ok(bars >= 2, "requests and tokens plotted");
  t.ok((await page.locator("figure#ttft-0 svg circle").count()) >= 2, "the model's TTFT p50 and p95 plotted");
  t.ok((await page.locator("figure#latency-0 svg circle").count()) >= 2, "its latency p50 and p95 plotted");
  const cells = await page.locator("#by-model tbody tr").first().locator("td").allTextContents();
  t.match(cells.slice(5), [/^[\d.]+ ms$/, /^[\d.]+ ms$/, /^[\d.]+ ms$/, /^[\d.]+ ms$/], "TTFT and latency percentiles by model");
  await screenshot(page, "usage");
});

t.test("batches: a batch's progress, counts and files", async (t) => {
  const client = new OpenAI({ apiKey: KEY, baseURL: stack.gateway.baseURL, maxRetries: 0 });
  const batch = await createBatch(client, [chatLine("a"), chatLine("b"), chatLine("c")]);
  const done = await waitForBatch(client, batch.id, 60_000);
  t.equal(done.status, "completed");
  await page.goto(base + "/dashboard/batches");
  const row = page.locator("tr", { hasText: batch.id });
  t.equal(await row.count(), 1);
  t.equal(await row.locator("progress").getAttribute("max"), "3");
  t.equal(await row.locator("progress").getAttribute("value"), "3", "every line done");
  t.match(await row.textContent(), /completed/);
  t.match(await row.textContent(), done.output_file_id!);
  await screenshot(page, "batches");
});

t.test("members", async (t) => {
  await page.goto(base + "/dashboard/members");
  t.match(await page.textContent("main table"), EMAIL);
  t.match(await page.textContent("main table"), /owner/);
  await screenshot(page, "members");
});

t.test("API keys: create (shown once) and revoke", async (t) => {
  await page.goto(base + "/dashboard/keys");
  await page.fill('input[name="name"]', "from the console");
  await page.click('form.filters button:has-text("Create key")');
  const secret = ((await page.textContent("#new-key")) ?? "").trim();
  t.match(secret, /^sk-proj-/);
  await screenshot(page, "keys-created");
  t.equal((await api("/v1/chat/completions", { model: TEST_MODEL, messages: [{ role: "user", content: "Hi" }], max_tokens: 1 }, secret)).status, 200, "the new key works");
  await page.goto(base + "/dashboard/keys");
  t.equal(await page.locator("#new-key").count(), 0, "shown only once");
  const row = page.locator("tr", { hasText: "from the console" });
  await row.locator("button.danger").click();
  t.match(await page.textContent(".notice"), /revoked/);
  let status = 0;
  for (let i = 0; i < 20 && status !== 401; i++) {
    status = (await api("/v1/chat/completions", { model: TEST_MODEL, messages: [{ role: "user", content: "Hi" }], max_tokens: 1 }, secret)).status;
    if (status !== 401) await new Promise((r) => setTimeout(r, 100));
  }
  t.equal(status, 401, "the revoked key is refused by the API");
  await screenshot(page, "keys");
  t.same(cspViolations, [], "no Content-Security-Policy violation on any page");
});

t.test("projects: create and rename", async (t) => {
  await page.goto(base + "/dashboard/projects");
  await page.fill('form.filters input[name="name"]', "Console project");
  await page.click('button:has-text("Create project")');
  t.match(await page.textContent('[role="status"]'), /Project Console project \(proj_[A-Za-z0-9]+\) created/);
  const row = page.locator("tr", { hasText: "Console project" });
  await row.locator('input[name="name"]').fill("Console project, renamed");
  await row.locator('button:has-text("Rename")').click();
  t.match(await page.textContent('[role="status"]'), /is now called Console project, renamed/);
  t.equal(await page.locator("tr", { hasText: "Console project, renamed" }).count(), 1);
  await screenshot(page, "projects");
});

t.test("invitations: an owner invites a member, who joins with the link", async (t) => {
  await page.goto(base + "/dashboard/invitations");
  await page.fill('input[name="email"]', LINUS);
  await page.selectOption('select[name="role"]', "member");
  await page.click('button:has-text("Invite")');
  const link = ((await page.textContent("#invitation-link")) ?? "").trim();
  t.match(link, /\/dashboard\/join\?code=/);
  t.match(await page.textContent("main table"), new RegExp(`${escaped(LINUS)}\\s*member\\s*pending`));
  await screenshot(page, "invitations");

  const invitee = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  t.teardown(() => invitee.close());
  const joinPage = await invitee.newPage();
  await joinPage.goto(link);
  t.match(await joinPage.textContent("main"), new RegExp(`invited as member with the email ${escaped(LINUS)}`));
  await screenshot(joinPage, "join");
  await joinPage.fill('input[name="password"]', "linus's password");
  await joinPage.fill('input[name="password2"]', "linus's password");
  await joinPage.click('button[type="submit"]');
  t.equal(new URL(joinPage.url()).pathname, "/dashboard/usage", "joined and signed in");
  t.match(await joinPage.textContent("header"), LINUS);
  await joinPage.goto(base + "/dashboard/projects");
  t.match(await joinPage.textContent("main"), /Owners create and rename projects/, "a member: no project forms");
  // A member who posts the form anyway (built in the page, with the session's own CSRF token) gets the 403 page.
  await Promise.all([
    joinPage.waitForURL(base + "/dashboard/projects", { waitUntil: "load" }).catch(() => {}),
    joinPage.evaluate(`(() => {
      const f = document.createElement("form");
      f.method = "post";
      f.action = "/dashboard/projects";
      for (const [k, v] of [["csrf", document.querySelector('input[name="csrf"]').value], ["name", "Linus's project"]]) {
        const i = document.createElement("input");
        i.name = k;
        i.value = v;
        f.append(i);
      }
      document.body.append(f);
      f.submit();
    })()`),
  ]);
  await joinPage.waitForSelector('[role="alert"]');
  t.equal(await joinPage.textContent("h1"), "Not allowed");
  t.match(await joinPage.textContent('[role="alert"]'), /Only owners/);
  await screenshot(joinPage, "forbidden");
  await joinPage.goto(link);
  t.match(await joinPage.textContent('[role="alert"]'), /used already/, "the link works once");
  await page.goto(base + "/dashboard/invitations");
  t.match(await page.textContent("main table"), new RegExp(`${escaped(LINUS)}\\s*member\\s*accepted`));
});

t.test("files: list, detail, download and delete; a file name holding markup is text", async (t) => {
  const client = new OpenAI({ apiKey: KEY, baseURL: stack.gateway.baseURL, maxRetries: 0 });
  const content = '{"a": 1}\n{"b": 2}\n';
  const file = await client.files.create({ file: await toFile(Buffer.from(content), "<img src=x onerror=alert(3)>.jsonl"), purpose: "user_data" });
  await page.goto(base + "/dashboard/files");
  const row = page.locator("tr", { hasText: file.id });
  t.match(await row.textContent(), "<img src=x onerror=alert(3)>.jsonl");
  t.equal(await page.locator("main img").count(), 0);
  await screenshot(page, "files");
  await row.locator("a").click();
  t.match(await page.textContent("main"), new RegExp(`${content.length} bytes`));
  await screenshot(page, "file-detail");
  const [download] = await Promise.all([page.waitForEvent("download"), page.click('a:has-text("Download")')]);
  t.equal(readFileSync((await download.path())!, "utf8"), content, "downloaded byte for byte");
  await page.click('button:has-text("Delete file")');
  t.match(await page.textContent('[role="status"]'), `File ${file.id} deleted`);
  const status = await client.files.retrieve(file.id).then(() => 200, (err: { status?: number }) => err.status);
  t.equal(status, 404, "gone from the API");
  t.same(dialogs, [], "no dialog fired");
});

t.test("rate limits: each model's budget and its use in this window", async (t) => {
  await api("/v1/chat/completions", { model: TEST_MODEL, messages: [{ role: "user", content: "Count me" }], max_tokens: 2 });
  await page.goto(base + "/dashboard/limits");
  const row = page.locator("tr", { hasText: TEST_MODEL });
  t.equal(await row.count(), 1, "one budget: the organization's, for the one model");
  t.equal(await row.locator("progress").first().getAttribute("max"), "250", "the catalog's requests per window");
  t.ok(Number(await row.locator("progress").first().getAttribute("value")) >= 1, "this window's requests are counted");
  await screenshot(page, "limits");
  t.same(cspViolations, [], "no Content-Security-Policy violation on these pages either");
});
