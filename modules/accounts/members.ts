import { randomBytes, scrypt as scryptCb, timingSafeEqual } from "node:crypto";
import { promisify } from "node:util";
import { Schema } from "effect";
import type { KV } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import { newId, randomToken } from "../../lib/ids.js";
import { openKv } from "../../lib/nats/jetstream.js";
import { buckets } from "../../lib/nats/subjects.js";
import { createRecord, getRecord, listRecords, valueSchema } from "../../lib/nats/kv-records.js";
import { errors } from "../errors/mod.js";
import { sha256Hex } from "./secrets.js";

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
  /** `scrypt$N$r$p$<salt b64>$<hash b64>` */
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

const Str = Schema.String;
const Num = Schema.Number;
const memberSchema = valueSchema<MemberRecord>()(
  Schema.Struct({ id: Str, organization_id: Str, email: Str, role: Schema.Literals(["owner", "member"]), password_hash: Str, created_at: Num }),
);
const emailSchema = valueSchema<EmailIndexRecord>()(Schema.Struct({ organization_id: Str, member_id: Str }));
const sessionSchema = valueSchema<SessionRecord>()(
  Schema.Struct({ member_id: Str, organization_id: Str, email: Str, role: Schema.Literals(["owner", "member"]), csrf: Str, created_at: Num, expires_at: Num }),
);

const keys = {
  member: (orgId: string, memberId: string) => `member.${orgId}.${memberId}`,
  membersOf: (orgId: string) => `member.${orgId}.*`,
  email: (email: string) => `email.${sha256Hex(normalizeEmail(email))}`,
  session: (token: string) => `session.${sha256Hex(token)}`,
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

/** A password hash computed once, compared when the email is unknown: a sign-in takes as long either way. */
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
    if (!member) {
      await verifyPassword(password, await (decoyHash ??= hashPassword(randomToken(16))));
      return undefined;
    }
    return (await verifyPassword(password, member.value.password_hash)) ? member.value : undefined;
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
    if (/^[A-Za-z0-9]{20,64}$/.test(token)) await this.sessions.purge(keys.session(token));
  }
}
