import type { Test } from "tap";
import { BYSTANDER_MODEL, BYSTANDER_TOKENS_PER_SECOND, bystanderCatalog } from "./bystander.js";
import { TEST_MODEL } from "./processes.js";
import { startStack, type Stack, type StackOptions, type Tenant } from "./stack.js";

export { BYSTANDER_MODEL } from "./bystander.js";

// Hostile-input tests: a stack with two organizations, and the checks every hostile case ends
// with: the gateway still answers, a normal streamed completion still works, and a stream of the
// other organization that was running during the case finished untouched.

export interface HostileStackOptions extends StackOptions {
  /** More catalog entries, for cases that need a model of their own (a sim model of some speed). */
  extraModels?: Array<Record<string, unknown>>;
}

export interface HostileStack {
  stack: Stack;
  a: Tenant;
  b: Tenant;
}

/** Starts a stack (the test catalog plus the bystander model) and creates two organizations with a key each. */
export async function startHostileStack(t: Test, options: HostileStackOptions = {}): Promise<HostileStack> {
  const env = { TRIBUTARY_CATALOG: bystanderCatalog(options.extraModels), ...options.env };
  const stack = await startStack(t, { ...options, env });
  return { stack, a: await stack.tenant("Tenant A"), b: await stack.tenant("Tenant B") };
}

/** One bystander stream of a relay: when it was sent, when it ended, and how. */
interface Leg {
  sentAt: number;
  endedAt: number;
  finish: string | null | undefined;
  completionTokens: number;
}

/**
 * Runs `hostileCase` while streamed completions of `bystander` are in flight, from before it
 * starts until after it ends, and checks that every one finished as it should (every token,
 * finish_reason "length", no error event) and that together they covered the case.
 *
 * By default a relay of short streams (0.4 s each), the next one sent when the last is half
 * done: a quick case costs a fraction of a second and a slow one is covered however long it
 * takes. A case that fills the gateway's connection caps, during which a new stream would rightly
 * be refused, gives `seconds` instead: one stream that long, admitted before the case starts.
 */
export async function whileAnotherTenantStreams(t: Test, bystander: Tenant, hostileCase: () => Promise<void>, seconds?: number): Promise<void> {
  const relay = seconds === undefined;
  const maxTokens = Math.ceil((seconds ?? 0.4) * BYSTANDER_TOKENS_PER_SECOND);
  let caseOver = false;
  const legs: Array<Promise<Leg>> = [];
  const leg = async (whenHalfDone: () => void, whenStreaming = () => {}): Promise<Leg> => {
    const sentAt = performance.now();
    const stream = await bystander.client.chat.completions.create({
      model: BYSTANDER_MODEL,
      messages: [{ role: "user", content: "Keep talking." }],
      max_tokens: maxTokens,
      stream: true,
      stream_options: { include_usage: true },
    });
    let finish: string | null | undefined;
    let completionTokens = 0;
    let chunks = 0;
    for await (const chunk of stream) {
      if (++chunks === 1) whenStreaming();
      if (chunks === Math.ceil(maxTokens / 2)) whenHalfDone();
      finish = chunk.choices[0]?.finish_reason ?? finish;
      if (chunk.usage) completionTokens = chunk.usage.completion_tokens;
    }
    return { sentAt, endedAt: performance.now(), finish, completionTokens };
  };
  const next = () => {
    if (relay && !caseOver) legs.push(leg(next));
  };
  let streaming!: () => void;
  const firstStreaming = new Promise<void>((resolve) => (streaming = resolve));
  legs.push(leg(next, streaming));
  await Promise.race([firstStreaming, legs[0]]); // running before the case starts (or failed: reported below)
  try {
    await hostileCase();
  } finally {
    caseOver = true;
  }
  const caseEndedAt = performance.now();
  const done = await Promise.all(legs);
  t.same(done.map((l) => l.finish), done.map(() => "length"), `the other tenant's stream${done.length > 1 ? `s (${done.length})` : ""} finished normally`);
  t.same(done.map((l) => l.completionTokens), done.map(() => maxTokens), "the other tenant's streams carried every token");
  t.ok(done.every((l, i) => i === 0 || l.sentAt < done[i - 1]!.endedAt), "each of the other tenant's streams was sent before the last one ended");
  t.ok(done.at(-1)!.endedAt > caseEndedAt, "the other tenant's stream was still running when the case ended");
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
 * One hostile case as a subtest: `body` runs while B streams (whileAnotherTenantStreams; `seconds`
 * for a case that fills the connection caps), then the gateway must still serve (health, a
 * streamed completion of A, every process alive) and have logged no error.
 */
export function hostileCase(t: Test, hostile: HostileStack, name: string, body: (t: Test) => Promise<void>, seconds?: number): void {
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
