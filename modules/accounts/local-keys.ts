import { AccountStore, DEFAULT_PROJECT_NAME } from "./account-store.js";
import { ID_PATTERN, nowSeconds, accountKeys, type OrganizationRecord, type ProjectRecord } from "./records.js";
import { createRecord } from "../../lib/nats/kv-records.js";
import { errors } from "../errors/mod.js";
import type { MemberRecord, MemberStore } from "./members.js";
import { sha256Hex } from "./secrets.js";
import type { SignInTokenRecord } from "./sign-in-links.js";

// Keys given in configuration (TRIBUTARY_API_KEY, TRIBUTARY_API_KEYS) are registered as real keys
// of a local organization, so that a one-machine stack and the tests need no admin step. They are
// keys like any other: listed, revocable, and a revoked one stays revoked when the stack restarts.
// The local organization has an owner who signs in to the dashboard with one-time links only
// (`tributary start` prints one), so that what the local keys do can be seen there.

export const LOCAL_ORGANIZATION_ID = "org-local";
export const LOCAL_PROJECT_ID = "proj-local";
/**
 * The local owner's email: `localhost` has no dot, so no person can be invited or added with it
 * (checkEmail refuses it), and it says where the account lives.
 */
export const LOCAL_OWNER_EMAIL = "owner@localhost";
const LOCAL_OWNER_ID = "user_local_owner";

export interface ConfiguredKey {
  key: string;
  projectId: string;
}

/** Parses TRIBUTARY_API_KEYS: "key1=proj_a,key2=proj_b" (each key in its own project of the local organization). */
export function parseConfiguredKeys(value: string): ConfiguredKey[] {
  return value
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean)
    .map((pair) => {
      const at = pair.lastIndexOf("=");
      if (at <= 0 || at === pair.length - 1) throw new Error(`TRIBUTARY_API_KEYS: expected key=project, got '${pair.slice(0, 6)}...'`);
      const projectId = pair.slice(at + 1);
      if (!ID_PATTERN.test(projectId)) throw new Error(`TRIBUTARY_API_KEYS: '${projectId}' is not a valid project id (letters, digits, - and _)`);
      return { key: pair.slice(0, at), projectId };
    });
}

/**
 * Makes sure the local organization, its owner, the projects and the keys exist. Idempotent and
 * safe when several gateways run it at once: every write is create-only, and ids are fixed or
 * derived from the key.
 */
export async function registerConfiguredKeys(store: AccountStore, members: MemberStore, keys: readonly ConfiguredKey[]): Promise<void> {
  if (keys.length === 0) return;
  const created_at = nowSeconds();
  const org: OrganizationRecord = { id: LOCAL_ORGANIZATION_ID, name: "Local", created_at, default_project_id: LOCAL_PROJECT_ID };
  const projects = new Map<string, string>([[LOCAL_PROJECT_ID, DEFAULT_PROJECT_NAME]]);
  for (const k of keys) if (!projects.has(k.projectId)) projects.set(k.projectId, k.projectId);
  for (const [id, name] of projects) {
    const project: ProjectRecord = { id, organization_id: org.id, name, created_at };
    await store.registerProject(project);
  }
  await createRecord(store.kv, accountKeys.org(org.id), org);
  await registerLocalOwner(members, created_at);
  for (const k of keys) {
    await store.registerKey(k.key, {
      organizationId: org.id,
      projectId: k.projectId,
      name: "configured key",
      id: `key_local_${sha256Hex(`tributary configured key id:${k.key}`).slice(0, 20)}`,
    });
  }
}

/** The local organization's owner, made if missing: no password (MemberStore.authenticate refuses it), signed in by link. */
function registerLocalOwner(members: MemberStore, created_at = nowSeconds()): Promise<MemberRecord> {
  return members.register({ id: LOCAL_OWNER_ID, organization_id: LOCAL_ORGANIZATION_ID, email: LOCAL_OWNER_EMAIL, role: "owner", password_hash: "", created_at });
}

/**
 * A one-time sign-in link's token for the local organization's owner (see sign-in-links.ts), valid
 * `ttlSeconds`. A NotFound where there is no local organization (a cluster without configured keys).
 */
export async function localOwnerSignInToken(store: AccountStore, members: MemberStore, ttlSeconds: number): Promise<{ token: string; owner: MemberRecord; record: SignInTokenRecord }> {
  if (!(await store.getOrganization(LOCAL_ORGANIZATION_ID)))
    throw errors.notFound("This deployment has no local organization (it is made from TRIBUTARY_API_KEY or TRIBUTARY_API_KEYS): sign in with an email and password.", null, "no_local_organization");
  const owner = await registerLocalOwner(members);
  const { token, record } = await members.createSignInToken(owner, ttlSeconds);
  return { token, owner, record };
}
