import { randomBytes, scrypt as scryptCb, timingSafeEqual } from "node:crypto";
import { promisify } from "node:util";
import * as Schema from "effect/Schema";
import type { KV } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import { newId, randomToken } from "../../lib/ids.js";
import { listKeys, openKv } from "../../lib/nats/jetstream.js";
import { buckets } from "../../lib/nats/subjects.js";
import { createRecord, getRecord, listRecords, live, modifyRecord, removeKey, valueSchema } from "../../lib/nats/kv-records.js";
import { Admission } from "../../lib/nats/admission.js";
import { errors } from "../errors/mod.js";
import { sameDigest, sha256Hex } from "./secrets.js";
import { isSignInTokenShape, newSignInToken, type SignInTokenRecord, signInTokenSchema, signInTokenStatus } from "./sign-in-links.js";

// People of an organization who sign in to the dashboard, and their sessions. A password is
// stored only as an scrypt hash (random salt, N=2^15, r=8, p=1); a session token only as its
// sha256 (it is random: a fast hash is enough, as for API keys).

const scrypt = promisify(scryptCb) as (password: string, salt: Buffer, keylen: number, options: { N: number; r: number; p: number; maxmem: number }) => Promise<Buffer>;
const SCRYPT = { N: 1 << 15, r: 8, p: 1, keylen: 32 };
const MAX_PASSWORD_BYTES = 1024;
export const MIN_PASSWORD_LENGTH = 8;

export type MemberRole = "owner" | "member";

export interface MemberRecord {
  id: string;
  organization_id: string;
  email: string;
  role: MemberRole;
  /** `scrypt$N$r$p$<salt b64>$<hash b64>`; empty for a member without a password, who signs in with one-time links only. */
  password_hash: string;
  created_at: number;
}

/** Index: the sha256 of a lower-cased email -> its member (an email belongs to one organization). */
export interface EmailIndexRecord {
  organization_id: string;
  member_id: string;
}

export interface SessionRecord {
  member_id: string;
  organization_id: string;
  email: string;
  role: MemberRole;
  /** The token forms must send back (CSRF): random, per session. */
  csrf: string;
  created_at: number;
  /** Unix seconds: the session is refused after it. */
  expires_at: number;
}

/**
 * An owner's invitation of a person to the organization, with the role they will have. The code
 * (`<org>.<invitation>.<secret>`, shown once) is the credential: whoever holds it chooses the
 * password of the member it creates. Stored as its sha256 only.
 */
export interface MemberInvitationRecord {
  id: string;
  organization_id: string;
  email: string;
  role: MemberRole;
  code_hash: string;
  /** The member who created it. */
  invited_by: string;
  created_at: number;
  expires_at: number;
  accepted_at: number | null;
  revoked_at: number | null;
}

export type MemberInvitationStatus = "pending" | "accepted" | "revoked" | "expired";

export function memberInvitationStatus(inv: MemberInvitationRecord, now = Math.floor(Date.now() / 1000)): MemberInvitationStatus {
  if (inv.accepted_at !== null) return "accepted";
  if (inv.revoked_at !== null) return "revoked";
  return inv.expires_at <= now ? "expired" : "pending";
}

/** A member invitation is valid this long. */
export const MEMBER_INVITATION_TTL_SECONDS = 7 * 24 * 3600;
/** Invitations kept per organization (any status); past it, creating one is refused until some are revoked or accepted and aged out. */
export const MAX_MEMBER_INVITATIONS = 100;
/** Invitations no longer pending are forgotten this long after they stopped being pending. */
const INVITATION_KEEP_SECONDS = 30 * 24 * 3600;

const Str = Schema.String;
const Num = Schema.Number;
const memberSchema = valueSchema<MemberRecord>()(
  Schema.Struct({ id: Str, organization_id: Str, email: Str, role: Schema.Literals(["owner", "member"]), password_hash: Str, created_at: Num }),
);
const emailSchema = valueSchema<EmailIndexRecord>()(Schema.Struct({ organization_id: Str, member_id: Str }));
const sessionSchema = valueSchema<SessionRecord>()(
  Schema.Struct({ member_id: Str, organization_id: Str, email: Str, role: Schema.Literals(["owner", "member"]), csrf: Str, created_at: Num, expires_at: Num }),
);

const invitationSchema = valueSchema<MemberInvitationRecord>()(
  Schema.Struct({
    id: Str,
    organization_id: Str,
    email: Str,
    role: Schema.Literals(["owner", "member"]),
    code_hash: Str,
    invited_by: Str,
    created_at: Num,
    expires_at: Num,
    accepted_at: Schema.NullOr(Num),
    revoked_at: Schema.NullOr(Num),
  }),
);

const TOKEN = /^[A-Za-z0-9_-]{1,64}$/;

/** The organization and invitation a code names, or undefined when it is not a code's shape. */
function parseInvitationCode(code: string): { organizationId: string; invitationId: string } | undefined {
  const parts = code.trim().split(".");
  if (parts.length !== 3 || !TOKEN.test(parts[0]!) || !TOKEN.test(parts[1]!) || !/^[A-Za-z0-9]{32}$/.test(parts[2]!)) return undefined;
  return { organizationId: parts[0]!, invitationId: parts[1]! };
}

const keys = {
  member: (orgId: string, memberId: string) => `member.${orgId}.${memberId}`,
  membersOf: (orgId: string) => `member.${orgId}.*`,
  email: (email: string) => `email.${sha256Hex(normalizeEmail(email))}`,
  session: (token: string) => `session.${sha256Hex(token)}`,
  invitation: (orgId: string, invitationId: string) => `invite.${orgId}.${invitationId}`,
  invitationsOf: (orgId: string) => `invite.${orgId}.*`,
  /** The organization's invitation counter (lib/nats/admission.ts): admits invitations at the bound. */
  invitationCount: (orgId: string) => `invitecount.${orgId}`,
  signInToken: (token: string) => `signin.${sha256Hex(token)}`,
  signInTokens: "signin.*",
};

export function normalizeEmail(email: string): string {
  return email.trim().toLowerCase();
}

export function checkEmail(email: string, param = "email"): string {
  const e = normalizeEmail(email);
  if (e.length > 254 || !/^[^\s@]+@[^\s@]+\.[^\s@]+$/.test(e)) throw errors.invalidParam(param, "A valid email address is required.");
  return e;
}

export function checkPassword(password: string, param = "password"): string {
  if (password.length < MIN_PASSWORD_LENGTH) throw errors.invalidParam(param, `The password must have at least ${MIN_PASSWORD_LENGTH} characters.`);
  if (Buffer.byteLength(password) > MAX_PASSWORD_BYTES) throw errors.invalidParam(param, `The password is too long (at most ${MAX_PASSWORD_BYTES} bytes).`);
  return password;
}

export async function hashPassword(password: string): Promise<string> {
  const salt = randomBytes(16);
  const hash = await scrypt(password, salt, SCRYPT.keylen, { N: SCRYPT.N, r: SCRYPT.r, p: SCRYPT.p, maxmem: 64 * 1024 * 1024 });
  return `scrypt$${SCRYPT.N}$${SCRYPT.r}$${SCRYPT.p}$${salt.toString("base64")}$${hash.toString("base64")}`;
}

export async function verifyPassword(password: string, stored: string): Promise<boolean> {
  const [kind, n, r, p, salt, hash] = stored.split("$");
  if (kind !== "scrypt" || !salt || !hash || Buffer.byteLength(password) > MAX_PASSWORD_BYTES) return false;
  const expected = Buffer.from(hash, "base64");
  const got = await scrypt(password, Buffer.from(salt, "base64"), expected.length, { N: Number(n), r: Number(r), p: Number(p), maxmem: 64 * 1024 * 1024 });
  return got.length === expected.length && timingSafeEqual(got, expected);
}

/** A password hash computed once, compared when the email is unknown or has no password: a sign-in takes as long either way. */
let decoyHash: Promise<string> | undefined;

/**
 * Members (people who sign in to the dashboard) and their sessions, in two KV buckets: members
 * with an email index (create-only: an email is taken once), sessions under the sha256 of their
 * token in a bucket whose age limit is the session lifetime.
 */
export class MemberStore {
  private constructor(private readonly members: KV, private readonly sessions: KV, private readonly sessionTtlSeconds: number) {}

  static async open(nc: NatsConnection, sessionTtlSeconds: number): Promise<MemberStore> {
    const [members, sessions] = await Promise.all([
      openKv(nc, buckets.members, { history: 1, description: "Tributary dashboard members (scrypt password hashes)" }),
      openKv(nc, buckets.sessions, { history: 1, ttl: sessionTtlSeconds * 1000, description: "Tributary dashboard sessions (sha256 of their tokens)" }),
    ]);
    return new MemberStore(members, sessions, sessionTtlSeconds);
  }

  /** Adds a member; a taken email is a Conflict. */
  async create(input: { organizationId: string; email: string; password: string; role: MemberRole }): Promise<MemberRecord> {
    const email = checkEmail(input.email);
    checkPassword(input.password);
    const member: MemberRecord = {
      id: newId("user_"),
      organization_id: input.organizationId,
      email,
      role: input.role,
      password_hash: await hashPassword(input.password),
      created_at: Math.floor(Date.now() / 1000),
    };
    if ((await createRecord(this.members, keys.email(email), { organization_id: member.organization_id, member_id: member.id })) === undefined)
      throw errors.conflict("This email address has an account already.", "email", "email_taken");
    await createRecord(this.members, keys.member(member.organization_id, member.id), member);
    return member;
  }

  async list(organizationId: string): Promise<MemberRecord[]> {
    return (await listRecords(this.members, keys.membersOf(organizationId), memberSchema)).map((r) => r.value).sort((a, b) => a.created_at - b.created_at);
  }

  /** The member with this email and password, or undefined (the same time either way). */
  async authenticate(email: string, password: string): Promise<MemberRecord | undefined> {
    const index = await getRecord(this.members, keys.email(email), emailSchema);
    const member = index && (await getRecord(this.members, keys.member(index.value.organization_id, index.value.member_id), memberSchema));
    if (!member || member.value.password_hash === "") {
      await verifyPassword(password, await (decoyHash ??= hashPassword(randomToken(16))));
      return undefined;
    }
    return (await verifyPassword(password, member.value.password_hash)) ? member.value : undefined;
  }

  /**
   * Adds a member the platform makes itself (the local organization's owner), idempotently: a
   * member already under its id stays as it is. Its email is not checked, so it may be one that
   * no person can take (see registerLocalOwner).
   */
  async register(member: MemberRecord): Promise<MemberRecord> {
    await createRecord(this.members, keys.email(member.email), { organization_id: member.organization_id, member_id: member.id });
    await createRecord(this.members, keys.member(member.organization_id, member.id), member);
    const stored = await getRecord(this.members, keys.member(member.organization_id, member.id), memberSchema);
    if (!stored) throw new Error(`member ${member.id} was removed while it was registered`);
    return stored.value;
  }

  // ---- one-time sign-in links ----

  /**
   * The token of a one-time sign-in link for `member`, valid `ttlSeconds`: returned this once,
   * stored as its sha256. Links past their expiry are forgotten here, so the ones a local stack
   * makes at each start do not pile up.
   */
  async createSignInToken(member: MemberRecord, ttlSeconds: number): Promise<{ token: string; record: SignInTokenRecord }> {
    const now = Math.floor(Date.now() / 1000);
    const stale = (await listRecords(this.members, keys.signInTokens, signInTokenSchema)).filter((r) => r.value.expires_at <= now);
    await Promise.all(stale.map((r) => removeKey(this.members, r.key)));
    const token = newSignInToken();
    const record: SignInTokenRecord = { member_id: member.id, organization_id: member.organization_id, created_at: now, expires_at: now + ttlSeconds, used_at: null };
    if ((await createRecord(this.members, keys.signInToken(token), record)) === undefined) throw new Error("sign-in token collision");
    return { token, record };
  }

  /**
   * Uses a sign-in link's token: claims it (compare-and-set, so of two uses racing one wins) and
   * returns its member. A token not of a token's shape is an InvalidParam; an unknown one a
   * NotFound, a used one a Conflict, an expired one Gone (each naming `token`).
   */
  async redeemSignInToken(token: string): Promise<MemberRecord> {
    if (!isSignInTokenShape(token)) throw errors.invalidParam("token", "This sign-in link is incomplete or altered: copy the whole link.", "sign_in_link_malformed");
    const notFound = () => errors.notFound("This sign-in link is not valid.", "token", "sign_in_link_not_found");
    const now = Math.floor(Date.now() / 1000);
    const claimed = await modifyRecord(this.members, keys.signInToken(token), signInTokenSchema, (cur) =>
      signInTokenStatus(cur, now) === "unused" ? { ...cur, used_at: now } : undefined,
    );
    if (!claimed) throw notFound();
    if (!claimed.changed) {
      if (signInTokenStatus(claimed.value, now) === "used") throw errors.conflict("This sign-in link has been used already: it works once.", "token", "sign_in_link_used");
      throw errors.gone("This sign-in link has expired.", "token", "sign_in_link_expired");
    }
    const member = await getRecord(this.members, keys.member(claimed.value.organization_id, claimed.value.member_id), memberSchema);
    if (!member) throw notFound();
    return member.value;
  }

  /** A new session: its token (the cookie's value, stored nowhere) and record. */
  async startSession(member: MemberRecord): Promise<{ token: string; session: SessionRecord }> {
    const token = randomToken(43);
    const now = Math.floor(Date.now() / 1000);
    const session: SessionRecord = {
      member_id: member.id,
      organization_id: member.organization_id,
      email: member.email,
      role: member.role,
      csrf: randomToken(32),
      created_at: now,
      expires_at: now + this.sessionTtlSeconds,
    };
    await createRecord(this.sessions, keys.session(token), session);
    return { token, session };
  }

  /** The live session of a token, or undefined (unknown, signed out, expired). */
  async session(token: string): Promise<SessionRecord | undefined> {
    if (!/^[A-Za-z0-9]{20,64}$/.test(token)) return undefined;
    const found = await getRecord(this.sessions, keys.session(token), sessionSchema);
    if (!found || found.value.expires_at <= Date.now() / 1000) return undefined;
    return found.value;
  }

  async endSession(token: string): Promise<void> {
    if (/^[A-Za-z0-9]{20,64}$/.test(token)) await removeKey(this.sessions, keys.session(token));
  }

  // ---- invitations of members ----

  /** An invitation of `email` with `role`; the code is returned this once. */
  async invite(input: { organizationId: string; email: string; role: MemberRole; invitedBy: string }): Promise<{ invitation: MemberInvitationRecord; code: string }> {
    const email = checkEmail(input.email);
    if (await getRecord(this.members, keys.email(email), emailSchema)) throw errors.conflict("This email address has an account already.", "email", "email_taken");
    const now = Math.floor(Date.now() / 1000);
    const current = await this.listInvitations(input.organizationId);
    // Forget invitations long past pending, so the per-organization bound only counts what matters
    // (removeKey: a removal that does not blind another invite's count running meanwhile).
    const stale = current.filter((i) => memberInvitationStatus(i, now) !== "pending" && Math.max(i.accepted_at ?? 0, i.revoked_at ?? 0, i.expires_at) + INVITATION_KEEP_SECONDS < now);
    await Promise.all(stale.map((i) => removeKey(this.members, keys.invitation(i.organization_id, i.id))));
    const tooMany = () => errors.invalidParam("email", `This organization has ${MAX_MEMBER_INVITATIONS} invitations already: revoke some first.`);
    // Full by the listing: refused before the duplicate check, as always, and without touching the counter.
    if (current.length - stale.length >= MAX_MEMBER_INVITATIONS) throw tooMany();
    if (current.some((i) => i.email === email && memberInvitationStatus(i, now) === "pending"))
      throw errors.conflict("This email address has a pending invitation already: revoke it first.", "email", "invitation_pending");
    const id = newId("minv_");
    const code = `${input.organizationId}.${id}.${randomToken(32)}`;
    const invitation: MemberInvitationRecord = {
      id,
      organization_id: input.organizationId,
      email,
      role: input.role,
      code_hash: sha256Hex(code),
      invited_by: input.invitedBy,
      created_at: now,
      expires_at: now + MEMBER_INVITATION_TTL_SECONDS,
      accepted_at: null,
      revoked_at: null,
    };
    // The listing only says there was room: the counter decides, so of invites racing for the last place exactly one gets it.
    const key = keys.invitation(input.organizationId, id);
    const created = await this.invitationBound(input.organizationId).within(id, () => createRecord(this.members, key, invitation), (revision) => revision !== undefined);
    if (!created.admitted) throw tooMany();
    if (created.value === undefined) throw new Error("member invitation id collision");
    return { invitation, code };
  }

  /**
   * The organization's invitation bound: admission through its counter record (compare-and-set).
   * Invitations of any status count, as long as they are kept: revoking or accepting one changes
   * its record, not the count. Forgetting one (the deletion of stale ones in `invite`) does not tell
   * the counter, so the bound recounts the invitations present when the counter says it is reached
   * (lib/nats/admission.ts): a forgotten invitation's place is free again from then on.
   */
  private invitationBound(organizationId: string): Admission {
    return new Admission({
      kv: this.members,
      key: keys.invitationCount(organizationId),
      max: MAX_MEMBER_INVITATIONS,
      recount: true,
      written: async (id) => live(await this.members.get(keys.invitation(organizationId, id))) !== undefined,
      existing: async () => (await listKeys(this.members, keys.invitationsOf(organizationId), `invite.${organizationId}.`)).map((id) => ({ id, at: 0 })),
    });
  }

  /** The organization's invitations, newest first (at most MAX_MEMBER_INVITATIONS and the stale ones not yet forgotten). */
  async listInvitations(organizationId: string): Promise<MemberInvitationRecord[]> {
    if (!TOKEN.test(organizationId)) return [];
    return (await listRecords(this.members, keys.invitationsOf(organizationId), invitationSchema)).map((r) => r.value).sort((a, b) => b.created_at - a.created_at || b.id.localeCompare(a.id));
  }

  /** Revokes a pending invitation of the organization: its code is refused from now on. */
  async revokeInvitation(organizationId: string, invitationId: string): Promise<MemberInvitationRecord> {
    const notFound = () => errors.notFound(`No invitation with id '${invitationId}'.`, "invitation_id");
    if (!TOKEN.test(organizationId) || !TOKEN.test(invitationId)) throw notFound();
    const now = Math.floor(Date.now() / 1000);
    const record = await modifyRecord(this.members, keys.invitation(organizationId, invitationId), invitationSchema, (inv) =>
      memberInvitationStatus(inv, now) === "pending" ? { ...inv, revoked_at: now } : undefined,
    );
    if (!record) throw notFound();
    if (!record.changed) throw errors.conflict(`This invitation is ${memberInvitationStatus(record.value, now)} already.`, "invitation_id", "invitation_not_pending");
    return record.value;
  }

  /** The pending invitation a code names, or a NotFound/Gone/Conflict naming `code`. */
  async pendingInvitation(code: string): Promise<MemberInvitationRecord> {
    const notFound = () => errors.notFound("This invitation code is not valid.", "code", "invitation_not_found");
    const named = parseInvitationCode(code);
    if (!named) throw notFound();
    const found = await getRecord(this.members, keys.invitation(named.organizationId, named.invitationId), invitationSchema);
    if (!found || !sameDigest(sha256Hex(code.trim()), found.value.code_hash)) throw notFound();
    const status = memberInvitationStatus(found.value);
    if (status === "revoked") throw notFound();
    if (status === "accepted") throw errors.conflict("This invitation has been used already.", "code", "invitation_redeemed");
    if (status === "expired") throw errors.gone("This invitation has expired.", "code", "invitation_expired");
    return found.value;
  }

  /**
   * Redeems an invitation: claims it (compare-and-set, so a code makes one member) and creates
   * the member with its email and role and this password. A failed creation hands the claim back.
   */
  async acceptInvitation(code: string, password: string): Promise<MemberRecord> {
    checkPassword(password);
    const inv = await this.pendingInvitation(code);
    const key = keys.invitation(inv.organization_id, inv.id);
    const now = Math.floor(Date.now() / 1000);
    const claimed = await modifyRecord(this.members, key, invitationSchema, (cur) => (memberInvitationStatus(cur, now) === "pending" ? { ...cur, accepted_at: now } : undefined));
    if (!claimed?.changed) throw errors.conflict("This invitation has been used already.", "code", "invitation_redeemed");
    try {
      return await this.create({ organizationId: inv.organization_id, email: inv.email, password, role: inv.role });
    } catch (err) {
      await modifyRecord(this.members, key, invitationSchema, (cur) => ({ ...cur, accepted_at: null }));
      throw err;
    }
  }
}
