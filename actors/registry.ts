import type { ModelSpec } from "../lib/catalog/model-spec.js";
import { resolveAdminToken } from "../lib/accounts/admin-token.js";
import { accountsConfig, optionToUndefined, rateLimitConfig, readConfig } from "../lib/config.js";
import { AdminServiceActor } from "./admin/admin-service.js";
import { BudgetHostActor, budgetHostOptions } from "./ratelimit/budget-host.js";
import type { Actor } from "./runtime/actor.js";

export interface PlatformContext {
  catalog: readonly ModelSpec[];
  home: string;
  env: NodeJS.ProcessEnv;
}

/**
 * The actors an actor host runs, as factories (the supervisor makes a fresh instance on each
 * restart). Each platform feature adds its actors here.
 */
export function platformActors(ctx: PlatformContext): Array<() => Actor> {
  const actors: Array<() => Actor> = [];
  // Rate-limit budgets: every host can own some; ownership moves when a host dies.
  const rateLimits = readConfig(rateLimitConfig);
  actors.push(() => new BudgetHostActor(budgetHostOptions(rateLimits.windowMs)));
  // The admin gRPC service (accounts, keys, invitations), unless TRIBUTARY_ADMIN_ADDR=off.
  const accounts = readConfig(accountsConfig);
  if (accounts.adminAddr !== "off") {
    const token = optionToUndefined(accounts.adminToken);
    actors.push(() => new AdminServiceActor(accounts.adminAddr, () => resolveAdminToken(token, ctx.home, true)!));
  }
  return actors;
}
