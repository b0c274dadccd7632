import t from "tap";
import type { KV } from "@nats-io/kv";
import type { Msg, NatsConnection } from "@nats-io/transport-node";
import { BudgetActor } from "../../actors/ratelimit/budget-actor.js";
import { LeaseGrant, LeaseRequest, type BudgetKey } from "../../proto/gen/tributary/v1/ratelimit.js";
import { freshRecord } from "../../modules/ratelimit/mod.js";
import { subjects } from "../../lib/nats/subjects.js";
import type { Logger } from "../../lib/log.js";

// The owner of a budget answers a lease only after the state that counts it is written, and
// leases that arrive while a write is in flight wait for the next one (group commit). When the
// window rolls while a lease waits, its chunk was counted in the window that ended, not in the
// one the next write carries: it must not reach the gateway as the new window's, or the new
// window would grant more than its limit.

const WINDOW_MS = 2_000;
const LIMIT = 10;
const key: BudgetKey = { model: "m", scope: "organization", scopeId: "org" };

t.test("a lease decided before the window rolled is answered as the ended window's, over", async (t) => {
  const realNow = Date.now;
  t.teardown(() => (Date.now = realNow));
  const windowStart = Math.ceil(realNow() / WINDOW_MS) * WINDOW_MS + 10 * WINDOW_MS;
  let now = windowStart - 10; // 10 ms before the window that starts at windowStart
  Date.now = () => now;

  // A store whose writes finish when the test says.
  const writes: Array<{ value: any; finish: () => void }> = [];
  let revision = 1;
  let held = true;
  const kv = {
    update: (_key: string, value: string) =>
      held ? new Promise<number>((resolve) => writes.push({ value: JSON.parse(value), finish: () => resolve(++revision) })) : Promise.resolve(++revision),
  } as unknown as KV;
  const handlers = new Map<string, (err: Error | null, msg: Msg) => void>();
  const nc = {
    subscribe: (subject: string, opts: { callback: (err: Error | null, msg: Msg) => void }) => {
      handlers.set(subject, opts.callback);
      return { unsubscribe() {} };
    },
    flush: async () => {},
  } as unknown as NatsConnection;
  const log = { info() {}, warn() {}, error() {}, debug() {}, child: () => log } as unknown as Logger;

  const record = freshRecord("me", WINDOW_MS, now, { requests: LIMIT, tokens: 1_000_000 });
  const actor = new BudgetActor(key, "m.organization.org", kv, record, 1, { windowMs: WINDOW_MS, activeGatewayMs: 60_000, returnFlushMs: 60_000 }, () => {});
  await actor.start({ nc, log, fail: (err) => t.fail(String(err)) });
  t.teardown(() => {
    held = false;
    return actor.stop();
  });

  const answers: Array<LeaseGrant> = [];
  const lease = (gatewayId: string, requests: number) =>
    handlers.get(subjects.budgetLease(key.model, key.scope, key.scopeId))!(null, {
      data: LeaseRequest.encode(LeaseRequest.fromPartial({ budget: key, gatewayId, limits: { requests: LIMIT, tokens: 1_000_000 }, needRequests: requests, needTokens: 1, wantRequests: requests, wantTokens: 1 })).finish(),
      respond: (bytes: Uint8Array) => answers.push(LeaseGrant.decode(bytes)) > 0,
    } as unknown as Msg);
  const settle = () => new Promise((r) => setImmediate(r));

  lease("g1", 2); // written at once (write 1 in flight)
  lease("g2", 3); // waits for write 1: decided in the ending window
  now = windowStart + 5; // the window rolls
  lease("g3", 4); // decided in the new window, beside g2's chunk
  writes[0]!.finish();
  await settle();
  t.equal(writes.length, 2, "the waiting leases went out in one second write");
  t.equal(writes[1]!.value.window, windowStart / WINDOW_MS, "the second write is the new window's");
  t.equal(writes[1]!.value.granted_requests, 4, "which counts only the chunk decided in it");
  writes[1]!.finish();
  await settle();

  t.equal(answers.length, 3);
  const oldWindow = windowStart / WINDOW_MS - 1;
  const [first, second, third] = answers as [LeaseGrant, LeaseGrant, LeaseGrant];
  t.match(first, { window: oldWindow, requests: 2, windowEndsInMs: 0 }, "the first write's chunk is the ended window's: over on arrival");
  t.match(second, { window: oldWindow, requests: 3, windowEndsInMs: 0 }, "the chunk decided before the roll is answered as the ended window's, over");
  t.match(third, { window: oldWindow + 1, requests: 4 }, "the new window's chunk is its own");
  t.ok(third.windowEndsInMs > 0);
  const grantedInNewWindow = answers.filter((a) => a.window === oldWindow + 1).reduce((n, a) => n + a.requests, 0);
  t.equal(grantedInNewWindow, writes[1]!.value.granted_requests, "what gateways hold of the new window is what its record counts");
});
