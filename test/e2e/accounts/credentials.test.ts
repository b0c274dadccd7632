import t, { type Test } from "tap";
import OpenAI, { AuthenticationError } from "openai";
import { sharedStack } from "../../harness/shared-stack.js";
import { TEST_MODEL } from "../../harness/processes.js";

// Every bad or missing credential gets OpenAI's 401 and nothing else happens.

const stack = await sharedStack(t);
const url = (path: string) => stack.gateway.url + path;
const chatBody = JSON.stringify({ model: TEST_MODEL, messages: [{ role: "user", content: "Hi" }], max_tokens: 1 });

async function errorOf(t: Test, res: Response): Promise<{ message: string; type: string; param: string | null; code: string | null }> {
  const body = (await res.json()) as { error: { message: string; type: string; param: string | null; code: string | null } };
  t.same(Object.keys(body.error).sort(), ["code", "message", "param", "type"], "OpenAI's error envelope");
  return body.error;
}

t.test("no Authorization header: 401 with code null, on every route", async (t) => {
  for (const [method, path, body] of [["GET", "/v1/models", undefined], ["POST", "/v1/chat/completions", chatBody], ["GET", "/v1/models/x/y", undefined]] as const) {
    const res = await fetch(url(path), { method, body, headers: { "content-type": "application/json" } });
    t.equal(res.status, 401, `${method} ${path}`);
    const err = await errorOf(t, res);
    t.equal(err.code, null);
    t.equal(err.type, "invalid_request_error");
    t.match(err.message, /You didn't provide an API key/);
  }
});

t.test("a malformed Authorization header is the same as none", async (t) => {
  for (const value of ["Basic dXNlcjpwYXNz", "Bearer", "Bearer a b", stack.key]) {
    const res = await fetch(url("/v1/models"), { headers: { authorization: value } });
    t.equal(res.status, 401, value);
    t.equal((await errorOf(t, res)).code, null);
  }
});

t.test("an unknown key: 401 invalid_api_key, also through the openai client (not retried)", async (t) => {
  for (const key of ["sk-proj-" + "x".repeat(48), "sk-test-tributarx", "sk-" + "a".repeat(500)]) {
    const res = await fetch(url("/v1/chat/completions"), { method: "POST", body: chatBody, headers: { authorization: `Bearer ${key}` } });
    t.equal(res.status, 401);
    const err = await errorOf(t, res);
    t.equal(err.code, "invalid_api_key");
    t.match(err.message, /Incorrect API key provided/);
    t.notOk(res.headers.get("x-ratelimit-limit-requests"), "no budget was touched");
  }
  let attempts = 0;
  const client = new OpenAI({
    apiKey: "sk-proj-unknown",
    baseURL: stack.gateway.baseURL,
    maxRetries: 2,
    fetch: (input, init) => {
      attempts++;
      return fetch(input, init);
    },
  });
  const err = await client.models.list().catch((e: unknown) => e);
  t.ok(err instanceof AuthenticationError);
  t.equal((err as AuthenticationError).status, 401);
  t.equal((err as AuthenticationError).code, "invalid_api_key");
  t.equal(attempts, 1, "a 401 is not retried");
});

t.test("a revoked key is refused like an unknown one", async (t) => {
  const { project } = await stack.admin.createOrganization({ name: "Revoked Co", projectName: "" });
  const { key, secret } = await stack.admin.createApiKey({ projectId: project!.id, organizationId: "", name: "" });
  const ok = await fetch(url("/v1/models"), { headers: { authorization: `Bearer ${secret}` } });
  t.equal(ok.status, 200);
  await stack.admin.revokeApiKey({ keyId: key!.id });
  let res: Response | undefined;
  for (let i = 0; i < 100; i++) {
    res = await fetch(url("/v1/models"), { headers: { authorization: `Bearer ${secret}` } });
    if (res.status === 401) break;
    await new Promise((r) => setTimeout(r, 10));
  }
  t.equal(res!.status, 401);
  t.equal((await errorOf(t, res!)).code, "invalid_api_key");
});

t.test("OpenAI-Project and OpenAI-Organization must match the key", async (t) => {
  const auth = { authorization: `Bearer ${stack.key}` };
  const same = await fetch(url("/v1/models"), { headers: { ...auth, "openai-project": stack.projectId, "openai-organization": stack.organizationId } });
  t.equal(same.status, 200);
  t.equal(same.headers.get("openai-project"), stack.projectId);
  t.equal(same.headers.get("openai-organization"), stack.organizationId);

  const project = await fetch(url("/v1/models"), { headers: { ...auth, "openai-project": "proj_other" } });
  t.equal(project.status, 401);
  t.equal((await errorOf(t, project)).code, "mismatched_project");

  const org = await fetch(url("/v1/models"), { headers: { ...auth, "openai-organization": "org-other" } });
  t.equal(org.status, 401);
  t.equal((await errorOf(t, org)).code, "mismatched_organization");

  const { organization } = await stack.admin.createOrganization({ name: "Headers", projectName: "" });
  const { secret } = await stack.admin.createApiKey({ projectId: "", organizationId: organization!.id, name: "" });
  for (const bad of ["proj_nothere", "a.b", "*", "x>y"]) {
    const res = await fetch(url("/v1/models"), { headers: { authorization: `Bearer ${secret}`, "openai-project": bad } });
    t.equal(res.status, 401, `org key with OpenAI-Project ${bad}`);
    t.equal((await errorOf(t, res)).code, "mismatched_project");
  }
});

t.test("public routes need no key; a key is never required to learn the service is up", async (t) => {
  t.equal((await fetch(url("/healthz"))).status, 200);
  t.equal((await fetch(url("/readyz"))).status, 200);
});
