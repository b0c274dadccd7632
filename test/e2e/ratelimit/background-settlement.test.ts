// tier: slow (a stack of its own)
import t from "tap";
import { startStack, type Tenant } from "../../harness/stack.js";
import { TEST_MODEL } from "../../harness/processes.js";

// A background response is charged its estimate when it is queued (the gateway answers 429 there
// and then), and settled with what it really used when its run ends, by the actor host that ran
// it: a cancelled one gives back what it did not use, a queued one cancelled before it ran gives
// back everything, a finished one is charged its real usage. The budget still never admits more
// than its limit.
//
// Numbers: the token limit is 600; a background request for input "go" with max_output_tokens 400
// is estimated at 405 (ceil(2/4) + 4 for the message + 400), so one fits and two do not until the
// first is settled. One run at a time, 100 tokens a second (sim engine: 400 tokens take 4 s).
const LIMIT = 600;
const WINDOW_MS = 20_000;
const estimate = (maxTokens: number) => Math.ceil("go".length / 4) + 4 + maxTokens;
const stack = await startStack(t, {
  env: {
    TRIBUTARY_MODEL_OVERRIDES: JSON.stringify({
      [TEST_MODEL]: { engine: "sim", sim: { tokens_per_second: 100, first_token_latency_ms: 0 }, rate_limits: { requests_per_minute: 100, tokens_per_minute: LIMIT } },
    }),
  },
  actorsEnv: { TRIBUTARY_RATE_LIMIT_WINDOW_MS: String(WINDOW_MS), TRIBUTARY_BACKGROUND_CONCURRENCY: "1" },
});
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/**
 * Each test charges a budget of its own (a fresh organization), so its charges need only land in
 * one window: it starts at once when enough of the current window is left, else at the next.
 */
async function freshBudget(name: string): Promise<Tenant> {
  const tenant = await stack.tenant(name);
  const left = WINDOW_MS - (Date.now() % WINDOW_MS);
  if (left < 12_000) await sleep(left + 50);
  return tenant;
}

interface Created {
  status: number;
  id?: string;
  remaining: number;
  code?: string;
}

async function background(tenant: Tenant, maxTokens: number): Promise<Created> {
  const res = await tenant.fetch("/v1/responses", { method: "POST", body: JSON.stringify({ model: TEST_MODEL, input: "go", background: true, max_output_tokens: maxTokens }) });
  const body = (await res.json()) as { id?: string; error?: { code: string } };
  return { status: res.status, id: body.id, remaining: Number(res.headers.get("x-ratelimit-remaining-tokens")), code: body.error?.code };
}

async function retrieve(tenant: Tenant, id: string): Promise<{ status: string; output: unknown[]; usage: { total_tokens: number } | null }> {
  return (await (await tenant.fetch(`/v1/responses/${id}`)).json()) as { status: string; output: unknown[]; usage: { total_tokens: number } | null };
}

async function waitFor(tenant: Tenant, id: string, pred: (status: string) => boolean): Promise<Awaited<ReturnType<typeof retrieve>>> {
  const deadline = Date.now() + 15_000;
  for (;;) {
    const r = await retrieve(tenant, id);
    if (pred(r.status)) return r;
    if (Date.now() > deadline) throw new Error(`${id} still ${r.status}`);
    await sleep(25);
  }
}

const cancel = async (tenant: Tenant, id: string) => ((await (await tenant.fetch(`/v1/responses/${id}/cancel`, { method: "POST" })).json()) as { status: string }).status;

/** Creates a background response, retrying 429s for up to `ms` (a settlement is on its way). */
async function admittedWithin(tenant: Tenant, maxTokens: number, ms: number): Promise<Created> {
  const deadline = Date.now() + ms;
  for (;;) {
    const created = await background(tenant, maxTokens);
    if (created.status !== 429 || Date.now() > deadline) return created;
    await sleep(250); // past the gateway's denial cache
  }
}

t.test("a response cancelled while it runs gives back what it did not use", async (t) => {
  const tenant = await freshBudget("cancelled-running");
  const first = await background(tenant, 400);
  t.equal(first.status, 200);
  t.equal(first.remaining, LIMIT - estimate(400), "charged its estimate when queued");
  const refused = await background(tenant, 400);
  t.equal(refused.status, 429, "a second estimate does not fit before the first is settled");
  t.equal(refused.code, "rate_limit_exceeded");

  await waitFor(tenant, first.id!, (s) => s === "in_progress");
  await sleep(300);
  t.equal(await cancel(tenant, first.id!), "cancelled");
  const second = await admittedWithin(tenant, 400, 3_000);
  t.equal(second.status, 200, "admitted once the cancelled run settled with its real usage");
  const third = await background(tenant, 400);
  t.equal(third.status, 429, "and the budget still admits nothing beyond its limit");
  await cancel(tenant, second.id!);
});

t.test("a queued response cancelled before it ran gives back its whole estimate", async (t) => {
  const tenant = await freshBudget("cancelled-queued");
  const occupier = await background(tenant, 100); // holds the only run slot for about a second
  t.equal(occupier.status, 200);
  await waitFor(tenant, occupier.id!, (s) => s === "in_progress");
  const queued = await background(tenant, 400);
  t.equal(queued.status, 200);
  t.equal((await retrieve(tenant, queued.id!)).status, "queued");
  t.equal(await cancel(tenant, queued.id!), "cancelled");
  const after = await admittedWithin(tenant, 400, 3_000);
  t.equal(after.status, 200, "the cancelled one's estimate went back");
  t.equal((await background(tenant, 400)).status, 429, "nothing beyond the limit");
  const never = await retrieve(tenant, queued.id!);
  t.equal(never.status, "cancelled");
  t.same(never.output, [], "it never ran");
  await cancel(tenant, after.id!);
});

t.test("a finished response is charged exactly what it used", async (t) => {
  const tenant = await freshBudget("finished");
  const created = await background(tenant, 400);
  t.equal(created.status, 200);
  const done = await waitFor(tenant, created.id!, (s) => s !== "queued" && s !== "in_progress");
  t.equal(done.status, "incomplete");
  const used = done.usage!.total_tokens;
  t.not(used, estimate(400), "the sim engine counts the prompt differently from the estimate");
  await sleep(500); // the settlement travels from the actor host to the budget's owner
  const res = await tenant.fetch("/v1/chat/completions", { method: "POST", body: JSON.stringify({ model: TEST_MODEL, messages: [{ role: "user", content: "Hi" }], max_tokens: 16 }) });
  t.equal(res.status, 200);
  // This gateway held no tokens after the background charge, so this request leased from the
  // owner, whose count is now the background run's usage plus this request's estimate.
  const chatEstimate = Math.ceil("Hi".length / 4) + 4 + 16;
  t.equal(Number(res.headers.get("x-ratelimit-remaining-tokens")), LIMIT - used - chatEstimate, "the budget counts the real usage, not the estimate");
});
