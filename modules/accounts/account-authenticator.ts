import { accountKeys, ID_PATTERN, type ApiKeyRecord, type OrganizationRecord, type ProjectRecord } from "./records.js";
import { sha256Hex } from "./secrets.js";
import { errors, Unauthenticated } from "../errors/mod.js";
import { MISS, type AccountDirectory } from "./account-directory.js";
import { bearerToken, type Authenticator } from "./authenticator.js";
import type { LastUsedRecorder } from "./last-used.js";
import type { Principal } from "./principal.js";

const mismatchedProject = () => new Unauthenticated({ reason: "mismatched_project" });
const mismatchedOrganization = () => new Unauthenticated({ reason: "mismatched_organization" });

/**
 * API keys from the accounts bucket: the bearer key's sha256 names its record. A project key
 * reaches its project; an organization key reaches the project named by OpenAI-Project, else the
 * organization's default project. Unknown and revoked keys are the same Unauthenticated (invalid_api_key).
 * Answers synchronously when everything needed is cached (the common case).
 */
export class AccountAuthenticator implements Authenticator {
  constructor(private readonly directory: AccountDirectory, private readonly lastUsed: LastUsedRecorder) {}

  authenticate(authorization: string | undefined, headers: Readonly<Record<string, string>> = {}): Principal | Promise<Principal> {
    const hashKey = accountKeys.apiKey(sha256Hex(bearerToken(authorization)));
    const key = this.directory.peek<ApiKeyRecord>(hashKey);
    if (key === MISS) return this.directory.get<ApiKeyRecord>(hashKey).then((k) => this.resolve(k, headers));
    return this.resolve(key, headers);
  }

  private resolve(key: ApiKeyRecord | undefined, headers: Readonly<Record<string, string>>): Principal | Promise<Principal> {
    if (!key || key.revoked_at !== null) throw errors.invalidKey();
    const organization = headers["openai-organization"]?.trim();
    if (organization && organization !== key.organization_id) throw mismatchedOrganization();
    const requested = headers["openai-project"]?.trim() || undefined;
    if (key.project_id !== null) {
      if (requested && requested !== key.project_id) throw mismatchedProject();
      return this.principal(key, key.project_id);
    }
    // An organization key: the project named, if it is one of the organization's, else the default.
    if (requested && !ID_PATTERN.test(requested)) throw mismatchedProject();
    const lookup = requested ? accountKeys.project(key.organization_id, requested) : accountKeys.org(key.organization_id);
    const found = this.directory.peek<ProjectRecord | OrganizationRecord>(lookup);
    if (found === MISS) return this.directory.get<ProjectRecord | OrganizationRecord>(lookup).then((r) => this.orgPrincipal(key, requested, r));
    return this.orgPrincipal(key, requested, found);
  }

  private orgPrincipal(key: ApiKeyRecord, requested: string | undefined, record: ProjectRecord | OrganizationRecord | undefined): Principal {
    if (!record) {
      if (requested) throw mismatchedProject();
      throw errors.invalidKey(); // the organization is gone
    }
    const projectId = requested ? (record as ProjectRecord).id : (record as OrganizationRecord).default_project_id;
    return this.principal(key, projectId);
  }

  private principal(key: ApiKeyRecord, projectId: string): Principal {
    this.lastUsed.touch(key.id);
    return { organizationId: key.organization_id, projectId, keyId: key.id, scope: key.project_id === null ? "organization" : "project" };
  }
}
