// The account records kept in the accounts KV bucket (JSON), and where each one lives.
// Timestamps are Unix seconds, as in OpenAI's objects; null means "not (yet)".

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

/** KV keys of the accounts bucket. */
export const accountKeys = {
  org: (orgId: string) => `org.${orgId}`,
  orgs: "org.*",
  project: (orgId: string, projectId: string) => `project.${orgId}.${projectId}`,
  projectsOf: (orgId: string) => `project.${orgId}.*`,
  /** Any organization's project with this id (admin lookups only: a wildcard listing). */
  projectAnywhere: (projectId: string) => `project.*.${projectId}`,
  apiKey: (hash: string) => `apikey.${hash}`,
  keyIndex: (orgId: string, keyId: string) => `keyid.${orgId}.${keyId}`,
  keyIndexesOf: (orgId: string) => `keyid.${orgId}.*`,
  keyIndexAnywhere: (keyId: string) => `keyid.*.${keyId}`,
  invitation: (invitationId: string) => `invitation.${invitationId}`,
  invitations: "invitation.*",
} as const;

export const nowSeconds = (): number => Math.floor(Date.now() / 1000);
