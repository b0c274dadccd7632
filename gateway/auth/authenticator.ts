import { createHash, timingSafeEqual } from "node:crypto";
import { errors } from "../http/api-error.js";
import type { Principal } from "./principal.js";

/** Resolves a bearer token to a principal, or throws the 401 ApiError. */
export interface Authenticator {
  authenticate(authorization: string | undefined): Principal | Promise<Principal>;
}

export function bearerToken(authorization: string | undefined): string {
  if (!authorization) throw errors.missingKey();
  const m = /^Bearer\s+(\S+)\s*$/i.exec(authorization);
  if (!m) throw errors.missingKey();
  return m[1]!;
}

const digest = (s: string) => createHash("sha256").update(s).digest();

/**
 * Accepts the one key given in configuration (TRIBUTARY_API_KEY): local use and tests. Its
 * project is TRIBUTARY_API_KEY_PROJECT (default proj-local), so two gateways with different keys
 * and projects on one NATS show that stored objects are scoped to their project.
 */
export class StaticKeyAuthenticator implements Authenticator {
  private readonly expected: Buffer;

  constructor(key: string, private readonly principal: Principal = { organizationId: "org-local", projectId: "proj-local", keyId: "key-static" }) {
    this.expected = digest(key);
  }

  authenticate(authorization: string | undefined): Principal {
    const token = bearerToken(authorization);
    if (!timingSafeEqual(digest(token), this.expected)) throw errors.invalidKey();
    return this.principal;
  }
}
