import t from "tap";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { chromium, type Browser, type Page } from "playwright-core";
import { startStack } from "../../harness/stack.js";
import { repoRoot, TEST_MODEL } from "../../harness/processes.js";
import { ownerOrganization } from "../../harness/dashboard.js";
import OpenAI from "openai";
import { chatLine, createBatch, waitForBatch } from "../../harness/batches.js";

// The console in real headless Chromium (Debian's chromium, driven with playwright-core): sign
// in, a wrong password, find a logged request by model and open its detail, see the usage plot and
// a batch's progress,
// create a key (shown once) and revoke it (the API refuses it at once), and a prompt holding
// markup rendered as text (no dialog fires). Screenshots of the main pages go to
// .tap/dashboard-screenshots/.

const SHOTS = join(repoRoot, ".tap", "dashboard-screenshots");
mkdirSync(SHOTS, { recursive: true });
const stack = await startStack(t, { env: { TRIBUTARY_TRACE_FLUSH_MS: "20", TRIBUTARY_USAGE_FLUSH_MS: "50" } });
const EMAIL = "grace@example.com";
const PASSWORD = "a long enough password";
const org = await ownerOrganization(stack.actors, stack.gateway, EMAIL, PASSWORD);
const KEY = org.api_key.value;
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
  await page.screenshot({ path: join(SHOTS, "sign-in-error.png") });
  await signIn(EMAIL, PASSWORD);
  t.equal(new URL(page.url()).pathname, "/dashboard/traces");
  t.match(await page.textContent("header"), EMAIL);
  const cookies = await context.cookies();
  const session = cookies.find((c) => c.name === "tributary_session");
  t.ok(session?.httpOnly, "HttpOnly");
  t.equal(session?.sameSite, "Strict");
  t.equal(await page.evaluate("document.cookie.includes('tributary_session')"), false, "scripts cannot read it");
});

t.test("logs: find a logged request by model and open its detail", async (t) => {
  // Traces are written in the background: reload until all four are listed.
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
  await page.screenshot({ path: join(SHOTS, "logs.png"), fullPage: true });
  await page.locator("tbody tr a").last().click();
  t.match(new URL(page.url()).pathname, /^\/dashboard\/traces\/trace_/);
  t.match(await page.textContent("main"), /Timeline/);
  t.match(await page.textContent("main"), /Story number 0/, "the oldest: its prompt");
  t.ok(await page.locator("main svg rect").count() >= 3, "timeline bars");
  await page.screenshot({ path: join(SHOTS, "trace-detail.png"), fullPage: true });
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
  await page.screenshot({ path: join(SHOTS, "trace-markup-as-text.png"), fullPage: true });
});

t.test("usage: plots of requests, tokens and errors", async (t) => {
  let requests = "";
  for (let i = 0; i < 50 && requests !== "5"; i++) {
    await page.goto(base + "/dashboard/usage?width=1m");
    requests = (await page.locator("main table tbody tr td").nth(1).textContent().catch(() => "")) ?? "";
    if (requests !== "5") await page.waitForTimeout(100);
  }
  t.equal(requests, "5", "five requests, logged or not (the batch below comes later)");
  t.match(await page.textContent("main table tbody tr td"), TEST_MODEL);
  const bars = await page.locator("figure svg rect").evaluateAll((rects) => rects.filter((r) => Number(r.getAttribute("height")) > 0).length);
  t.ok(bars >= 2, "requests and tokens plotted");
  await page.screenshot({ path: join(SHOTS, "usage.png"), fullPage: true });
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
  await page.screenshot({ path: join(SHOTS, "batches.png"), fullPage: true });
});

t.test("members", async (t) => {
  await page.goto(base + "/dashboard/members");
  t.match(await page.textContent("main table"), EMAIL);
  t.match(await page.textContent("main table"), /owner/);
  await page.screenshot({ path: join(SHOTS, "members.png"), fullPage: true });
});

t.test("API keys: create (shown once) and revoke", async (t) => {
  await page.goto(base + "/dashboard/keys");
  await page.fill('input[name="name"]', "from the console");
  await page.click('form.filters button:has-text("Create key")');
  const secret = ((await page.textContent("#new-key")) ?? "").trim();
  t.match(secret, /^sk-proj-/);
  await page.screenshot({ path: join(SHOTS, "keys-created.png"), fullPage: true });
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
  await page.screenshot({ path: join(SHOTS, "keys.png"), fullPage: true });
  t.same(cspViolations, [], "no Content-Security-Policy violation on any page");
});
