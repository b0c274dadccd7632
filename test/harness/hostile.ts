import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import type { Test } from "tap";
import { parse, stringify } from "yaml";
import { adminOk } from "./admin.js";
import { TEST_MODEL, testCatalog } from "./processes.js";
import { startStack, type Stack, type StackOptions } from "./stack.js";

// Hostile-input tests: a stack with two organizations, and the checks every hostile case ends
// with: the gateway still answers, a normal streamed completion still works, and a stream of the
// other organization that was running during the case finished untouched.

/** A sim model for streams that must outlast a hostile case (the tiny llama model finishes in well under a second). */
export const BYSTANDER_MODEL = "test/sim-bystander";
const BYSTANDER_TOKENS_PER_SECOND = 100;

export interface Tenant {
  organizationId: string;
  projectId: string;
  key: string;
  client: OpenAI;
  /** Raw HTTP to the gateway with this tenant's key (unless headers override it). */
  fetch(path: string, init?: RequestInit): Promise<Response>;
}

export interface HostileStackOptions extends StackOptions {
  /** More catalog entries, for cases that need a model of their own (a sim model of some speed). */
  extraModels?: Array<Record<string, unknown>>;
}

export interface HostileStack {
  stack: Stack;
  a: Tenant;
  b: Tenant;
}

/** The test catalog plus the bystander's sim model (and `extraModels`). */
function catalogWithBystander(extraModels: Array<Record<string, unknown>> = []): string {
  const catalog = parse(readFileSync(testCatalog, "utf8")) as { models: Array<Record<string, unknown>> };
  catalog.models.push({
    id: BYSTANDER_MODEL,
    engine: "sim",
    context_length: 4096,
    max_output_tokens: 4096,
    slots: 32,
    queue_limit: 64,
    sim: { tokens_per_second: BYSTANDER_TOKENS_PER_SECOND, first_token_latency_ms: 0 },
  }, ...extraModels);
  const path = join(mkdtempSync(join(tmpdir(), "tributary-hostile-")), "catalog.yaml");
  writeFileSync(path, stringify(catalog));
  return path;
}

/** Starts a stack (the test catalog plus the bystander model) and creates two organizations with a key each. */
export async function startHostileStack(t: Test, options: HostileStackOptions = {}): Promise<HostileStack> {
  const env = { TRIBUTARY_CATALOG: catalogWithBystander(options.extraModels), ...options.env };
  const stack = await startStack(t, { ...options, env });
  const tenant = async (name: string): Promise<Tenant> => {
    const { organization, project } = await adminOk(stack.actors, ["org", "create", "--name", name]);
    const { secret } = await adminOk(stack.actors, ["key", "create", "--project", project.id]);
    return {
      organizationId: organization.id,
      projectId: project.id,
      key: secret,
      client: new OpenAI({ apiKey: secret, baseURL: stack.gateway.baseURL, maxRetries: 0 }),
      fetch: (path, init = {}) =>
        fetch(stack.gateway.url + path, {
          ...init,
          headers: { authorization: `Bearer ${secret}`, "content-type": "application/json", ...(init.headers as Record<string, string>) },
        }),
    };
  };
  return { stack, a: await tenant("Tenant A"), b: await tenant("Tenant B") };
}

/**
 * Runs `hostileCase` while a streamed completion of `bystander` is in flight, then checks that
 * the stream finished as it should (every token, finish_reason "length", no error event) and that
 * it really overlapped the case (it ended after the case did).
 */
export async function whileAnotherTenantStreams(t: Test, bystander: Tenant, hostileCase: () => Promise<void>, seconds = 3): Promise<void> {
  const maxTokens = Math.ceil(seconds * BYSTANDER_TOKENS_PER_SECOND);
  const stream = await bystander.client.chat.completions.create({
    model: BYSTANDER_MODEL,
    messages: [{ role: "user", content: "Keep talking." }],
    max_tokens: maxTokens,
    stream: true,
    stream_options: { include_usage: true },
  });
  const iterator = stream[Symbol.asyncIterator]();
  const first = await iterator.next(); // the stream is running before the case starts
  const consumed = (async () => {
    let finish: string | null | undefined;
    let completionTokens = 0;
    for (let r = first; !r.done; r = await iterator.next()) {
      finish = r.value.choices[0]?.finish_reason ?? finish;
      if (r.value.usage) completionTokens = r.value.usage.completion_tokens;
    }
    return { finish, completionTokens, endedAt: performance.now() };
  })();
  await hostileCase();
  const caseEndedAt = performance.now();
  const result = await consumed;
  t.equal(result.finish, "length", "the other tenant's stream finished normally");
  t.equal(result.completionTokens, maxTokens, "the other tenant's stream carried every token");
  t.ok(result.endedAt > caseEndedAt, "the other tenant's stream was still running when the case ended");
}

/** The gateway answers its health probe and a normal streamed completion of `tenant` completes. */
export async function assertStillServing(t: Test, hostile: HostileStack, tenant: Tenant = hostile.a): Promise<void> {
  const health = await fetch(hostile.stack.gateway.url + "/healthz");
  t.equal(health.status, 200, "the gateway answers /healthz");
  const stream = await tenant.client.chat.completions.create({
    model: TEST_MODEL,
    messages: [{ role: "user", content: "Once upon a time" }],
    max_tokens: 16,
    stream: true,
  });
  let finish: string | null | undefined;
  for await (const chunk of stream) finish = chunk.choices[0]?.finish_reason ?? finish;
  t.equal(finish, "length", "a normal streamed completion still works");
  t.equal(hostile.stack.gateway.child.exitCode, null, "the gateway process is alive");
  t.equal(hostile.stack.actors.child.exitCode, null, "the actor host is alive");
}

/**
 * One hostile case as a subtest: `body` runs while B streams, then the gateway must still serve
 * (health, a streamed completion of A, every process alive) and have logged no error.
 */
export function hostileCase(t: Test, hostile: HostileStack, name: string, body: (t: Test) => Promise<void>, seconds = 1.5): void {
  t.test(name, async (t) => {
    await whileAnotherTenantStreams(t, hostile.b, () => body(t), seconds);
    await assertStillServing(t, hostile);
    t.same(hostile.stack.gateway.logs.filter((r) => r.level === "error"), [], "the gateway logged no error");
  });
}

export interface ErrorExpectation {
  status: number;
  code: string | null;
  /** Checked when given (null included). */
  param?: string | null;
}

/** Asserts an HTTP answer is OpenAI's error with exactly this status, code (and param). */
export async function expectError(t: Test, what: string, res: Response, expected: ErrorExpectation): Promise<void> {
  const text = await res.text();
  let body: { error?: { code?: unknown; param?: unknown; type?: unknown; message?: unknown } } = {};
  try {
    body = JSON.parse(text);
  } catch {
    // reported by the checks below
  }
  t.equal(res.status, expected.status, `${what}: status ${expected.status}`);
  t.equal(body.error?.code, expected.code, `${what}: code ${expected.code}`);
  if (expected.param !== undefined) t.equal(body.error?.param, expected.param, `${what}: param ${expected.param}`);
  t.equal(typeof body.error?.message, "string", `${what}: an error message`);
}
