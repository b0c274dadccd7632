import { connect, PermissionViolationError, type NatsConnection } from "@nats-io/transport-node";
import { Kvm } from "@nats-io/kv";
import t from "tap";
import { buckets, subjects } from "../../../lib/nats/subjects.js";
import { inboxPrefix, type NatsIdentity } from "../../../lib/nats/permissions.js";
import { natsClientOptions } from "../../../lib/nats/connection.js";
import { startNats } from "../../harness/processes.js";

// The fabric is not open: the harness's nats-server runs with the identities of
// lib/nats/permissions.ts (as `tributary start` does). A client without credentials is refused;
// each identity is refused outside its permissions, and allowed inside them (so that a refusal
// below means the rule, not a broken connection).

const nats = await startNats();
t.teardown(() => nats.stop());

// State to be refused: an accounts record, a rate-limit budget.
const admin = await nats.connect("admin");
t.teardown(() => admin.close());
const accounts = await new Kvm(admin).create(buckets.accounts, { history: 5 });
await accounts.put("org.org-secret", JSON.stringify({ id: "org-secret" }));
await new Kvm(admin).create(buckets.rateLimits, { history: 1 });

const connections: NatsConnection[] = [];
t.teardown(() => Promise.all(connections.map((c) => c.close())));

async function as(identity: NatsIdentity): Promise<{ nc: NatsConnection; violations: PermissionViolationError[] }> {
  const nc = await nats.connect(identity);
  connections.push(nc);
  const violations: PermissionViolationError[] = [];
  (async () => {
    for await (const s of nc.status()) if (s.type === "error" && s.error instanceof PermissionViolationError) violations.push(s.error);
  })().catch(() => {});
  return { nc, violations };
}

/**
 * The server's refusal arrives before the pong of a flush sent after the operation; the status
 * iterator hands it on a turn of the event loop later.
 */
async function settled(nc: NatsConnection): Promise<void> {
  await nc.flush();
  await new Promise((r) => setTimeout(r, 0));
}

/** Whether the server refuses `identity` publishing to `subject` (the refusal arrives before the flush's pong). */
async function publishRefused(identity: NatsIdentity, subject: string): Promise<boolean> {
  const { nc, violations } = await as(identity);
  nc.publish(subject, "x");
  await settled(nc);
  return violations.some((v) => v.operation === "publish" && v.subject === subject);
}

async function subscribeRefused(identity: NatsIdentity, subject: string, queue?: string): Promise<boolean> {
  const { nc, violations } = await as(identity);
  nc.subscribe(subject, { queue, callback: () => {} });
  await settled(nc);
  return violations.some((v) => v.operation === "subscription" && v.subject === subject);
}

const MODEL = "test/stories-260k";

t.test("a client without credentials, or with an unknown nkey, is refused", async (t) => {
  await t.rejects(connect({ servers: nats.url, reconnect: false }), /authorization/i, "no credentials");
  await t.rejects(connect({ servers: nats.url, reconnect: false, user: "gateway", pass: "guess" }), /authorization/i, "a guessed user");
  // An identity from another installation: a fresh nkey the server does not list.
  const stranger = await startNats();
  t.teardown(() => stranger.stop());
  await t.rejects(connect({ servers: nats.url, reconnect: false, ...natsClientOptions("gateway", stranger.env("gateway")) }), /authorization/i, "an unknown nkey");
});

t.test("a runner cannot pose as a gateway, a budget owner, or read any state", async (t) => {
  t.notOk(await publishRefused("runner", subjects.heartbeat(MODEL)), "allowed: its heartbeats");
  t.notOk(await publishRefused("runner", subjects.reply("g1", "r1")), "allowed: replies");
  t.notOk(await publishRefused("runner", subjects.replyBatch("g1")), "allowed: packed replies");
  t.notOk(await subscribeRefused("runner", subjects.generate(MODEL), "runners"), "allowed: its requests");
  t.ok(await publishRefused("runner", subjects.generate(MODEL)), "refused: sending generate requests (a gateway's)");
  t.ok(await publishRefused("runner", subjects.budgetActivate), "refused: activating a budget");
  t.ok(await publishRefused("runner", subjects.batchJob), "refused: queueing a batch");
  t.ok(await subscribeRefused("runner", subjects.budgetLease(MODEL, "organization", "org-1")), "refused: answering leases as a budget owner");
  t.ok(await subscribeRefused("runner", subjects.replyWildcard("g1")), "refused: reading other runners' replies");
  t.ok(await subscribeRefused("runner", `${inboxPrefix("gateway")}.>`), "refused: reading a gateway's inbox");
  t.ok(await subscribeRefused("runner", `$KV.${buckets.accounts}.>`), "refused: watching the accounts bucket's subjects");
  t.ok(await publishRefused("runner", `$JS.API.DIRECT.GET.KV_${buckets.accounts}.$KV.${buckets.accounts}.org.org-secret`), "refused: reading an accounts record");
  const { nc } = await as("runner");
  await t.rejects(new Kvm(nc).open(buckets.accounts).then((kv) => kv.get("org.org-secret")), "the accounts bucket cannot be read through the KV client");
});

t.test("a gateway cannot answer as a runner or a budget owner, nor touch the budgets' state", async (t) => {
  t.notOk(await publishRefused("gateway", subjects.generate(MODEL)), "allowed: generate requests");
  t.notOk(await subscribeRefused("gateway", subjects.heartbeatAll), "allowed: heartbeats");
  t.ok(await subscribeRefused("gateway", subjects.generate(MODEL), "runners"), "refused: taking generate requests");
  t.ok(await subscribeRefused("gateway", subjects.runnerGenerate("r1")), "refused: a runner's own subject");
  t.ok(await publishRefused("gateway", subjects.reply("g2", "r1")), "refused: publishing replies");
  t.ok(await publishRefused("gateway", subjects.replyBatch("g2")), "refused: publishing packed replies");
  t.ok(await publishRefused("gateway", subjects.heartbeat(MODEL)), "refused: publishing heartbeats");
  t.ok(await subscribeRefused("gateway", subjects.budgetLease(MODEL, "organization", "org-1")), "refused: answering leases");
  t.ok(await subscribeRefused("gateway", subjects.budgetActivate, "budget-hosts"), "refused: activating budgets");
  t.ok(await publishRefused("gateway", subjects.budgetHostProbe("h1")), "refused: probing budget owners");
  t.ok(await subscribeRefused("gateway", `${inboxPrefix("actors")}.>`), "refused: an actor host's inbox");
  const { nc } = await as("gateway");
  t.equal((await (await new Kvm(nc).open(buckets.accounts)).get("org.org-secret"))?.string(), JSON.stringify({ id: "org-secret" }), "allowed: reading accounts");
  await t.rejects(new Kvm(nc).open(buckets.rateLimits).then((kv) => kv.put("m.organization.org-1", "{}")), "refused: writing a budget's state");
  t.ok(await publishRefused("gateway", `$JS.API.STREAM.DELETE.KV_${buckets.accounts}`), "refused: deleting a bucket");
});

t.test("an actor host owns budgets but cannot pose as a runner", async (t) => {
  t.notOk(await subscribeRefused("actors", subjects.budgetLease(MODEL, "organization", "org-1")), "allowed: answering leases");
  t.ok(await subscribeRefused("actors", subjects.generate(MODEL), "runners"), "refused: taking generate requests");
  t.ok(await publishRefused("actors", subjects.heartbeat(MODEL)), "refused: publishing heartbeats");
  t.ok(await publishRefused("actors", subjects.reply("g1", "r1")), "refused: publishing replies");
  const { nc } = await as("actors");
  await t.resolves((await new Kvm(nc).open(buckets.rateLimits)).put("m.organization.org-1", "{}"), "allowed: the budgets' state");
});

t.test("a sandbox host reaches its sandboxes' state and nothing else of the platform", async (t) => {
  t.ok(await publishRefused("sandbox-host", subjects.generate(MODEL)), "refused: generate requests");
  t.ok(await subscribeRefused("sandbox-host", subjects.replyWildcard("g1")), "refused: replies");
  t.ok(await subscribeRefused("sandbox-host", subjects.sandboxHostHeartbeat), "refused: reading other hosts' heartbeats");
  t.ok(await publishRefused("sandbox-host", subjects.sandboxHostRpc("sh-other")), "refused: calling a sandbox host");
  t.notOk(await subscribeRefused("sandbox-host", subjects.sandboxHostRpc("sh-1")), "allowed: taking its calls");
  t.notOk(await publishRefused("sandbox-host", subjects.sandboxHostHeartbeat), "allowed: its heartbeats");
  t.ok(await publishRefused("sandbox-host", `$JS.API.DIRECT.GET.KV_${buckets.accounts}.$KV.${buckets.accounts}.org.org-secret`), "refused: reading an accounts record");
  t.ok(await publishRefused("sandbox-host", `$JS.API.STREAM.DELETE.KV_${buckets.sandboxes}`), "refused: deleting its bucket");
  const { nc } = await as("sandbox-host");
  await t.rejects(new Kvm(nc).open(buckets.accounts).then((kv) => kv.get("org.org-secret")), "the accounts bucket cannot be read through the KV client");
  await t.resolves(new Kvm(nc).create(buckets.sandboxes, { history: 1 }).then((kv) => kv.put("proj_1.sbx_1", "{}")), "allowed: the sandboxes bucket");
});
