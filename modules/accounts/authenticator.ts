import { errors } from "../errors/mod.js";
import type { Principal } from "./principal.js";

/**
 * Resolves a bearer token to a principal, or throws Unauthenticated. `headers` (lower-case names)
 * carry what else selects the principal: OpenAI-Project and OpenAI-Organization.
 */
export interface Authenticator {
  authenticate(authorization: string | undefined, headers?: Readonly<Record<string, string>>): Principal | Promise<Principal>;
}

export function bearerToken(authorization: string | undefined): string {
  if (!authorization) throw errors.missingKey();
  const m = /^Bearer\s+(\S+)\s*$/i.exec(authorization);
  if (!m) throw errors.missingKey();
  return m[1]!;
}
