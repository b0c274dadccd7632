// tier: slow (runs every documented block: streams, a sandbox, a job, a deployed app)
import t from "tap";
import { spawn, spawnSync } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { slugOf } from "../../../modules/apps/mod.js";
import { CookieClient } from "../../harness/dashboard.js";
import { childEnv, repoRoot, TEST_ADMIN_TOKEN } from "../../harness/processes.js";
import { sharedStack } from "../../harness/shared-stack.js";
import { uniqueEmail } from "../../harness/stack.js";

// The code blocks of the README, getting started and the API page cannot rot: every block marked runnable (an HTML
// comment `<!-- runnable: /regex/ ... -->` on the line before its fence) runs here against a real
// stack, and its output must match each regex. The blocks run the way a person runs them after
// `npm start`: from a directory that looks like the checkout (`.tributary/api-key` holding the
// key, `.tributary/gateway-url` the gateway's address, `.tributary/admin-token`, `bin/`,
// `examples/`, `node_modules/`), with the environment a one-machine stack implies (its home, port
// and admin address). The substitutions are the gateway's address (the snippets say
// http://127.0.0.1:8080, the shared stack listens elsewhere) and the example app's addresses: the
// tenant's organization is not the local stack's, so the example app's manifest names the
// tenant's slugs, as the README tells a person with another key to do, and its host name and
// path address are the tenant's. Emails are run-unique.

const PAGES = ["README.md", "docs/getting-started.md", "docs/api.md"];
const DOC_URL = "http://127.0.0.1:8080";
const DOC_EMAIL = "ada@example.com";
const BLOCK_TIMEOUT_MS = 180_000;

interface Block {
  where: string;
  lang: string;
  code: string;
  expects: RegExp[];
}

/** The runnable blocks of a page, in order: the marker comment, then the fenced code right below it. */
function runnableBlocks(page: string): Block[] {
  const text = readFileSync(join(repoRoot, page), "utf8");
  const out: Block[] = [];
  for (const m of text.matchAll(/^<!-- runnable:(.*?)-->\n```(\w+)\n([\s\S]*?)\n```$/gm)) {
    const line = text.slice(0, m.index).split("\n").length;
    const expects = [...m[1]!.matchAll(/\/((?:\\.|[^/\\])+)\/([a-z]*)/g)].map((e) => new RegExp(e[1]!, e[2]));
    out.push({ where: `${page}:${line}`, lang: m[2]!, code: m[3]!, expects });
  }
  return out;
}

const blocks = PAGES.flatMap(runnableBlocks);
const markers = PAGES.map((p) => (readFileSync(join(repoRoot, p), "utf8").match(/<!-- runnable:/g) ?? []).length).reduce((a, b) => a + b, 0);

t.test("the pages have runnable blocks, each with its expected output, of a kind this test runs", async (t) => {
  t.equal(blocks.length, markers, "every marker is followed by a fenced block");
  t.ok(blocks.length >= 8, `${blocks.length} runnable blocks`);
  for (const b of blocks) {
    t.ok(["sh", "js", "python"].includes(b.lang), `${b.where}: ${b.lang}`);
    t.ok(b.expects.length > 0, `${b.where}: says what it prints`);
  }
});

const stack = await sharedStack(t);

// A directory that looks like the checkout after `npm start`, for this stack and this tenant.
const work = mkdtempSync(join(tmpdir(), "tributary-quickstart-"));
t.teardown(() => rmSync(work, { recursive: true, force: true }));
const home = join(work, ".tributary");
mkdirSync(home);
writeFileSync(join(home, "api-key"), stack.key + "\n", { mode: 0o600 });
writeFileSync(join(home, "admin-token"), TEST_ADMIN_TOKEN + "\n", { mode: 0o600 });
writeFileSync(join(home, "gateway-url"), stack.gateway.url + "\n");
symlinkSync(join(repoRoot, "bin"), join(work, "bin"));
symlinkSync(join(repoRoot, "node_modules"), join(work, "node_modules"));
const organization = (await stack.admin.listOrganizations({})).organizations.find((o: { id: string }) => o.id === stack.organizationId)!;
const project = (await stack.admin.listProjects({ organizationId: stack.organizationId })).projects.find((p: { id: string }) => p.id === stack.projectId)!;
cpSync(join(repoRoot, "examples"), join(work, "examples"), { recursive: true });
const manifest = join(work, "examples", "chat-app", "tributary.yaml");
writeFileSync(
  manifest,
  readFileSync(manifest, "utf8")
    .replace(/^organization_slug: .*$/m, `organization_slug: ${slugOf(organization.name)}`)
    .replace(/^project: .*$/m, `project: ${project.name}`)
    .replace(/^project_slug: .*$/m, `project_slug: ${slugOf(project.name)}`),
);

// The example app's addresses as the snippets name them (the local stack's default project), and as the tenant has them.
const appAddresses: Array<[string, string]> = [
  ["/apps/local/default-project/", `/apps/${slugOf(organization.name)}/${slugOf(project.name)}/`],
  ["default-project.local.apps.localhost", `${slugOf(project.name)}.${slugOf(organization.name)}.apps.localhost`],
];

const email = uniqueEmail("ada");
const env = childEnv({ TRIBUTARY_HOME: home, TRIBUTARY_HOST: "127.0.0.1", TRIBUTARY_PORT: String(stack.gateway.port), TRIBUTARY_ADMIN_ADDR: stack.actors.adminAddr });
// What npm start never sets must not leak in from this process.
for (const name of ["TRIBUTARY_API_KEY", "TRIBUTARY_ADMIN_TOKEN", "TRIBUTARY_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL"]) delete env[name];

/** Python's openai client, when this machine has it: pip needs the internet, which CI may not have. */
const python = "/usr/bin/python3";
const pythonHasOpenai = spawnSync(python, ["-c", "import openai"], { env }).status === 0;

function run(block: Block, index: number): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const code = appAddresses.reduce((text, [doc, tenant]) => text.replaceAll(doc, tenant), block.code.replaceAll(DOC_URL, stack.gateway.url).replaceAll(DOC_EMAIL, email));
  let command: string;
  let args: string[];
  if (block.lang === "sh") [command, args] = ["bash", ["-e", "-o", "pipefail", "-c", code]];
  else if (block.lang === "js") {
    const file = join(work, `snippet-${index}.mjs`);
    writeFileSync(file, code);
    [command, args] = [process.execPath, [file]];
  } else {
    const file = join(work, `snippet-${index}.py`);
    writeFileSync(file, code);
    [command, args] = [python, [file]];
  }
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd: work, env, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => child.kill("SIGKILL"), BLOCK_TIMEOUT_MS);
    child.on("error", reject);
    child.on("close", (exit) => {
      clearTimeout(timer);
      resolve({ code: exit, stdout, stderr });
    });
  });
}

t.teardown(async () => {
  // The deployed example app holds an instance on the shared app host: stop it.
  const list = (await (await stack.fetch("/v1/apps/deployments")).json()) as { data?: Array<{ id: string; status: string }> };
  for (const d of list.data ?? []) if (!["stopped", "failed", "superseded"].includes(d.status)) await stack.fetch(`/v1/apps/deployments/${d.id}/stop`, { method: "POST" });
});

for (const [index, block] of blocks.entries()) {
  if (block.lang === "python") {
    // Whatever the machine has, the snippet must at least be Python.
    t.test(`${block.where} (python) parses`, async (t) => {
      const parsed = spawnSync(python, ["-c", "import ast, sys; ast.parse(sys.stdin.read())"], { input: block.code, env });
      t.equal(parsed.status, 0, String(parsed.stderr));
    });
  }
  // Not faked: without the package a Python snippet using it cannot run; it runs wherever `pip install openai` was done.
  const skip = block.lang === "python" && /^from openai |^import openai/m.test(block.code) && !pythonHasOpenai ? `${python} has no openai package here (pip install openai to run this block)` : false;
  t.test(`${block.where} (${block.lang})`, { skip }, async (t) => {
    const r = await run(block, index);
    t.equal(r.code, 0, "exits 0", { stdout: r.stdout.slice(-4000), stderr: r.stderr.slice(-4000) });
    for (const expected of block.expects) t.match(r.stdout, expected, `prints ${expected}`);
    // The dashboard block says: sign in with that email and password.
    const password = /"password":\s*"([^"]+)"/.exec(block.code)?.[1];
    if (password && block.code.includes("/v1/invitations/redeem")) {
      const signIn = await new CookieClient(stack.gateway.url).signIn(email, password);
      t.equal(signIn.status, 303, "the new owner signs in to the dashboard with that email and password");
    }
  });
}
