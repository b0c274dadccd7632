// tier: slow (a stack of its own)
import t from "tap";
import { startStack } from "../../harness/stack.js";
import { TEST_KEY, TEST_MODEL } from "../../harness/processes.js";

// Keys of different projects are different principals: with TRIBUTARY_RATE_LIMIT_SCOPE=project
// each project draws from its own budget, so one project spending its budget leaves the others
// untouched, and an organization key spends the budget of the project it names.
// Configured keys (TRIBUTARY_API_KEYS) land in their own projects of the local organization.

const KEY_A = "sk-test-project-a";
const KEY_B = "sk-test-project-b";
const RPM = 3;
const stack = await startStack(t, {
  env: { TRIBUTARY_MODEL_OVERRIDES: JSON.stringify({ [TEST_MODEL]: { rate_limits: { requests_per_minute: RPM, tokens_per_minute: 100_000 } } }) },
  gatewayEnv: { TRIBUTARY_API_KEYS: `${KEY_A}=proj_a,${KEY_B}=proj_b`, TRIBUTARY_RATE_LIMIT_SCOPE: "project" },
});

const chat = (key: string, project?: string) =>
  fetch(stack.gateway.url + "/v1/chat/completions", {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json", ...(project ? { "openai-project": project } : {}) },
    body: JSON.stringify({ model: TEST_MODEL, messages: [{ role: "user", content: "Hi" }], max_tokens: 1 }),
  });

// Budgets are one-minute windows aligned to the clock: keep the requests below inside one of them.
const left = 60_000 - (Date.now() % 60_000);
if (left < 8_000) await new Promise((r) => setTimeout(r, left + 50));

t.test("configured keys are keys of their own projects in the local organization", async (t) => {
  const projects = await stack.admin.listProjects({ organizationId: "org-local" });
  t.same(projects.projects.map((p) => p.id).sort(), ["proj-local", "proj_a", "proj_b"]);
  const a = await chat(KEY_A);
  t.equal(a.status, 200);
  t.equal(a.headers.get("openai-project"), "proj_a");
  t.equal(a.headers.get("openai-organization"), "org-local");
});

t.test("each project has its own budget: one spending it does not touch another", async (t) => {
  const statuses: number[] = [];
  for (let i = 0; i < RPM + 1; i++) statuses.push((await chat(KEY_B)).status);
  t.same(statuses, [200, 200, 200, 429], "project b spent its budget");
  const a = await chat(KEY_A);
  t.equal(a.status, 200, "project a still has budget");
  t.equal(Number(a.headers.get("x-ratelimit-remaining-requests")), RPM - 2, "a's own count (1 request before this one)");
  t.equal((await chat(TEST_KEY)).status, 200, "so does the default project");

  // An organization key spends the budget of the project it names.
  const { secret } = await stack.admin.createApiKey({ projectId: "", organizationId: "org-local", name: "" });
  const viaB = await chat(secret, "proj_b");
  t.equal(viaB.status, 429, "through project b: b's budget, spent");
  t.match(((await viaB.json()) as { error: { message: string } }).error.message, /in project proj_b/);
  const viaA = await chat(secret, "proj_a");
  t.equal(viaA.status, 200);
  t.equal(viaA.headers.get("openai-project"), "proj_a");
  t.equal(Number(viaA.headers.get("x-ratelimit-remaining-requests")), 0, "a's last request");
});
