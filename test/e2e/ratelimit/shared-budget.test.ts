// tier: serial (budgets checked per time window)
import t from "tap";
import { Kvm } from "@nats-io/kv";
import { startActorHost, startGateway, startNats, startRunner, TEST_KEY, TEST_MODEL, type ActorHost } from "../../harness/processes.js";
import { runLoad, tallyWindows } from "../../harness/load.js";
import { buckets, kvToken } from "../../../lib/nats/subjects.js";

// One budget shared by three gateways, under a load from nine clients that asks for far more than
// the limit: in every window, no more than the limit is admitted in total, and not much less. Then
// the actor host that owns the budget is killed (SIGKILL) mid-load: the other host takes the budget
// over from its stored state, and no window admits more than the limit.

const WINDOW_MS = 2000;
const LIMIT = 60;
const env = {
  TRIBUTARY_MODEL_OVERRIDES: JSON.stringify({
    [TEST_MODEL]: {
      engine: "sim",
      sim: { tokens_per_second: 1000, first_token_latency_ms: 0 },
      slots: 64,
      queue_limit: 1000,
      rate_limits: { requests_per_minute: LIMIT, tokens_per_minute: 1_000_000 },
    },
  }),
};

const nats = await startNats();
t.teardown(() => nats.stop());
const hosts: ActorHost[] = [];
for (let i = 0; i < 2; i++) {
  const h = await startActorHost(nats.url, { ...env, TRIBUTARY_RATE_LIMIT_WINDOW_MS: String(WINDOW_MS) });
  t.teardown(() => h.kill());
  hosts.push(h);
}
const runner = await startRunner(nats.url, env);
t.teardown(() => runner.kill());
const gateways = await Promise.all([0, 1, 2].map(() => startGateway(nats.url, env)));
for (const g of gateways) t.teardown(() => g.kill());
const hostIdOf = (h: ActorHost) => h.logs.find((r) => r.msg === "rate-limit budgets ready")!.hostId as string;

const nc = await nats.connect();
t.teardown(() => nc.close());
const budgets = await new Kvm(nc).open(buckets.rateLimits);
const budgetKey = `${kvToken(TEST_MODEL)}.organization.org-local`;
const ownerOfBudget = async () => (await budgets.get(budgetKey))?.json<{ owner: string }>().owner;

const body = { model: TEST_MODEL, messages: [{ role: "user", content: "Hi" }], max_tokens: 1 };
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

t.test("three gateways admit no more than the shared limit in any window, and close to it", async (t) => {
  // Start at a window boundary so that the first full window is measured.
  await sleep(WINDOW_MS - (Date.now() % WINDOW_MS));
  const started = Date.now();
  const stopAt = started + 4 * WINDOW_MS + 100;
  const outcomes = await runLoad({
    urls: gateways.map((g) => g.url),
    clientsPerGateway: 3,
    apiKey: TEST_KEY,
    body,
    windowMs: WINDOW_MS,
    pauseAfterRefusalMs: 20,
    until: () => Date.now() >= stopAt,
  });
  const tallies = tallyWindows(outcomes, WINDOW_MS, started, stopAt);
  t.ok(tallies.length >= 3, `${tallies.length} full windows measured`);
  const refused = outcomes.filter((o) => o.status === 429).length;
  t.ok(refused > 2 * outcomes.filter((o) => o.status === 200).length, `demand exceeds the limit (${refused} refused)`);
  t.same(outcomes.filter((o) => o.status !== 200 && o.status !== 429), [], "only 200s and 429s");
  for (const w of tallies) {
    t.ok(w.admitted <= LIMIT, `window ${w.window}: admitted ${w.admitted} <= ${LIMIT}`);
    t.ok(w.admitted >= LIMIT * 0.9, `window ${w.window}: admitted ${w.admitted} >= 90% of ${LIMIT}`);
  }
  // Each gateway admitted some (the budget is shared, not taken by one).
  t.comment(`admitted per window: ${tallies.map((w) => w.admitted).join(", ")}`);
});

t.test("the budget's owner is killed mid-load: another host takes over without double-spending", async (t) => {
  const owner = await ownerOfBudget();
  const victim = hosts.find((h) => hostIdOf(h) === owner);
  t.ok(victim, `the owner ${owner} is one of the two hosts`);
  const survivor = hosts.find((h) => h !== victim)!;

  await sleep(WINDOW_MS - (Date.now() % WINDOW_MS));
  const started = Date.now();
  // Early in the third window, while the budget is being handed out (the demand here is about
  // 1.5 times the limit, so a window's budget lasts most of the window).
  const killAt = started + 2 * WINDOW_MS + WINDOW_MS * 0.3;
  const stopAt = started + 5 * WINDOW_MS + 100;
  let killed = false;
  const killer = (async () => {
    await sleep(killAt - Date.now());
    await victim!.kill();
    killed = true;
  })();
  const outcomes = await runLoad({
    urls: gateways.map((g) => g.url),
    clientsPerGateway: 3,
    apiKey: TEST_KEY,
    body,
    windowMs: WINDOW_MS,
    pauseAfterRefusalMs: 20,
    pauseAfterSuccessMs: 150,
    until: () => Date.now() >= stopAt,
  });
  await killer;
  t.ok(killed);

  t.equal(await ownerOfBudget(), hostIdOf(survivor), "the surviving host owns the budget");
  const takeover = survivor.logs.find((r) => r.msg === "took over a budget from an owner that did not answer");
  t.ok(takeover, "the survivor logged the takeover");
  if (takeover) t.comment(`taken over ${Date.parse(takeover.t as string) - killAt} ms after the kill`);
  const tallies = tallyWindows(outcomes, WINDOW_MS, started, stopAt);
  t.comment(`admitted per window: ${tallies.map((w) => w.admitted).join(", ")} (owner killed in window ${Math.floor(killAt / WINDOW_MS)})`);
  for (const w of tallies) t.ok(w.admitted <= LIMIT, `window ${w.window}: admitted ${w.admitted} <= ${LIMIT}`);
  const killWindow = Math.floor(killAt / WINDOW_MS);
  for (const w of tallies.filter((x) => x.window !== killWindow))
    t.ok(w.admitted >= LIMIT * 0.9, `window ${w.window}: admitted ${w.admitted} >= 90% of ${LIMIT}`);
  const afterKill = outcomes.filter((o) => o.status === 200 && o.window === killWindow && o.at > killAt).length;
  t.ok(afterKill > 0, `the failover happened while the window's budget was being spent (${afterKill} admitted in it after the kill)`);
  const during = tallies.find((x) => x.window === killWindow);
  if (during) t.ok(during.admitted >= LIMIT * 0.5, `failover window ${during.window}: admitted ${during.admitted} >= 50% of ${LIMIT}`);
  const after = outcomes.filter((o) => o.at > killAt + 200 && o.status === 200).length;
  t.ok(after > 0, `requests are admitted after the failover (${after})`);
  const unavailable = outcomes.filter((o) => o.status === 503).length;
  t.equal(unavailable, 0, "no request failed for want of a budget owner");
});
