import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** The Tributary installation root (where package.json is). Code runs compiled from dist/lib. */
export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
