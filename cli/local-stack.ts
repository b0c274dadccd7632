import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { randomToken } from "../lib/ids.js";

/** The key a local stack accepts when TRIBUTARY_API_KEY is unset: made once, kept in TRIBUTARY_HOME. */
export function localApiKey(home: string): string {
  const path = join(home, "api-key");
  if (existsSync(path)) return readFileSync(path, "utf8").trim();
  mkdirSync(dirname(path), { recursive: true });
  const key = `sk-local-${randomToken(32)}`;
  writeFileSync(path, key + "\n", { mode: 0o600 });
  return key;
}
