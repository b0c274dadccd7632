import t from "tap";
import { createHash } from "node:crypto";
import { join } from "node:path";
import { chromium, type Browser, type BrowserContext, type Page } from "playwright-core";
import { newSortableId } from "../../../lib/ids.js";
import { kvToken } from "../../../lib/nats/subjects.js";
import { slugOf } from "../../../modules/apps/mod.js";
import { JobStore, type JobObject } from "../../../modules/jobs/mod.js";
import { appDir, uploadBundle, waitForDeployment } from "../../harness/apps.js";
import { CookieClient, ownerOrganization, screenshot } from "../../harness/dashboard.js";
import { TEST_MODEL } from "../../harness/processes.js";
import { sharedStack } from "../../harness/shared-stack.js";
import { uniqueEmail } from "../../harness/stack.js";

// The console's pages of what a project runs: sandboxes, jobs, hosted apps' deployments, artifacts
// and secrets, and the usage page's totals, dated axes, per-model latency and run time. Over HTTP:
// every page needs a session, every form its CSRF token (refused without, nothing changed), another
// organization's objects are not found (by id, with its project named, by every action), and a
// secret's value never comes back. In headless Chromium (one browser, a desktop and a phone
// context): the pages reached from the navigation, a job's output followed as it runs, the
// actions clicked, at 1280x800 and 390x844, with no page wider than the phone's screen (screenshots
// of both with TEST_SCREENSHOTS=DIR).

const stack = await sharedStack(t);
const PASSWORD = "the platform pages' password";
// Hosted addresses are made of the names and are platform-wide: names of this run only.
const tag = Math.random().toString(36).slice(2, 8);
const ALICE = uniqueEmail("alice");
const BORIS = uniqueEmail("boris");
const a = await ownerOrganization(stack, ALICE, PASSWORD, { organization: `Console A ${tag}`, project: "Apps" });
const b = await ownerOrganization(stack, BORIS, PASSWORD, { organization: `Console B ${tag}`, project: "Apps" });

type Org = typeof a;
async function api(org: Org, method: string, path: string, body?: unknown): Promise<any> {
  const res = await fetch(stack.gateway.url + path, {
    method,
    headers: { authorization: `Bearer ${org.api_key.value}`, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  try {
    return { ...JSON.parse(text), http: res.status };
  } catch {
    return { text, http: res.status };
  }
}
const until = async <T>(read: () => Promise<T>, done: (v: T) => boolean, what: string): Promise<T> => {
  for (let i = 0; i < 600; i++) {
    const v = await read();
    if (done(v)) return v;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${what}: never`);
};

// ---- what the two organizations run ----

/** A small ASGI app that says something on each stream when it starts. */
const APP = `
import sys
print("console app: starting", flush=True)
print("console app: a line on stderr", file=sys.stderr, flush=True)

async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"ok"})
`;
async function deploy(org: Org, organizationName: string): Promise<any> {
  const manifest = { entrypoint: "app:app", organization_slug: slugOf(organizationName), project: "Apps", project_slug: "apps", cpu_mhz: 100, gpu_count: 0, memory_size_mb: 64 };
  const dir = appDir(undefined, { "app.py": APP, "tributary.yaml": Object.entries(manifest).map(([k, v]) => `${k}: ${JSON.stringify(v)}`).join("\n") + "\n" });
  const artifact = await uploadBundle(stack.gateway.url, org.api_key.value, dir);
  const created = await api(org, "POST", "/v1/apps/deployments", { artifact_id: artifact });
  if (created.http !== 201) throw new Error(`deploy: ${JSON.stringify(created)}`);
  return waitForDeployment(stack.gateway.url, org.api_key.value, created.id, ["healthy"], 60_000);
}
// A's second deployment replaces its first; B's is another organization's.
const deployments = Promise.all([
  (async () => {
    const first = await deploy(a, `Console A ${tag}`);
    return { first, second: await deploy(a, `Console A ${tag}`) };
  })(),
  deploy(b, `Console B ${tag}`),
]);
// Awaited by the apps' test; until then a failure must not end the file unreported.
deployments.catch(() => {});

const SANDBOX = { cpu_mhz: 100, memory_mb: 64, disk_mb: 16 };
const theirSandbox = await api(b, "POST", "/v1/sandboxes", { ...SANDBOX, metadata: { owner: "B" } });
const theirJob = await api(b, "POST", "/v1/jobs", { command: "echo theirs", ...SANDBOX });
if ((await api(b, "POST", "/v1/secrets", { name: "THEIRS_ONLY", value: "their value" })).http !== 200) throw new Error("their secret was not created");
const finishedJob = await api(a, "POST", "/v1/jobs", { command: 'echo "hello from a job"; echo "a warning" >&2; mkdir -p /workspace/output; echo 42 > /workspace/output/answer.txt', ...SANDBOX });
// Long enough to follow, and to cancel from the console.
const runningJob = await api(a, "POST", "/v1/jobs", { command: 'for i in $(seq 1 900); do echo "line $i"; sleep 0.1; done', ...SANDBOX });
t.teardown(() => api(a, "POST", `/v1/jobs/${runningJob.id}/cancel`));
t.teardown(() => api(b, "POST", `/v1/sandboxes/${theirSandbox.id}/stop`));
// Requests of A's project, for the usage page's per-model latency.
for (const stream of [false, true]) await api(a, "POST", "/v1/chat/completions", { model: TEST_MODEL, messages: [{ role: "user", content: "Hello" }], max_tokens: 8, stream });

// A queued job whose worker could not place its sandbox says why (waiting_reason). On a shared
// stack no sandbox host may be filled up for it, so its record is written as a worker leaves one,
// without a queue message: no worker takes it, and it stays queued until cancelled.
const admin = await stack.nats.connect("admin");
t.teardown(() => admin.close());
const WAITING = "every sandbox host is full (memory: 3.9 of 4.0 GiB reserved, 1.0 GiB asked)";
const queuedJob: JobObject = {
  id: newSortableId("job_"), object: "job", status: "queued", command: ["/bin/sh", "-c", "echo never"], cwd: "/workspace", env_names: [], secrets: [], timeout_seconds: 600, max_retries: 0,
  resources: { cpu_mhz: 1000, memory_mb: 512, disk_mb: 512 }, network: "none", metadata: {}, attempt: 0, exit_code: null, error: null, sandbox_id: null, waiting_reason: WAITING,
  input_files: [], output_files: [], created_at: Math.floor(Date.now() / 1000), started_at: null, finished_at: null,
};
// Two: one is cancelled over HTTP, the other stays queued for the screenshots.
const stillQueued: JobObject = { ...queuedJob, id: newSortableId("job_") };
const jobRecords = await JobStore.open(admin);
for (const job of [queuedJob, stillQueued]) await jobRecords.kv.create(`${kvToken(a.project.id)}.${job.id}`, JSON.stringify({ job, project: a.project.id, env: {} }));
t.teardown(() => api(a, "POST", `/v1/jobs/${stillQueued.id}/cancel`));

const alice = new CookieClient(stack.gateway.url);
if ((await alice.signIn(ALICE, PASSWORD)).status !== 303) throw new Error("alice cannot sign in");
const csrf = CookieClient.csrfOf((await alice.request("/dashboard/secrets")).text);

t.test("the platform's pages need a session", async (t) => {
  const anon = new CookieClient(stack.gateway.url);
  const ids = { sandbox: theirSandbox.id, job: theirJob.id };
  for (const path of ["/dashboard/sandboxes", `/dashboard/sandboxes/${ids.sandbox}`, "/dashboard/jobs", `/dashboard/jobs/${ids.job}`, `/dashboard/jobs/${ids.job}/logs`, "/dashboard/apps", "/dashboard/artifacts", "/dashboard/secrets", "/dashboard/secrets/THEIRS_ONLY"]) {
    const res = await anon.request(path);
    t.equal(res.status, 303, path);
    t.equal(res.headers.get("location"), "/dashboard/sign-in");
  }
  for (const path of [`/dashboard/sandboxes/${ids.sandbox}/stop`, `/dashboard/jobs/${ids.job}/cancel`, "/dashboard/secrets", "/dashboard/secrets/THEIRS_ONLY/delete"])
    t.equal((await anon.request(path, { form: { csrf: "x" } })).status, 303, `POST ${path}`);
});

t.test("secrets: created, rotated and deleted with forms; a value is never shown", async (t) => {
  const VALUE = `first line <b>${tag}</b>\r\nsecond line`;
  const shown = (text: string) => text.includes(tag) || text.includes("second line");
  t.equal((await alice.request("/dashboard/secrets", { form: { name: "CONSOLE_TOKEN", value: VALUE } })).status, 403, "no CSRF token");
  t.equal((await alice.request("/dashboard/secrets", { form: { csrf: "not the token", name: "CONSOLE_TOKEN", value: VALUE } })).status, 403, "a wrong one");
  t.equal((await api(a, "GET", "/v1/secrets/CONSOLE_TOKEN")).http, 404, "nothing was created");

  const created = await alice.request("/dashboard/secrets", { form: { csrf, name: "CONSOLE_TOKEN", value: VALUE } });
  t.equal(created.status, 200);
  t.match(created.text, "Secret CONSOLE_TOKEN created (version 1)");
  t.notOk(shown(created.text), "the value is not on the page that created it");
  const again = await alice.request("/dashboard/secrets", { form: { csrf, name: "CONSOLE_TOKEN", value: VALUE } });
  t.equal(again.status, 409);
  t.notOk(shown(again.text), "nor on the page that refused it");
  const invalid = await alice.request("/dashboard/secrets", { form: { csrf, name: "lower case", value: VALUE } });
  t.equal(invalid.status, 400);
  t.match(invalid.text, /secret names are 1-128 characters/);
  t.notOk(shown(invalid.text));
  for (const path of ["/dashboard/secrets", "/dashboard/secrets/CONSOLE_TOKEN"]) {
    const page = await alice.request(path);
    t.equal(page.status, 200, path);
    t.match(page.text, "CONSOLE_TOKEN");
    t.notOk(shown(page.text), `${path}: no value`);
  }

  // The value arrived as typed (a textarea's CRLF line ends stored as LF): a sandbox gets it.
  const sandbox = await api(a, "POST", "/v1/sandboxes", { ...SANDBOX, secrets: ["CONSOLE_TOKEN"] });
  t.equal(sandbox.http, 200);
  const printed = await api(a, "POST", `/v1/sandboxes/${sandbox.id}/exec`, { command: "printenv CONSOLE_TOKEN" });
  t.equal(printed.stdout, `first line <b>${tag}</b>\nsecond line\n`);
  await api(a, "POST", `/v1/sandboxes/${sandbox.id}/stop`);

  t.equal((await alice.request("/dashboard/secrets/CONSOLE_TOKEN/rotate", { form: { value: "rotated" } })).status, 403, "rotate: no CSRF token");
  t.equal((await api(a, "GET", "/v1/secrets/CONSOLE_TOKEN")).version, 1, "not rotated");
  const rotated = await alice.request("/dashboard/secrets/CONSOLE_TOKEN/rotate", { form: { csrf, value: `rotated ${tag}` } });
  t.equal(rotated.status, 200);
  t.match(rotated.text, "rotated: version 2");
  t.notOk(shown(rotated.text));
  t.equal((await api(a, "GET", "/v1/secrets/CONSOLE_TOKEN")).version, 2);

  t.equal((await alice.request("/dashboard/secrets/CONSOLE_TOKEN/delete", { form: {} })).status, 403, "delete: no CSRF token");
  t.equal((await api(a, "GET", "/v1/secrets/CONSOLE_TOKEN")).http, 200, "not deleted");
  const deleted = await alice.request("/dashboard/secrets/CONSOLE_TOKEN/delete", { form: { csrf } });
  t.equal(deleted.status, 200);
  t.match(deleted.text, "Secret CONSOLE_TOKEN deleted");
  t.equal((await api(a, "GET", "/v1/secrets/CONSOLE_TOKEN")).http, 404, "gone from the API");
});

let mySandbox: any;

t.test("sandboxes: listed with status, resources and age; a record; stop needs its token", async (t) => {
  mySandbox = await api(a, "POST", "/v1/sandboxes", { ...SANDBOX, metadata: { purpose: "<i>console</i>" } });
  t.equal(mySandbox.status, "running");
  const list = await alice.request("/dashboard/sandboxes");
  t.equal(list.status, 200);
  t.match(CookieClient.rowOf(list.text, mySandbox.id), [mySandbox.id, "running", "100 MHz · 64 MB · 16 MB", "none", /^\d+ s$/, /^\d+ s$/, /^\d{4}-\d\d-\d\d /, "—"], "status, resources, network, age and run time");
  t.notMatch(list.text, theirSandbox.id, "not another organization's");
  t.notMatch((await alice.request("/dashboard/sandboxes?status=stopped")).text, mySandbox.id, "filtered by status");
  const detail = await alice.request(`/dashboard/sandboxes/${mySandbox.id}`);
  t.equal(detail.status, 200);
  t.match(detail.text, "&lt;i&gt;console&lt;/i&gt;", "metadata as text");
  t.match(detail.text, /are not recorded/, "says that commands are not recorded");
  t.equal((await alice.request(`/dashboard/sandboxes/${mySandbox.id}/stop`, { form: {} })).status, 403, "stop: no CSRF token");
  t.equal((await api(a, "GET", `/v1/sandboxes/${mySandbox.id}`)).status, "running", "still running");
  // A job's sandbox names its job.
  const done = await until(() => api(a, "GET", `/v1/jobs/${finishedJob.id}`), (j) => j.status === "succeeded", "the job to succeed");
  t.match((await alice.request(`/dashboard/sandboxes/${done.sandbox_id}`)).text, new RegExp(`/dashboard/jobs/${done.id}\\?project=`));
});

t.test("jobs: a queued job says why it waits; output with stderr marked; the whole output; cancel", async (t) => {
  const list = await alice.request("/dashboard/jobs");
  t.equal(list.status, 200);
  t.same(CookieClient.rowOf(list.text, queuedJob.id)?.slice(0, 3), [queuedJob.id, `queued waiting: ${WAITING}`, "echo never"], "a queued job, and why it waits");
  t.notMatch(list.text, theirJob.id);
  t.match((await alice.request(`/dashboard/jobs/${queuedJob.id}`)).text, `Waiting: ${WAITING}`);

  const finished = await alice.request(`/dashboard/jobs/${finishedJob.id}`);
  t.match(finished.text, /hello from a job\n/, "its output");
  t.match(finished.text, /<span class="stderr">a warning\n<\/span>/, "stderr marked");
  t.match(finished.text, /\/dashboard\/files\/file-[A-Za-z0-9]+\?project=/, "its output file, linked");
  t.notMatch(finished.text, /http-equiv="refresh"/, "a final job's page does not reload");
  const whole = await alice.request(`/dashboard/jobs/${finishedJob.id}/logs`);
  t.same(whole.text.split("\n").sort(), ["", "a warning", "hello from a job"], "both streams, whole");
  t.match(whole.headers.get("content-security-policy"), /sandbox/);
  t.match(whole.headers.get("content-type"), /^text\/plain/);

  await until(() => api(a, "GET", `/v1/jobs/${runningJob.id}`), (j) => j.status === "running", "the long job to run");
  const running = await alice.request(`/dashboard/jobs/${runningJob.id}`);
  t.match(running.text, `<meta http-equiv="refresh" content="2; url=/dashboard/jobs/${runningJob.id}?project=${a.project.id}">`, "a running job's page follows it, from its own address");
  t.notMatch((await alice.request(`/dashboard/jobs/${runningJob.id}?follow=0`)).text, /http-equiv="refresh"/, "unless asked not to");
  t.equal((await alice.request(`/dashboard/jobs/${runningJob.id}/cancel`, { form: {} })).status, 403, "cancel: no CSRF token");
  t.equal((await api(a, "GET", `/v1/jobs/${runningJob.id}`)).status, "running", "still running");

  const cancelled = await alice.request(`/dashboard/jobs/${queuedJob.id}/cancel`, { form: { csrf } });
  t.equal(cancelled.status, 200);
  t.match(cancelled.text, `Job ${queuedJob.id} is cancelled`);
  t.equal((await api(a, "GET", `/v1/jobs/${queuedJob.id}`)).status, "cancelled", "a queued job is cancelled at once");
});

let mine: { first: any; second: any };
let theirs: any;

t.test("apps: deployments with their addresses and the one each replaced; logs; artifacts with sha256 and download", async (t) => {
  [mine, theirs] = await deployments;
  await until(() => api(a, "GET", `/v1/apps/deployments/${mine.first.id}`), (d) => d.status === "superseded", "the first deployment to be superseded");
  const list = await alice.request("/dashboard/apps");
  t.equal(list.status, 200);
  const row = CookieClient.rowOf(list.text, mine.second.id)!;
  t.same(row.slice(0, 3), [mine.second.id, "healthy", "1 (healthy)"], "its status and its instances");
  t.equal(row[3], `${mine.second.hosted_url} ${mine.second.local_url.replace(/^http:\/\/[^/]+/, stack.gateway.url)}`, "its hosted and path addresses");
  t.match(row[3], `/apps/${slugOf(`Console A ${tag}`)}/apps/`);
  t.equal(row[4], mine.first.id, "the deployment it replaced");
  t.match(list.text, new RegExp(`<a href="/dashboard/apps/${mine.first.id}\\?project=${a.project.id}">`), "linked");
  const ended = CookieClient.rowOf(list.text, mine.first.id);
  t.same([ended?.[1], ended?.[3]], ["superseded", "not serving (superseded)"], "an ended deployment serves no address");
  t.notMatch(list.text, theirs.id);

  const detail = await alice.request(`/dashboard/apps/${mine.second.id}`);
  t.match(detail.text, /console app: starting/, "its logs");
  t.match(detail.text, /<span class="stderr">[\d:]+ console app: a line on stderr/, "stderr marked");
  t.match(detail.text, `<meta http-equiv="refresh" content="3; url=/dashboard/apps/${mine.second.id}?project=${a.project.id}">`, "followed while it runs");
  t.equal((await alice.request(`/dashboard/apps/${mine.second.id}/stop`, { form: {} })).status, 403, "stop: no CSRF token");
  t.equal((await api(a, "GET", `/v1/apps/deployments/${mine.second.id}`)).status, "healthy", "still serving");

  const artifacts = await alice.request("/dashboard/artifacts");
  for (const d of [mine.first, mine.second]) {
    const artifact = await api(a, "GET", `/v1/artifacts/${d.artifact_id}`);
    t.match(CookieClient.rowOf(artifacts.text, artifact.id, 1), ["bundle.tar.gz", artifact.id, "ready", `${artifact.bytes} B`, artifact.sha256, /^\d{4}-/, "Download"], "size and sha256");
    const download = await fetch(`${stack.gateway.url}/dashboard/artifacts/${artifact.id}/content`, { headers: { cookie: [...alice.cookies].map(([k, v]) => `${k}=${v}`).join("; ") } });
    t.equal(download.status, 200);
    t.equal(createHash("sha256").update(Buffer.from(await download.arrayBuffer())).digest("hex"), artifact.sha256, "the bytes are the artifact's");
    t.match(download.headers.get("content-disposition"), /^attachment; filename="bundle\.tar\.gz"$/);
    t.match(download.headers.get("content-security-policy"), /sandbox/);
  }
  t.notMatch(artifacts.text, theirs.artifact_id);
  t.match((await alice.request(`/dashboard/artifacts/${mine.second.artifact_id}`)).text, /entrypoint: &quot;app:app&quot;/, "the manifest, as text");
});

t.test("another organization's objects are not found, by any page or action, and are left alone", async (t) => {
  const theirProject = `?project=${b.project.id}`;
  for (const path of [
    `/dashboard/sandboxes/${theirSandbox.id}`,
    `/dashboard/jobs/${theirJob.id}`,
    `/dashboard/jobs/${theirJob.id}/logs`,
    `/dashboard/apps/${theirs.id}`,
    `/dashboard/artifacts/${theirs.artifact_id}`,
    `/dashboard/artifacts/${theirs.artifact_id}/content`,
    "/dashboard/secrets/THEIRS_ONLY",
  ]) {
    t.equal((await alice.request(path)).status, 404, path);
    t.equal((await alice.request(path + theirProject)).status, 404, `${path}, naming their project`);
  }
  for (const path of [`/dashboard/sandboxes/${theirSandbox.id}/stop`, `/dashboard/jobs/${theirJob.id}/cancel`, `/dashboard/apps/${theirs.id}/stop`, "/dashboard/secrets/THEIRS_ONLY/rotate", "/dashboard/secrets/THEIRS_ONLY/delete"]) {
    t.equal((await alice.request(path, { form: { csrf, value: "hijacked" } })).status, 404, `POST ${path}`);
    t.equal((await alice.request(path + theirProject, { form: { csrf, value: "hijacked" } })).status, 404, `POST ${path}, naming their project`);
  }
  t.notMatch((await alice.request(`/dashboard/secrets${theirProject}`)).text, "THEIRS_ONLY", "their secrets are not listed");
  t.equal((await api(b, "GET", `/v1/sandboxes/${theirSandbox.id}`)).status, "running", "their sandbox runs on");
  t.equal((await api(b, "GET", "/v1/secrets/THEIRS_ONLY")).version, 1, "their secret is not rotated");
  t.equal((await api(b, "GET", `/v1/apps/deployments/${theirs.id}`)).status, "healthy", "their app serves on");
  t.not((await api(b, "GET", `/v1/jobs/${theirJob.id}`)).status, "cancelled", "their job is not cancelled");
});

t.test("in Chromium: every page from the navigation, at 1280x800 and on a phone; the actions clicked", async (t) => {
  const browser: Browser = await chromium.launch({
    executablePath: "/usr/bin/chromium",
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  t.teardown(() => browser.close());
  const desktop: BrowserContext = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const PHONE = { width: 390, height: 844 };
  const phone: BrowserContext = await browser.newContext({ viewport: PHONE, isMobile: true, hasTouch: true, deviceScaleFactor: 2 });
  const page: Page = await desktop.newPage();
  const small: Page = await phone.newPage();
  const problems: string[] = [];
  for (const p of [page, small]) {
    p.on("dialog", (d) => {
      problems.push(`dialog: ${d.message()}`);
      void d.dismiss();
    });
    p.on("console", (m) => {
      if (/Content Security Policy/i.test(m.text())) problems.push(m.text());
    });
  }
  const base = stack.gateway.url;

  await page.goto(base + "/dashboard/sign-in");
  await page.fill('input[name="email"]', ALICE);
  await page.fill('input[name="password"]', PASSWORD);
  await page.click('button[type="submit"]');
  t.equal(new URL(page.url()).pathname, "/dashboard/usage", "a sign-in lands on the project's usage");
  await phone.addCookies(await desktop.cookies());

  /** What `page` shows now, also on the phone (screenshots of both): the phone's page as wide as its screen at most. */
  async function shoot(name: string): Promise<void> {
    await screenshot(page, name);
    await small.goto(page.url());
    await screenshot(small, `${name}.phone`);
    // A mobile browser widens its layout to what overflows (innerWidth follows): the screen is the viewport's.
    const width = (await small.evaluate("document.documentElement.scrollWidth")) as number;
    t.ok(width <= PHONE.width, `${name}: the phone's page is ${width} px wide, its screen ${PHONE.width}`);
  }
  /** Follows the navigation's link to `label`. */
  async function navigate(label: string, path: string, heading: RegExp): Promise<void> {
    await page.click(`header nav a:text-is("${label}")`);
    t.equal(new URL(page.url()).pathname, path, `${label} from the navigation`);
    t.match(await page.textContent("h1"), heading);
  }

  // Usage: totals, dates on the axes, the model's latency, the platform's run time.
  await page.goto(base + "/dashboard/usage?width=1m");
  let cells: string[] = [];
  for (let i = 0; i < 100 && !(cells[1] === "2"); i++) {
    if (i > 0) await page.waitForTimeout(100);
    await page.goto(base + "/dashboard/usage?width=1m");
    cells = await page.locator("#by-model tbody tr").first().locator("td").allTextContents();
  }
  t.equal(cells[1], "2", "the two requests, by model");
  t.match(await page.textContent("#totals"), /Requests\s*2(?!\d)/, "the period's totals");
  const ticks = await page.locator("figure svg text tspan").allTextContents();
  t.ok(ticks.some((x) => /^[A-Z][a-z]{2} \d{1,2}$/.test(x)) && ticks.some((x) => /^\d\d:\d\d$/.test(x)), `dates and times on the x axes: ${ticks.slice(0, 4).join(", ")}`);
  t.ok((await page.locator("figure#ttft-0 svg circle").count()) >= 2 && (await page.locator("figure#latency-0 svg circle").count()) >= 2, "TTFT and latency p50 and p95 of the model");
  for (const [i, what] of ["sandboxes", "jobs", "app instances"].entries()) {
    const time = await page.locator("#run-time-table tbody tr").nth(i).locator("td").nth(1).textContent();
    t.match(time, /^[1-9]\d* (s|min)$/, `${what}' run time: ${time}`);
  }
  t.ok((await page.locator("figure#run-time svg circle").count()) >= 3, "run time plotted");
  await shoot("usage");

  // Sandboxes: list, a record, stop clicked.
  await navigate("Sandboxes", "/dashboard/sandboxes", /^Sandboxes$/);
  t.equal(await page.locator("tr", { hasText: mySandbox.id }).count(), 1);
  await shoot("sandboxes");
  await page.click(`a:has-text("${mySandbox.id}")`);
  await shoot("sandbox");
  await page.click('button:has-text("Stop sandbox")');
  t.match(await page.textContent('[role="status"]'), new RegExp(`Sandbox ${mySandbox.id} is (stopping|stopped)`));
  await until(() => api(a, "GET", `/v1/sandboxes/${mySandbox.id}`), (x) => x.status === "stopped", "the sandbox to stop");
  await page.goto(page.url().replace("/stop?", "?"));
  t.equal(await page.locator('button:has-text("Stop sandbox")').count(), 0, "no stop button once stopped");

  // Jobs: the list, a finished job, the running one followed, then cancelled.
  await navigate("Jobs", "/dashboard/jobs", /^Jobs$/);
  t.match(await page.locator("tr", { hasText: stillQueued.id }).textContent(), `waiting: ${WAITING}`);
  await shoot("jobs");
  await page.click(`a:has-text("${finishedJob.id}")`);
  t.match(await page.textContent("#job-output"), /hello from a job\s+a warning/);
  await shoot("job-finished");
  await page.goto(`${base}/dashboard/jobs/${runningJob.id}?project=${a.project.id}`);
  const lastLine = async () => Number(/line (\d+)\s*$/.exec((await page.textContent("#job-output")) ?? "")?.[1] ?? 0);
  const before = await lastLine();
  await page.waitForEvent("load");
  const after = await lastLine();
  t.ok(after > before, `the page reloaded itself with more output (line ${before}, then ${after})`);
  const box = await page.locator("#job-output").evaluate((e: any) => ({ overflows: e.scrollHeight > e.clientHeight, fromBottom: Math.abs(e.scrollTop) }));
  t.same(box, { overflows: true, fromBottom: 0 }, "its output overflows its box, whose newest lines are in view");
  await page.goto(`${base}/dashboard/jobs/${runningJob.id}?project=${a.project.id}&follow=0`);
  await shoot("job-running");
  await page.click('button:has-text("Cancel job")');
  t.match(await page.textContent('[role="status"]'), /is being cancelled|is cancelled/);
  if ((await page.locator('meta[http-equiv="refresh"]').count()) > 0) {
    // Still cancelling: the page follows the job from its own address, and never posts again.
    await page.waitForEvent("load");
    t.equal(new URL(page.url()).pathname, `/dashboard/jobs/${runningJob.id}`, "reloaded as the job's page");
  }
  const ended = await until(() => api(a, "GET", `/v1/jobs/${runningJob.id}`), (j) => j.status === "cancelled", "the job to be cancelled");
  t.equal(ended.status, "cancelled", "cancelled for the API too");

  // Apps: deployments, one with its logs, stopped.
  await navigate("Apps", "/dashboard/apps", /^Apps$/);
  await shoot("apps");
  await page.click(`a:has-text("${mine.second.id}")`);
  t.match(await page.textContent("#app-logs"), /console app: starting/);
  await page.goto(`${base}/dashboard/apps/${mine.second.id}?project=${a.project.id}&follow=0`);
  await shoot("app");
  await page.click('button:has-text("Stop deployment")');
  t.match(await page.textContent('[role="status"]'), `Deployment ${mine.second.id} is stopped`);
  t.equal((await api(a, "GET", `/v1/apps/deployments/${mine.second.id}`)).status, "stopped", "stopped for the API too");
  t.equal(await page.locator('button:has-text("Stop deployment")').count(), 0, "no stop button once stopped");

  // Artifacts: the bundles, one's manifest, its download.
  await navigate("Artifacts", "/dashboard/artifacts", /^Artifacts$/);
  t.equal(await page.locator("tbody tr").count(), 2, "the two bundles");
  await shoot("artifacts");
  await page.click(`a:has-text("bundle.tar.gz") >> nth=0`);
  await shoot("artifact");
  const [download] = await Promise.all([page.waitForEvent("download"), page.click('a:has-text("Download")')]);
  t.equal(download.suggestedFilename(), "bundle.tar.gz");

  // Secrets: create, rotate and delete, clicked.
  await navigate("Secrets", "/dashboard/secrets", /^Secrets$/);
  await page.fill('input[name="name"]', "CLICKED_SECRET");
  await page.fill('textarea[name="value"]', `clicked ${tag}`);
  await page.click('button:has-text("Create secret")');
  t.match(await page.textContent('[role="status"]'), "Secret CLICKED_SECRET created");
  t.notMatch(await page.content(), `clicked ${tag}`, "the value is not on the page");
  await shoot("secrets");
  await page.click('a:has-text("CLICKED_SECRET")');
  await shoot("secret");
  await page.fill('textarea[name="value"]', `again ${tag}`);
  await page.click('button:has-text("Rotate secret")');
  t.match(await page.textContent('[role="status"]'), "rotated: version 2");
  t.notMatch(await page.content(), `again ${tag}`, "nor the new one");
  await page.click('button:has-text("Delete secret")');
  t.match(await page.textContent('[role="status"]'), "Secret CLICKED_SECRET deleted");
  t.equal((await api(a, "GET", "/v1/secrets/CLICKED_SECRET")).http, 404);

  // The other pages keep fitting the phone with the longer navigation.
  for (const [label, path, name] of [["Logs", "/dashboard/traces", "logs"], ["Batches", "/dashboard/batches", "batches"], ["API keys", "/dashboard/keys", "keys"]] as const) {
    await navigate(label, path, /./);
    await shoot(name);
  }
  t.same(problems, [], "no dialog, no Content-Security-Policy violation");
});
