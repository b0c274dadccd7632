import t from "tap";
import { natsPermissions, NATS_IDENTITIES, type NatsIdentity } from "../../lib/nats/permissions.js";
import { subjects } from "../../lib/nats/subjects.js";

// The permission lists against the subjects the processes really use: every subject of
// subjects.ts, built with sample ids, is allowed to exactly the identities that send (or take)
// it. A subject added without a permission fails here, before a cluster refuses it.

/** NATS subject matching: `pattern` (with * and >) covers `subject` (itself possibly a wildcard). */
function covers(pattern: string, subject: string): boolean {
  const p = pattern.split(".");
  const s = subject.split(".");
  for (let i = 0; i < p.length; i++) {
    if (p[i] === ">") return s.length > i;
    if (i >= s.length) return false;
    if (s[i] === ">") return false;
    if (p[i] !== "*" && p[i] !== s[i]) return false;
    if (p[i] === "*" && s[i] === ">") return false;
  }
  return p.length === s.length;
}
const allowed = (list: { allow: string[]; deny?: string[] }, subject: string) =>
  list.allow.some((p) => covers(p, subject)) && !(list.deny ?? []).some((p) => covers(p, subject));
const who = (side: "publish" | "subscribe", subject: string) => NATS_IDENTITIES.filter((i) => i !== "admin" && allowed(natsPermissions(i)[side], subject));

const model = "qwen/qwen3-0.6b";
const cases: Array<[string, string, NatsIdentity[] | null, NatsIdentity[]]> = [
  // subject, publishers (null: a subscription's wildcard, never published to), subscribers
  ["generate", subjects.generate(model), ["gateway", "actors"], ["runner"]],
  ["runner generate", subjects.runnerGenerate("r1"), ["gateway", "actors"], ["runner"]],
  ["runner cancel", subjects.runnerCancel("r1"), ["gateway", "actors"], ["runner"]],
  ["cancel", subjects.cancel(model), ["gateway", "actors"], ["runner"]],
  ["heartbeat", subjects.heartbeat(model), ["runner"], ["gateway", "actors"]],
  ["heartbeats (subscription)", subjects.heartbeatAll, null, ["gateway", "actors"]],
  ["reply", subjects.reply("g1", "req1"), ["runner"], ["gateway", "actors"]],
  ["replies of one requester (subscription)", subjects.replyWildcard("g1"), null, ["gateway", "actors"]],
  ["packed replies of one requester", subjects.replyBatch("g1"), ["runner"], ["gateway", "actors"]],
  ["batch job", subjects.batchJob, ["gateway", "actors"], []],
  ["batch line", subjects.batchWork(model, "batch_1"), ["actors"], []],
  ["budget lease", subjects.budgetLease(model, "organization", "org-1"), ["gateway", "actors"], ["actors"]],
  ["budget return", subjects.budgetReturn(model, "project", "proj_1"), ["gateway", "actors"], ["actors"]],
  ["budget activation", subjects.budgetActivate, ["gateway", "actors"], ["actors"]],
  ["owner probe", subjects.budgetHostProbe("h1"), ["actors"], ["actors"]],
  ["background job", subjects.responsesBackground, ["gateway", "actors"], []],
  ["background cancel", subjects.responseCancel("resp_1"), ["gateway", "actors"], ["actors"]],
  ["background cancels (subscription)", subjects.responseCancelAll, null, ["actors"]],
  ["response events", subjects.responseEvents("resp_1"), ["gateway", "actors"], []],
  ["sandbox host heartbeat", subjects.sandboxHostHeartbeat, ["sandbox-host"], ["gateway", "actors"]],
  ["sandbox host call", subjects.sandboxHostRpc("sh1"), ["gateway", "actors"], ["sandbox-host"]],
  ["streamed exec output", subjects.sandboxExecEvents("ex1"), ["sandbox-host"], ["gateway", "actors"]],
  ["job queued", subjects.jobQueue, ["gateway", "actors"], []],
  ["job cancel", subjects.jobCancel("job_1"), ["gateway", "actors"], ["actors"]],
  ["job output", subjects.jobLogs("job_1"), ["actors"], []],
  ["trace", subjects.trace("proj_1", model, "key_1", "success"), ["gateway", "actors"], []],
  ["usage rows", subjects.usageRollup("gw_1"), ["gateway", "actors"], []],
];

for (const [name, subject, publishers, subscribers] of cases)
  t.test(name, async (t) => {
    if (publishers) t.same(who("publish", subject), publishers, `publish ${subject}`);
    t.same(who("subscribe", subject), subscribers, `subscribe ${subject}`);
  });

t.test("each identity subscribes to its own inbox only; admin reaches everything", async (t) => {
  for (const identity of NATS_IDENTITIES.filter((i) => i !== "admin"))
    t.same(who("subscribe", `_INBOX.${identity}.abc.1`), [identity], `_INBOX.${identity}`);
  t.ok(allowed(natsPermissions("admin").subscribe, ">") && allowed(natsPermissions("admin").publish, ">"));
});

t.test("JetStream: runners have none, the sandbox host its two buckets; the gateway no budget state; no service deletes a stream", async (t) => {
  t.same(who("publish", "$JS.API.INFO"), ["gateway", "actors", "sandbox-host"]);
  t.same(who("publish", "$KV.tributary_secrets.proj_1.NAME"), ["gateway", "actors", "sandbox-host"]);
  t.same(who("publish", "$JS.API.DIRECT.GET.KV_tributary_accounts.$KV.tributary_accounts.org.x"), ["gateway", "actors"]);
  t.same(who("publish", "$KV.tributary_rate_limits.m.organization.o"), ["actors"]);
  // The dashboard's rate-limit page reads budgets: direct gets only, never a write or the stream's API.
  t.same(who("publish", "$JS.API.DIRECT.GET.KV_tributary_rate_limits.$KV.tributary_rate_limits.m.organization.o"), ["gateway", "actors"]);
  t.same(who("publish", "$JS.API.STREAM.PURGE.KV_tributary_rate_limits"), ["actors"]);
  t.same(who("publish", "$JS.API.STREAM.DELETE.KV_tributary_accounts"), []);
  t.same(who("publish", "$JS.API.STREAM.INFO.KV_someone_else"), [], "another stream");
});
