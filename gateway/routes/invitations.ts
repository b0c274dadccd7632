import type { AccountStore, MemberStore } from "../../modules/accounts/mod.js";
import { checkEmail, checkPassword } from "../../modules/accounts/mod.js";
import { errors } from "../../modules/errors/mod.js";
import type { OrganizationRecord, ProjectRecord } from "../../modules/accounts/mod.js";
import { parseRedeemInvitation } from "../../modules/openai/mod.js";
import type { Router } from "../http/router.js";

export interface InvitationRouteDeps {
  store: AccountStore;
  members: MemberStore;
  maxBodyBytes: number;
}

const organizationObject = (o: OrganizationRecord) => ({ object: "organization", id: o.id, name: o.name, created_at: o.created_at });
const projectObject = (p: ProjectRecord) => ({ object: "organization.project", id: p.id, name: p.name, created_at: p.created_at, archived_at: null, status: "active" });

/**
 * POST /v1/invitations/redeem: how a customer registers in the private beta. Public (there is no
 * key yet): the invitation code is the credential. Creates the organization, its first project
 * and its first key, and answers the key this once. The code travels in the body, not the path,
 * so it stays out of access logs.
 */
export function registerInvitationRoutes(router: Router, deps: InvitationRouteDeps): void {
  router.post(
    "/v1/invitations/redeem",
    async (ex) => {
      const body = parseRedeemInvitation(await ex.readJson(Math.min(deps.maxBodyBytes, 64 * 1024)));
      // The first owner's credentials are checked before the invitation is used up.
      if ((body.email === undefined) !== (body.password === undefined)) throw errors.invalidParam(body.email === undefined ? "email" : "password", "email and password go together: both or neither.");
      if (body.email !== undefined) {
        checkEmail(body.email);
        checkPassword(body.password!);
      }
      const r = await deps.store.redeemInvitation({ code: body.code, organizationName: body.organization_name, projectName: body.project_name, keyName: body.key_name });
      const owner = body.email !== undefined ? await deps.members.create({ organizationId: r.organization.id, email: body.email, password: body.password!, role: "owner" }) : undefined;
      const k = r.key.key;
      ex.json(200, {
        ...(owner ? { owner: { object: "organization.user", id: owner.id, email: owner.email, role: owner.role, added_at: owner.created_at } } : {}),
        object: "invitation.redemption",
        organization: organizationObject(r.organization),
        project: projectObject(r.project),
        api_key: {
          object: "organization.project.api_key",
          id: k.id,
          name: k.name,
          value: r.key.secret,
          redacted_value: `${k.prefix}...`,
          created_at: k.created_at,
        },
      });
    },
    { public: true },
  );
}
