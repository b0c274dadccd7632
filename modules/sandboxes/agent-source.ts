import { readFileSync } from "node:fs";

// The agent that runs inside every sandbox as its first process: agent.py beside this file (in
// the source tree: dist/ holds compiled TypeScript only), read once when the module loads.
export const AGENT_PATH = new URL("../../../modules/sandboxes/agent.py", import.meta.url);
export const AGENT_SOURCE = readFileSync(AGENT_PATH, "utf8");
