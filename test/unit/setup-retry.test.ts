import t from "tap";
import { TimeoutError } from "@nats-io/transport-node";
import { createLogger } from "../../lib/log.js";
import { isNatsOutage, isTransientForSetup } from "../../lib/nats/outage.js";
import { retryJetStreamSetup, setupRetryDelayMs, type RetryClock, type SetupRetryPolicy } from "../../lib/nats/setup-retry.js";

// Start-up's JetStream requests wait out an outage (no quorum yet, nodes too busy to answer in
// time) with capped backoff, and give up only past the policy's limit; anything else fails at once.

const policy: SetupRetryPolicy = { initialBackoffMs: 250, maxBackoffMs: 2_000, giveUpAfterMs: 10_000 };
const named = (name: string, fields: Record<string, unknown> = {}) => Object.assign(new Error(name), { name, ...fields });
const quiet = createLogger("setup-retry-test");

/** A clock that moves only when the retry sleeps, and records each wait. */
function fakeClock(): RetryClock & { waits: number[] } {
  let now = 0;
  const waits: number[] = [];
  return { waits, now: () => now, sleep: async (ms) => void (waits.push(ms), (now += ms)) };
}

t.test("the delays double from the first, stay under the cap, and end at the limit", async (t) => {
  const delays: number[] = [];
  let previous: number | undefined;
  let elapsed = 0;
  for (;;) {
    previous = setupRetryDelayMs(policy, previous, elapsed);
    if (previous === undefined) break;
    delays.push(previous);
    elapsed += previous;
  }
  t.same(delays.slice(0, 5), [250, 500, 1_000, 2_000, 2_000]);
  t.ok(elapsed <= policy.giveUpAfterMs, "never waits past the limit");
  t.ok(elapsed + 2_000 > policy.giveUpAfterMs, "waits until the next wait would pass the limit");
});

t.test("outages are retried until the request succeeds", async (t) => {
  const clock = fakeClock();
  let calls = 0;
  const value = await retryJetStreamSetup("bucket", async () => {
    calls++;
    if (calls === 1) throw new TimeoutError();
    if (calls === 2) throw named("JetStreamApiError", { code: 10008, status: 503 });
    if (calls === 3) throw named("JetStreamApiError", { code: 10005, status: 400 });
    if (calls === 4) throw named("RequestError", { cause: new TimeoutError() });
    return "opened";
  }, { policy, clock, log: quiet });
  t.equal(value, "opened");
  t.equal(calls, 5);
  t.same(clock.waits, [250, 500, 1_000, 2_000]);
});

t.test("an error that is not an outage fails at once", async (t) => {
  const clock = fakeClock();
  let calls = 0;
  const wrong = named("JetStreamApiError", { code: 10058, status: 400 });
  await t.rejects(retryJetStreamSetup("stream", async () => {
    calls++;
    throw wrong;
  }, { policy, clock, log: quiet }), wrong);
  t.equal(calls, 1);
  t.same(clock.waits, []);
});

t.test("an outage that outlasts the limit is thrown", async (t) => {
  const clock = fakeClock();
  const timeout = new TimeoutError();
  await t.rejects(retryJetStreamSetup("stream", async () => {
    throw timeout;
  }, { policy, clock, log: quiet }), timeout);
  t.ok(clock.now() <= policy.giveUpAfterMs);
});

t.test("this process's own connection closing is not waited out", async (t) => {
  t.notOk(isTransientForSetup(named("ClosedConnectionError")));
  t.notOk(isTransientForSetup(named("DrainingConnectionError")));
  t.ok(isNatsOutage(named("ClosedConnectionError")), "though a request that met it is still a 503");
  t.ok(isTransientForSetup(named("JetStreamNotEnabled")));
  t.ok(isTransientForSetup(named("JetStreamApiError", { code: 10009, status: 500 })));
  t.notOk(isTransientForSetup(new TypeError("bug")));
});
