import { createHash, timingSafeEqual } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { randomToken } from "../../lib/ids.js";

// The admin service's token: TRIBUTARY_ADMIN_TOKEN when set (a cluster's secret), else one made
// once in $TRIBUTARY_HOME/admin-token (mode 0600), which the actor host and `tributary admin`
// on the same machine both read.

export function adminTokenPath(home: string): string {
  return join(home, "admin-token");
}

/** The configured token, else the one in TRIBUTARY_HOME (created when `create` and missing). */
export function resolveAdminToken(configured: string | undefined, home: string, create: boolean): string | undefined {
  if (configured) return configured;
  const path = adminTokenPath(home);
  if (existsSync(path)) return readFileSync(path, "utf8").trim();
  if (!create) return undefined;
  mkdirSync(dirname(path), { recursive: true });
  const token = `tadm-${randomToken(40)}`;
  try {
    writeFileSync(path, token + "\n", { mode: 0o600, flag: "wx" });
  } catch (err) {
    // Another process made it first: use theirs.
    if ((err as NodeJS.ErrnoException).code === "EEXIST") return readFileSync(path, "utf8").trim();
    throw err;
  }
  return token;
}

const digest = (s: string) => createHash("sha256").update(s).digest();

/** Constant-time comparison of a presented token with the expected one. */
export function tokenMatches(presented: string, expected: string): boolean {
  return timingSafeEqual(digest(presented), digest(expected));
}
