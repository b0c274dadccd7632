import * as Schema from "effect/Schema";
import { valueSchema, type ValueSchema } from "../../lib/nats/kv-records.js";
import { admissionRecord, type AdmissionRecord } from "../../lib/nats/admission.js";

// The account records kept in the accounts KV bucket (JSON), where each one lives, and the schema
// each is read back with. Timestamps are Unix seconds, as in OpenAI's objects; null means "not (yet)".

export interface OrganizationRecord {
  id: string;
  name: string;
  created_at: number;
  /** The project an organization key reaches when a request names none. */
  default_project_id: string;
}

export interface ProjectRecord {
  id: string;
  organization_id: string;
  name: string;
  created_at: number;
}

/** Stored under the sha256 of the key: the key itself is never stored. */
export interface ApiKeyRecord {
  id: string;
  name: string;
  organization_id: string;
  /** null: an organization key, reaching every project of its organization. */
  project_id: string | null;
  /** The first characters of the key, to recognise it in a list. */
  prefix: string;
  created_at: number;
  revoked_at: number | null;
}

/** Index from a key id to the hash its record is stored under. */
export interface KeyIndexRecord {
  hash: string;
}

export interface InvitationRecord {
  id: string;
  note: string;
  /** sha256 (hex) of the whole code. */
  code_hash: string;
  created_at: number;
  expires_at: number;
  redeemed_at: number | null;
  /** The organization the redemption created. */
  organization_id: string | null;
  revoked_at: number | null;
}

export type InvitationStatus = "pending" | "redeemed" | "revoked" | "expired";

export function invitationStatus(inv: InvitationRecord, nowSeconds = Math.floor(Date.now() / 1000)): InvitationStatus {
  if (inv.redeemed_at !== null) return "redeemed";
  if (inv.revoked_at !== null) return "revoked";
  if (inv.expires_at <= nowSeconds) return "expired";
  return "pending";
}

/** Ids are subject and KV tokens: letters, digits, '-' and '_' only. */
export const ID_PATTERN = /^[A-Za-z0-9_-]{1,64}$/;

/** The last-used time of a key, in the key-usage bucket under the key's id. */
export interface LastUsedRecord {
  last_used_at: number;
}

const Str = Schema.String;
const Time = Schema.Number;
const NullOr = Schema.NullOr;

/** How each record is read back. */
export const accountRecords = {
  organization: valueSchema<OrganizationRecord>()(Schema.Struct({ id: Str, name: Str, created_at: Time, default_project_id: Str })),
  project: valueSchema<ProjectRecord>()(Schema.Struct({ id: Str, organization_id: Str, name: Str, created_at: Time })),
  apiKey: valueSchema<ApiKeyRecord>()(
    Schema.Struct({ id: Str, name: Str, organization_id: Str, project_id: NullOr(Str), prefix: Str, created_at: Time, revoked_at: NullOr(Time) }),
  ),
  keyIndex: valueSchema<KeyIndexRecord>()(Schema.Struct({ hash: Str })),
  invitation: valueSchema<InvitationRecord>()(
    Schema.Struct({
      id: Str,
      note: Str,
      code_hash: Str,
      created_at: Time,
      expires_at: Time,
      redeemed_at: NullOr(Time),
      organization_id: NullOr(Str),
      revoked_at: NullOr(Time),
    }),
  ),
  lastUsed: valueSchema<LastUsedRecord>()(Schema.Struct({ last_used_at: Time })),
};

/** A key of the accounts bucket, typed by the record it holds. */
export type AccountKey<T> = string & { readonly __holds?: T };

/** KV keys of the accounts bucket. */
export const accountKeys = {
  org: (orgId: string): AccountKey<OrganizationRecord> => `org.${orgId}`,
  orgs: "org.*",
  project: (orgId: string, projectId: string): AccountKey<ProjectRecord> => `project.${orgId}.${projectId}`,
  projectsOf: (orgId: string) => `project.${orgId}.*`,
  /** Any organization's project with this id (admin lookups only: a wildcard listing). */
  projectAnywhere: (projectId: string) => `project.*.${projectId}`,
  apiKey: (hash: string): AccountKey<ApiKeyRecord> => `apikey.${hash}`,
  keyIndex: (orgId: string, keyId: string): AccountKey<KeyIndexRecord> => `keyid.${orgId}.${keyId}`,
  keyIndexesOf: (orgId: string) => `keyid.${orgId}.*`,
  keyIndexAnywhere: (keyId: string) => `keyid.*.${keyId}`,
  /** The organization's key counter (lib/nats/admission.ts): admits key creations at the bound. */
  keyCount: (orgId: string): AccountKey<AdmissionRecord> => `keycount.${orgId}`,
  /** The organization's project counter (lib/nats/admission.ts): admits project creations at the bound. */
  projectCount: (orgId: string): AccountKey<AdmissionRecord> => `projectcount.${orgId}`,
  invitation: (invitationId: string): AccountKey<InvitationRecord> => `invitation.${invitationId}`,
  invitations: "invitation.*",
} as const;

/** The schema of the record at `key` of the accounts bucket, from the key's first token. */
export function accountRecordSchema(key: string): ValueSchema<unknown> | undefined {
  switch (key.slice(0, key.indexOf("."))) {
    case "org":
      return accountRecords.organization;
    case "project":
      return accountRecords.project;
    case "apikey":
      return accountRecords.apiKey;
    case "keyid":
      return accountRecords.keyIndex;
    case "invitation":
      return accountRecords.invitation;
    case "keycount":
    case "projectcount":
      return admissionRecord;
    default:
      return undefined;
  }
}

export const nowSeconds = (): number => Math.floor(Date.now() / 1000);
