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

export const LOCAL_PRINCIPAL: Principal = { organizationId: "org-local", projectId: "proj-local", keyId: "key-static" };

/**
 * Accepts the keys given in configuration: TRIBUTARY_API_KEY (project `proj-local`), and
 * optionally more keys each mapped to its own project (TRIBUTARY_API_KEYS="key1=proj_a,key2=proj_b"),
 * which is how tests check that projects do not see each other's files and batches.
 */
export class StaticKeyAuthenticator implements Authenticator {
  private readonly keys: Array<{ digest: Buffer; principal: Principal }>;

  constructor(key: string, principal: Principal = LOCAL_PRINCIPAL, extra: ReadonlyArray<{ key: string; projectId: string }> = []) {
    this.keys = [
      { digest: digest(key), principal },
      ...extra.map((e, i) => ({ digest: digest(e.key), principal: { organizationId: principal.organizationId, projectId: e.projectId, keyId: `key-static-${i + 1}` } })),
    ];
  }

  authenticate(authorization: string | undefined): Principal {
    const token = digest(bearerToken(authorization));
    // Every key is compared (in constant time each), so timing does not tell which one matched.
    let found: Principal | undefined;
    for (const k of this.keys) if (timingSafeEqual(token, k.digest)) found ??= k.principal;
    if (!found) throw errors.invalidKey();
    return found;
  }
}

/** Parses TRIBUTARY_API_KEYS: "key1=proj_a,key2=proj_b". */
export function parseExtraKeys(value: string): Array<{ key: string; projectId: string }> {
  return value
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean)
    .map((pair) => {
      const at = pair.lastIndexOf("=");
      if (at <= 0 || at === pair.length - 1) throw new Error(`TRIBUTARY_API_KEYS: expected key=project, got '${pair.slice(0, 6)}...'`);
      return { key: pair.slice(0, at), projectId: pair.slice(at + 1) };
    });
}
