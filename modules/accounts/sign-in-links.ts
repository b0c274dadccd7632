import * as Schema from "effect/Schema";
import { randomToken } from "../../lib/ids.js";
import { valueSchema } from "../../lib/nats/kv-records.js";

// One-time sign-in links: what a notebook server prints, for the dashboard. The token in the link
// is the credential (43 base62 characters: 256 bits, so a fast hash is enough, as for sessions); it
// is stored only as its sha256, works once (claimed by compare-and-set) and until its expiry.

/** The dashboard route a link opens: `?token=<token>`. */
export const SIGN_IN_LINK_PATH = "/dashboard/sign-in/link";

const TOKEN_LENGTH = 43;
const TOKEN_SHAPE = /^[A-Za-z0-9]{43}$/;

export function newSignInToken(): string {
  return randomToken(TOKEN_LENGTH);
}

/** Whether `text` has a token's shape (checked before anything is looked up: a link's query is the network's). */
export function isSignInTokenShape(text: string): boolean {
  return text.length === TOKEN_LENGTH && TOKEN_SHAPE.test(text);
}

/** The path (and query) of the link carrying `token`. */
export function signInLinkPath(token: string): string {
  return `${SIGN_IN_LINK_PATH}?token=${token}`;
}

/** Stored under the sha256 of the token, in the members bucket. */
export interface SignInTokenRecord {
  member_id: string;
  organization_id: string;
  created_at: number;
  /** Unix seconds: refused from then on. */
  expires_at: number;
  /** When the link was used (it signs in once); null until then. */
  used_at: number | null;
}

export type SignInTokenStatus = "unused" | "used" | "expired";

export function signInTokenStatus(record: SignInTokenRecord, now = Math.floor(Date.now() / 1000)): SignInTokenStatus {
  if (record.used_at !== null) return "used";
  return record.expires_at <= now ? "expired" : "unused";
}

export const signInTokenSchema = valueSchema<SignInTokenRecord>()(
  Schema.Struct({
    member_id: Schema.String,
    organization_id: Schema.String,
    created_at: Schema.Number,
    expires_at: Schema.Number,
    used_at: Schema.NullOr(Schema.Number),
  }),
);
