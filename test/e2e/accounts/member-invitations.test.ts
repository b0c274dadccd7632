import t, { type Test } from "tap";
import { Kvm } from "@nats-io/kv";
import { startNats } from "../../harness/processes.js";
import { MAX_MEMBER_INVITATIONS, MemberStore, type MemberInvitationRecord } from "../../../modules/accounts/mod.js";
import { openAIError } from "../../../modules/openai/mod.js";
import { isDomainError } from "../../../modules/errors/mod.js";
import { buckets } from "../../../lib/nats/subjects.js";
import { updateRecord } from "../../../lib/nats/kv-records.js";

// An organization keeps at most MAX_MEMBER_INVITATIONS (100) invitations of members, of any
// status: every invitations page lists them. Admission goes through a counter record
// (compare-and-set), so parallel invites from several processes (here: stores on their own
// connections) cannot overshoot the bound. A revoked invitation keeps its place until it is
// forgotten (30 days after it stopped being pending); forgetting one frees exactly its place.

const nats = await startNats();
t.teardown(() => nats.stop());
const nc = await nats.connect("admin");
t.teardown(() => nc.close());
const members = await MemberStore.open(nc, 3600);
/** The members bucket itself, to age an invitation as the passing of time would. */
const bucket = await new Kvm(nc).open(buckets.members);
/** What a client would get: the gateway's one mapping of domain errors to OpenAI's error. */
const refusal = (err: unknown) => {
  if (!isDomainError(err)) throw err;
  const { status, body } = openAIError(err, "req_test");
  return { status, ...body.error };
};
const tooMany = { status: 400, type: "invalid_request_error", param: "email", message: `This organization has ${MAX_MEMBER_INVITATIONS} invitations already: revoke some first.` };
const invite = (store: MemberStore, organizationId: string, email: string) => store.invite({ organizationId, email, role: "member", invitedBy: "user_owner" });
const isInvitation = (r: object): r is { invitation: MemberInvitationRecord } => "invitation" in r;

/** `count` invitations of the organization, one after the other. */
async function fill(organizationId: string, count: number): Promise<void> {
  for (let i = 0; i < count; i++) await invite(members, organizationId, `filler${i}@${organizationId}.example.com`);
}

/** `n` invites at once, each from a store on its own connection. */
async function race(t: Test, organizationId: string, n: number, name: string) {
  const connections = await Promise.all(Array.from({ length: n }, () => nats.connect("admin")));
  t.teardown(() => Promise.all(connections.map((c) => c.close())));
  const stores = await Promise.all(connections.map((c) => MemberStore.open(c, 3600)));
  const results = await Promise.all(stores.map((s, i) => invite(s, organizationId, `${name}${i}@${organizationId}.example.com`).catch(refusal)));
  return { made: results.filter(isInvitation), refused: results.filter((r) => !isInvitation(r)) };
}

t.test("parallel invites at the edge: exactly one gets the last place", async (t) => {
  const org = "org-invite-race";
  await fill(org, MAX_MEMBER_INVITATIONS - 1);
  const { made, refused } = await race(t, org, 6, "racer");
  t.equal(made.length, 1, "one invite got the last place");
  t.equal(refused.length, 5);
  for (const r of refused) t.match(r, tooMany, "the others: 400 naming email, as at the bound always");
  t.equal((await members.listInvitations(org)).length, MAX_MEMBER_INVITATIONS, "the organization holds exactly the bound");
  t.match(await invite(members, org, "late@example.com").catch(refusal), tooMany, "and refuses the next");
});

t.test("a revoked invitation keeps its place until forgotten; forgetting it frees exactly one", async (t) => {
  const org = "org-invite-forget";
  await fill(org, MAX_MEMBER_INVITATIONS);
  const revoked = (await members.listInvitations(org)).at(-1)!;
  await members.revokeInvitation(org, revoked.id);
  const early = await race(t, org, 3, "early");
  t.equal(early.made.length, 0, "revoked, not yet forgotten: still counted, no place is free");
  for (const r of early.refused) t.match(r, tooMany);
  // Revoked 40 days ago, as the clock would have it: the next invite forgets it.
  const key = `invite.${org}.${revoked.id}`;
  const stored = (await bucket.get(key))!;
  const longAgo = Math.floor(Date.now() / 1000) - 40 * 86_400;
  const aged: MemberInvitationRecord = { ...(stored.json() as MemberInvitationRecord), created_at: longAgo, expires_at: longAgo + 7 * 86_400, revoked_at: longAgo + 86_400 };
  t.ok(await updateRecord(bucket, key, aged, stored.revision), "aged");
  const { made, refused } = await race(t, org, 6, "after");
  t.equal(made.length, 1, "one invite got the place the forgotten invitation freed");
  for (const r of refused) t.match(r, tooMany, "the others: 400 naming email");
  const listed = await members.listInvitations(org);
  t.equal(listed.length, MAX_MEMBER_INVITATIONS, "the organization holds exactly the bound");
  t.notOk(listed.some((i) => i.id === revoked.id), "the stale invitation is forgotten");
  t.match(await invite(members, org, `filler0@${org}.example.com`).catch(refusal), tooMany, "at the bound, the bound's refusal comes first (as before)");
});

t.test("below the bound, a pending invitation of the same email is still a conflict", async (t) => {
  const org = "org-invite-duplicate";
  await invite(members, org, "dup@example.com");
  t.match(await invite(members, org, "DUP@example.com").catch(refusal), { status: 409, param: "email", code: "invitation_pending" });
  t.equal((await members.listInvitations(org)).length, 1);
});
