import type { NatsConnection } from "@nats-io/transport-node";
import type { KV } from "@nats-io/kv";
import { newId } from "../../lib/ids.js";
import { listKeys, openKv } from "../../lib/nats/jetstream.js";
import { buckets } from "../../lib/nats/subjects.js";
import { createRecord, getRecord, listRecords, live, modifyRecord, updateRecord, upsertRecord } from "../../lib/nats/kv-records.js";
import { Admission } from "../../lib/nats/admission.js";
import {
  accountKeys,
  accountRecords,
  ID_PATTERN,
  invitationStatus,
  nowSeconds,
  type ApiKeyRecord,
  type InvitationRecord,
  type KeyIndexRecord,
  type OrganizationRecord,
  type ProjectRecord,
} from "./records.js";
import { errors } from "../errors/mod.js";
import { invitationIdOfCode, keyPrefix, newApiKey, newInvitationCode, sameDigest, sha256Hex } from "./secrets.js";

// Refusals are domain errors (modules/errors): InvalidParam, NotFound, Conflict (exists already,
// used already) and Gone (expired). The admin service maps them to gRPC statuses, the gateway to HTTP.

export const DEFAULT_PROJECT_NAME = "Default project";
export const DEFAULT_KEY_NAME = "Secret key";
export const DEFAULT_INVITATION_TTL_SECONDS = 14 * 24 * 3600;
const MAX_NAME_LENGTH = 200;
/** Projects per organization: every dashboard page lists them, so they are bounded. */
export const MAX_PROJECTS_PER_ORGANIZATION = 1000;
/**
 * Keys an organization may have made (revoked ones included: their records stay). Every key is
 * held in each gateway's key cache, so one tenant creating keys in a loop must hit a wall.
 */
export const MAX_KEYS_PER_ORGANIZATION = 10_000;

export interface AccountBounds {
  maxKeysPerOrganization?: number;
  maxProjectsPerOrganization?: number;
}

export interface ApiKeyView extends ApiKeyRecord {
  last_used_at: number | null;
}

export interface CreatedKey {
  key: ApiKeyView;
  /** The key itself: shown once, stored nowhere. */
  secret: string;
}

export interface Redemption {
  organization: OrganizationRecord;
  project: ProjectRecord;
  key: CreatedKey;
}

function checkName(value: string | undefined, field: string, fallback?: string): string {
  const name = (value ?? "").trim() || fallback;
  if (!name) throw errors.invalidParam(field, `${field} is required.`);
  if (name.length > MAX_NAME_LENGTH) throw errors.invalidParam(field, `${field} is too long (at most ${MAX_NAME_LENGTH} characters).`);
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u001f\u007f]/.test(name)) throw errors.invalidParam(field, `${field} cannot contain control characters.`);
  return name;
}

function checkId(value: string, field: string): string {
  if (!ID_PATTERN.test(value)) throw errors.invalidParam(field, `${field} '${value}' is not a valid id.`);
  return value;
}

/**
 * Organizations, projects, API keys and invitations in JetStream KV. Stateless: any number of
 * processes may use it at once. Creations are create-only writes (never overwrite), changes are
 * compare-and-set on the record's revision.
 */
export class AccountStore {
  private readonly maxKeysPerOrganization: number;
  private readonly maxProjectsPerOrganization: number;

  /** The bounds are MAX_KEYS_PER_ORGANIZATION and MAX_PROJECTS_PER_ORGANIZATION but in tests of the bounds themselves. */
  constructor(readonly kv: KV, readonly usage: KV, bounds: AccountBounds = {}) {
    this.maxKeysPerOrganization = bounds.maxKeysPerOrganization ?? MAX_KEYS_PER_ORGANIZATION;
    this.maxProjectsPerOrganization = bounds.maxProjectsPerOrganization ?? MAX_PROJECTS_PER_ORGANIZATION;
  }

  static async open(nc: NatsConnection, bounds: AccountBounds = {}): Promise<AccountStore> {
    const [kv, usage] = await Promise.all([
      openKv(nc, buckets.accounts, { history: 5, description: "Tributary organizations, projects, API keys (hashed) and invitations" }),
      openKv(nc, buckets.apiKeyUsage, { history: 1, description: "Tributary API keys: last-used times" }),
    ]);
    return new AccountStore(kv, usage, bounds);
  }

  // ---- organizations and projects ----

  async createOrganization(input: { name: string; projectName?: string; id?: string; projectId?: string }): Promise<{ organization: OrganizationRecord; project: ProjectRecord }> {
    const name = checkName(input.name, "name");
    const projectName = checkName(input.projectName, "project_name", DEFAULT_PROJECT_NAME);
    const created_at = nowSeconds();
    const organization: OrganizationRecord = {
      id: input.id ? checkId(input.id, "organization_id") : newId("org-"),
      name,
      created_at,
      default_project_id: input.projectId ? checkId(input.projectId, "project_id") : newId("proj_"),
    };
    const project: ProjectRecord = { id: organization.default_project_id, organization_id: organization.id, name: projectName, created_at };
    const orgKey = accountKeys.org(organization.id);
    const projectKey = accountKeys.project(organization.id, project.id);
    const orgTaken = () => errors.conflict(`Organization ${organization.id} already exists.`, "organization_id", "already_exists");
    // An organization that exists already is refused before anything is written: its projects and their bound stay as they are.
    if (live(await this.kv.get(orgKey)) !== undefined) throw orgTaken();
    // The project first: an organization is never visible without its default project.
    if ((await createRecord(this.kv, projectKey, project)) === undefined) throw errors.conflict(`Project ${project.id} already exists.`, "project_id", "already_exists");
    if ((await createRecord(this.kv, orgKey, organization)) === undefined) {
      // A create of the same id won since the check: this project is not of its organization. It
      // goes again; it was not counted yet, so the bound is as the winner left it. Deleted, not
      // purged: a purge moves listings running meanwhile (the winner's count of its projects) past
      // records it did not touch, on nats-server before 2.9.12 (nats-io/nats-server#3838).
      await this.kv.delete(projectKey);
      throw orgTaken();
    }
    // Counted only now that it belongs to a created organization (see registerProject). A counter
    // made meanwhile (a first createProject) counted it from the listing already: high, never low.
    await this.projectBound(organization.id).add();
    return { organization, project };
  }

  async getOrganization(orgId: string): Promise<OrganizationRecord | undefined> {
    if (!ID_PATTERN.test(orgId)) return undefined;
    return (await getRecord(this.kv, accountKeys.org(orgId), accountRecords.organization))?.value;
  }

  async requireOrganization(orgId: string): Promise<OrganizationRecord> {
    const org = await this.getOrganization(orgId);
    if (!org) throw errors.notFound(`No organization with id '${orgId}'.`, "organization_id");
    return org;
  }

  async listOrganizations(): Promise<OrganizationRecord[]> {
    const records = await listRecords(this.kv, accountKeys.orgs, accountRecords.organization);
    return records.map((r) => r.value).sort(byCreation);
  }

  /**
   * The organization's project bound: admission through its counter record (compare-and-set), so
   * of creates racing for the last place exactly one gets it. Project ids may be chosen by the
   * caller, so they can repeat: the bound recounts (lib/nats/admission.ts).
   */
  private projectBound(orgId: string): Admission {
    return new Admission({
      kv: this.kv,
      key: accountKeys.projectCount(orgId),
      max: this.maxProjectsPerOrganization,
      recount: true,
      written: async (projectId) => live(await this.kv.get(accountKeys.project(orgId, projectId))) !== undefined,
      existing: async () => (await listKeys(this.kv, accountKeys.projectsOf(orgId), `project.${orgId}.`)).map((id) => ({ id, at: 0 })),
    });
  }

  async createProject(input: { organizationId: string; name: string; id?: string }): Promise<ProjectRecord> {
    const org = await this.requireOrganization(input.organizationId);
    const project: ProjectRecord = {
      id: input.id ? checkId(input.id, "project_id") : newId("proj_"),
      organization_id: org.id,
      name: checkName(input.name, "name"),
      created_at: nowSeconds(),
    };
    const key = accountKeys.project(org.id, project.id);
    const exists = async () => input.id !== undefined && live(await this.kv.get(key)) !== undefined;
    const conflict = () => errors.conflict(`Project ${project.id} already exists.`, "project_id", "already_exists");
    // A project that exists already is refused before admission: it takes no place.
    if (await exists()) throw conflict();
    const created = await this.projectBound(org.id).within(project.id, () => createRecord(this.kv, key, project), (revision) => revision !== undefined);
    if (!created.admitted) {
      // Made meanwhile by a create of the same id that took the last place: what it always was, a conflict.
      if (await exists()) throw conflict();
      throw errors.invalidParam("name", `An organization has at most ${this.maxProjectsPerOrganization} projects.`, "too_many_projects");
    }
    if (created.value === undefined) throw conflict();
    return project;
  }

  /**
   * Creates `project` unless it exists (then false). Projects made outside `createProject` (an
   * organization's first, an operator's configured ones) are not bound, but they count towards it.
   */
  async registerProject(project: ProjectRecord): Promise<boolean> {
    if ((await createRecord(this.kv, accountKeys.project(project.organization_id, project.id), project)) === undefined) return false;
    await this.projectBound(project.organization_id).add();
    return true;
  }

  async getProject(orgId: string, projectId: string): Promise<ProjectRecord | undefined> {
    if (!ID_PATTERN.test(orgId) || !ID_PATTERN.test(projectId)) return undefined;
    return (await getRecord(this.kv, accountKeys.project(orgId, projectId), accountRecords.project))?.value;
  }

  /** A project by its id alone (a wildcard listing: admin operations only, never per request). */
  async findProject(projectId: string): Promise<ProjectRecord | undefined> {
    if (!ID_PATTERN.test(projectId)) return undefined;
    const found = await listRecords(this.kv, accountKeys.projectAnywhere(projectId), accountRecords.project);
    return found[0]?.value;
  }

  /** The organization's projects: its default project first, then by creation (ids break a tie within a second). */
  async listProjects(orgId: string): Promise<ProjectRecord[]> {
    const org = await this.requireOrganization(orgId);
    const records = await listRecords(this.kv, accountKeys.projectsOf(orgId), accountRecords.project);
    const isDefault = (p: ProjectRecord) => (p.id === org.default_project_id ? 0 : 1);
    return records.map((r) => r.value).sort((a, b) => isDefault(a) - isDefault(b) || byCreation(a, b));
  }

  /** Renames a project of the organization (compare-and-set on its record). */
  async renameProject(orgId: string, projectId: string, name: string): Promise<ProjectRecord> {
    const newName = checkName(name, "name");
    if (!ID_PATTERN.test(orgId) || !ID_PATTERN.test(projectId)) throw errors.notFound(`No project with id '${projectId}'.`, "project_id");
    const record = await modifyRecord(this.kv, accountKeys.project(orgId, projectId), accountRecords.project, (p) => (p.name === newName ? undefined : { ...p, name: newName }));
    if (!record) throw errors.notFound(`No project with id '${projectId}'.`, "project_id");
    return record.value;
  }

  // ---- API keys ----

  /** A new key of a project, or of an organization (reaching all its projects). */
  async createApiKey(input: { projectId?: string; organizationId?: string; name?: string }): Promise<CreatedKey> {
    if (!!input.projectId === !!input.organizationId)
      throw errors.invalidParam("project_id", "Give either a project (a project key) or an organization (an organization key).");
    let orgId: string;
    let projectId: string | null = null;
    if (input.projectId) {
      const project = await this.findProject(input.projectId);
      if (!project) throw errors.notFound(`No project with id '${input.projectId}'.`, "project_id");
      orgId = project.organization_id;
      projectId = project.id;
    } else {
      orgId = (await this.requireOrganization(input.organizationId!)).id;
    }
    const name = checkName(input.name, "name", DEFAULT_KEY_NAME);
    return this.newKey(orgId, projectId, name);
  }

  /**
   * The organization's key bound: admission through its counter record (compare-and-set), so of
   * creates racing for the last key exactly one gets it.
   */
  private keyBound(orgId: string): Admission {
    return new Admission({
      kv: this.kv,
      key: accountKeys.keyCount(orgId),
      max: this.maxKeysPerOrganization,
      written: async (keyId) => live(await this.kv.get(accountKeys.keyIndex(orgId, keyId))) !== undefined,
      existing: async () => (await listKeys(this.kv, accountKeys.keyIndexesOf(orgId), `keyid.${orgId}.`)).map((id) => ({ id, at: 0 })),
    });
  }

  private async newKey(organizationId: string, projectId: string | null, name: string): Promise<CreatedKey> {
    const secret = newApiKey(projectId ? "project" : "organization");
    const id = newId("key_");
    const created = await this.keyBound(organizationId).within(id, () => this.storeKey(secret, { organizationId, projectId, name, id }));
    if (!created.admitted) throw errors.invalidParam("name", `An organization has at most ${this.maxKeysPerOrganization} API keys (revoked ones included).`, "too_many_keys");
    if (!created.value.record) throw new Error("a freshly generated API key collided with an existing one");
    return { key: { ...created.value.record, last_used_at: null }, secret };
  }

  /**
   * Stores `secret` (by its hash) as a key of the organization/project. Idempotent for a given
   * secret: when the key exists already (possibly revoked) it is left as it is and undefined is
   * returned, so re-registering a configured key never un-revokes it.
   */
  async registerKey(secret: string, input: { organizationId: string; projectId: string | null; name: string; id?: string }): Promise<ApiKeyRecord | undefined> {
    const { record, indexed } = await this.storeKey(secret, input);
    // Keys an operator configures are not bound, but they count towards the bound.
    if (indexed) await this.keyBound(input.organizationId).add();
    return record;
  }

  /** Writes the key's index and record; `indexed` when the index is new, `record` unless the key existed. */
  private async storeKey(secret: string, input: { organizationId: string; projectId: string | null; name: string; id?: string }): Promise<{ record: ApiKeyRecord | undefined; indexed: boolean }> {
    const hash = sha256Hex(secret);
    const record: ApiKeyRecord = {
      id: input.id ?? newId("key_"),
      name: input.name,
      organization_id: input.organizationId,
      project_id: input.projectId,
      prefix: keyPrefix(secret),
      created_at: nowSeconds(),
      revoked_at: null,
    };
    // Index first: a key that authenticates is always listable and revocable by its id.
    const indexed = (await createRecord<KeyIndexRecord>(this.kv, accountKeys.keyIndex(record.organization_id, record.id), { hash })) !== undefined;
    if (!(await createRecord(this.kv, accountKeys.apiKey(hash), record))) return { record: undefined, indexed };
    return { record, indexed };
  }

  /** The record of a key, by the hash of the key (what gateways look up). */
  async keyByHash(hash: string): Promise<ApiKeyRecord | undefined> {
    return (await getRecord(this.kv, accountKeys.apiKey(hash), accountRecords.apiKey))?.value;
  }

  async listApiKeys(input: { organizationId?: string; projectId?: string; includeRevoked?: boolean }): Promise<ApiKeyView[]> {
    let orgId = input.organizationId;
    if (input.projectId) {
      const project = await this.findProject(input.projectId);
      if (!project || (orgId && project.organization_id !== orgId))
        throw errors.notFound(`No project with id '${input.projectId}'.`, "project_id");
      orgId = project.organization_id;
    }
    if (!orgId) throw errors.invalidParam("organization_id", "Give an organization or a project.");
    await this.requireOrganization(orgId);
    const indexes = await listRecords(this.kv, accountKeys.keyIndexesOf(orgId), accountRecords.keyIndex);
    // An index whose record holds another id lost a registration race: it names no key.
    const keys = await Promise.all(indexes.map(async (i) => {
      const k = await this.keyByHash(i.value.hash);
      return k && i.key.endsWith(`.${k.id}`) ? k : undefined;
    }));
    const visible = keys.filter(
      (k): k is ApiKeyRecord => !!k && (input.includeRevoked || k.revoked_at === null) && (!input.projectId || k.project_id === input.projectId),
    );
    const lastUsed = await Promise.all(visible.map((k) => this.lastUsed(k.id)));
    return visible.map((k, i) => ({ ...k, last_used_at: lastUsed[i] ?? null })).sort(byCreation);
  }

  /** Revokes a key; gateways drop it from their caches as soon as they see the change. */
  async revokeApiKey(keyId: string): Promise<ApiKeyView> {
    if (!ID_PATTERN.test(keyId)) throw errors.notFound(`No API key with id '${keyId}'.`, "key_id");
    const index = (await listRecords(this.kv, accountKeys.keyIndexAnywhere(keyId), accountRecords.keyIndex))[0];
    if (!index || (await this.keyByHash(index.value.hash))?.id !== keyId) throw errors.notFound(`No API key with id '${keyId}'.`, "key_id");
    const revokedAt = nowSeconds();
    const record = await modifyRecord(this.kv, accountKeys.apiKey(index.value.hash), accountRecords.apiKey, (k) =>
      k.revoked_at === null ? { ...k, revoked_at: revokedAt } : undefined,
    );
    if (!record) throw errors.notFound(`No API key with id '${keyId}'.`, "key_id");
    return { ...record.value, last_used_at: await this.lastUsed(keyId) };
  }

  async lastUsed(keyId: string): Promise<number | null> {
    return (await getRecord(this.usage, keyId, accountRecords.lastUsed))?.value.last_used_at ?? null;
  }

  /** Records that the key was used at `at` (Unix seconds), unless a later time is stored already. */
  async recordLastUsed(keyId: string, at: number): Promise<void> {
    await upsertRecord(this.usage, keyId, accountRecords.lastUsed, (current) => (current && current.last_used_at >= at ? undefined : { last_used_at: at }));
  }

  // ---- invitations ----

  async createInvitation(input: { note?: string; expiresInSeconds?: number }): Promise<{ invitation: InvitationRecord; code: string }> {
    const ttl = input.expiresInSeconds || DEFAULT_INVITATION_TTL_SECONDS;
    if (!Number.isInteger(ttl) || ttl < 60 || ttl > 366 * 24 * 3600)
      throw errors.invalidParam("expires_in_seconds", "An invitation is valid between one minute and one year.");
    const note = (input.note ?? "").trim();
    if (note.length > MAX_NAME_LENGTH) throw errors.invalidParam("note", `note is too long (at most ${MAX_NAME_LENGTH} characters).`);
    const id = newId("inv_");
    const code = newInvitationCode(id);
    const created_at = nowSeconds();
    const invitation: InvitationRecord = {
      id,
      note,
      code_hash: sha256Hex(code),
      created_at,
      expires_at: created_at + ttl,
      redeemed_at: null,
      organization_id: null,
      revoked_at: null,
    };
    if (!(await createRecord(this.kv, accountKeys.invitation(id), invitation))) throw new Error("invitation id collision");
    return { invitation, code };
  }

  async listInvitations(): Promise<InvitationRecord[]> {
    const records = await listRecords(this.kv, accountKeys.invitations, accountRecords.invitation);
    return records.map((r) => r.value).sort(byCreation);
  }

  async revokeInvitation(invitationId: string): Promise<InvitationRecord> {
    const key = ID_PATTERN.test(invitationId) ? accountKeys.invitation(invitationId) : undefined;
    const current = key ? await getRecord(this.kv, key, accountRecords.invitation) : undefined;
    if (!current || !key) throw errors.notFound(`No invitation with id '${invitationId}'.`, "invitation_id");
    const status = invitationStatus(current.value);
    if (status === "redeemed") throw errors.conflict("This invitation was redeemed already; revoke the keys of its organization instead.", "invitation_id", "invitation_redeemed");
    const revokedAt = nowSeconds();
    const record = (await modifyRecord(this.kv, key, accountRecords.invitation, (inv) =>
      inv.revoked_at === null && inv.redeemed_at === null ? { ...inv, revoked_at: revokedAt } : undefined,
    ))?.value;
    if (!record) throw errors.notFound(`No invitation with id '${invitationId}'.`, "invitation_id");
    if (record.redeemed_at !== null) throw errors.conflict("This invitation was redeemed meanwhile.", "invitation_id", "invitation_redeemed");
    return record;
  }

  /**
   * Registration: a valid, unused invitation becomes an organization with its first project and
   * first key. The invitation is claimed first (compare-and-set), so of two concurrent
   * redemptions exactly one creates an organization.
   */
  async redeemInvitation(input: { code: string; organizationName: string; projectName?: string; keyName?: string }): Promise<Redemption> {
    const organizationName = checkName(input.organizationName, "organization_name");
    const projectName = checkName(input.projectName, "project_name", DEFAULT_PROJECT_NAME);
    const keyName = checkName(input.keyName, "key_name", DEFAULT_KEY_NAME);
    const code = (input.code ?? "").trim();
    const id = invitationIdOfCode(code);
    const notFound = () => errors.notFound("This invitation code is not valid.", "code", "invitation_not_found");
    if (!id) throw notFound();
    const current = await getRecord(this.kv, accountKeys.invitation(id), accountRecords.invitation);
    if (!current || !sameDigest(sha256Hex(code), current.value.code_hash)) throw notFound();
    const status = invitationStatus(current.value);
    if (status === "revoked") throw notFound();
    if (status === "redeemed") throw errors.conflict("This invitation has been used already.", "code", "invitation_redeemed");
    if (status === "expired") throw errors.gone("This invitation has expired.", "code", "invitation_expired");

    const orgId = newId("org-");
    const claimed: InvitationRecord = { ...current.value, redeemed_at: nowSeconds(), organization_id: orgId };
    if ((await updateRecord(this.kv, accountKeys.invitation(id), claimed, current.revision)) === undefined)
      throw errors.conflict("This invitation has been used already.", "code", "invitation_redeemed");
    const { organization, project } = await this.createOrganization({ id: orgId, name: organizationName, projectName });
    const key = await this.newKey(organization.id, project.id, keyName);
    return { organization, project, key };
  }
}

function byCreation<T extends { created_at: number; id: string }>(a: T, b: T): number {
  return a.created_at - b.created_at || a.id.localeCompare(b.id);
}
