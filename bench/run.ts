// Runs every benchmark scenario in turn (npm run bench). Each writes its table under bench/results/.
import { spawnSync } from "node:child_process";
import { readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
// cluster.js is not a scenario: it runs a cluster until Ctrl-C, for trying failures by hand.
const scenarios = readdirSync(here).filter((f) => f.endsWith(".js") && f !== "run.js" && f !== "cluster.js").sort();
const only = process.argv.slice(2);
let failed = 0;
for (const file of scenarios) {
  if (only.length > 0 && !only.some((o) => file.startsWith(o))) continue;
  process.stderr.write(`\n=== ${file} ===\n`);
  const r = spawnSync(process.execPath, [join(here, file)], { stdio: "inherit" });
  if (r.status !== 0) failed++;
}
process.exit(failed > 0 ? 1 : 0);
