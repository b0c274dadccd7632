import { readFileSync } from "node:fs";

// The program every app instance runs: launcher.py beside this file (in the source tree: dist/
// holds compiled TypeScript only), read once when the module loads.
export const LAUNCHER_PATH = new URL("../../../modules/apps/launcher.py", import.meta.url);
export const LAUNCHER_SOURCE = readFileSync(LAUNCHER_PATH, "utf8");
