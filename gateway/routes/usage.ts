import { errors } from "../../modules/errors/mod.js";
import type { AccountStore } from "../../modules/accounts/mod.js";
import { parseUsageQuery, usagePage, type UsageStore } from "../../modules/usage/mod.js";
import type { Router } from "../http/router.js";

/**
 * GET /v1/organization/usage/completions in OpenAI's shape, for organization keys: the usage of
 * every project of the key's organization (project_ids narrows it).
 */
export function registerUsageRoutes(router: Router, deps: { usage: UsageStore; accounts: AccountStore }): void {
  router.get("/v1/organization/usage/completions", async (ex) => {
    const principal = ex.principal!;
    if (principal.scope !== "organization")
      throw errors.forbidden("The usage API needs an organization key (sk-org-...): a project key sees only its project.", "organization_key_required");
    const query = parseUsageQuery(ex.searchParams());
    const projects = (await deps.accounts.listProjects(principal.organizationId)).map((p) => p.id);
    ex.json(200, await usagePage(deps.usage, projects, query));
  });
}
