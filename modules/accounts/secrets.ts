import { createHash, timingSafeEqual } from "node:crypto";
import { randomToken } from "../../lib/ids.js";

// API keys and invitation codes: random base62 secrets (about 5.95 bits a character), of which
// only a sha256 is stored. They carry enough entropy (48 characters: 285 bits; 32: 190 bits) that a
// fast hash is the right one: nothing can be guessed, so nothing needs slowing down.

const KEY_SECRET_LENGTH = 48;
const INVITATION_SECRET_LENGTH = 32;
/** Characters of a key shown in lists: its kind and a few random characters. */
const PREFIX_RANDOM_CHARS = 4;

export type KeyKind = "project" | "organization";

export function sha256Hex(text: string): string {
  return createHash("sha256").update(text).digest("hex");
}

export function newApiKey(kind: KeyKind): string {
  return `${kind === "project" ? "sk-proj-" : "sk-org-"}${randomToken(KEY_SECRET_LENGTH)}`;
}

/** "sk-proj-AbCd": the kind and the first random characters (any key: the local ones too). */
export function keyPrefix(key: string): string {
  const m = /^(sk-(?:proj|org|local|[a-z]+)-)/.exec(key);
  const head = m ? m[1]!.length : 3;
  return key.slice(0, Math.min(key.length, head + PREFIX_RANDOM_CHARS));
}

/** An invitation code names its invitation and carries the secret: `<invitation id>-<secret>`. */
export function newInvitationCode(invitationId: string): string {
  return `${invitationId}-${randomToken(INVITATION_SECRET_LENGTH)}`;
}

export function invitationIdOfCode(code: string): string | undefined {
  const m = /^(inv_[A-Za-z0-9]{1,64})-[A-Za-z0-9]{16,128}$/.exec(code.trim());
  return m?.[1];
}

/** Compares two hex digests in constant time. */
export function sameDigest(aHex: string, bHex: string): boolean {
  const a = Buffer.from(aHex, "hex");
  const b = Buffer.from(bHex, "hex");
  return a.length === b.length && a.length > 0 && timingSafeEqual(a, b);
}
