import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { randomToken } from "../lib/ids.js";

// What a local stack keeps in TRIBUTARY_HOME for the commands that call it: its key, and while
// `tributary start` runs, its gateway's address (the port is not known before the gateway
// listens: TRIBUTARY_PORT=0, or `--port`).

export const apiKeyFile = (home: string) => join(home, "api-key");
export const gatewayUrlFile = (home: string) => join(home, "gateway-url");

/** The key a local stack accepts when TRIBUTARY_API_KEY is unset: made once, kept in TRIBUTARY_HOME. */
export function localApiKey(home: string): string {
  const path = apiKeyFile(home);
  if (existsSync(path)) return readFileSync(path, "utf8").trim();
  mkdirSync(dirname(path), { recursive: true });
  const key = `sk-local-${randomToken(32)}`;
  writeFileSync(path, key + "\n", { mode: 0o600 });
  return key;
}

/** The local stack's key, if one was made in `home` (a client never makes one). */
export function recordedApiKey(home: string): string | undefined {
  return readIfThere(apiKeyFile(home));
}

/** Records where the local stack's gateway listens (written whole: a reader never sees half of it). */
export function recordGatewayUrl(home: string, url: string): void {
  const path = gatewayUrlFile(home);
  mkdirSync(home, { recursive: true });
  writeFileSync(`${path}.${process.pid}`, url + "\n");
  renameSync(`${path}.${process.pid}`, path);
}

/** Forgets it once the stack stopped: a client then says nothing runs rather than calling a dead port. */
export function forgetGatewayUrl(home: string): void {
  rmSync(gatewayUrlFile(home), { force: true });
}

/** The address a running local stack recorded in `home`, if any. */
export function recordedGatewayUrl(home: string): string | undefined {
  return readIfThere(gatewayUrlFile(home));
}

function readIfThere(path: string): string | undefined {
  try {
    return readFileSync(path, "utf8").trim() || undefined;
  } catch {
    return undefined;
  }
}
