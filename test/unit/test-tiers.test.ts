import { readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import t from "tap";
import { repoRoot } from "../../lib/paths.js";

// The quick tier (`npm run test:quick`, docs/testing.md) stays quick only if every end-to-end file
// that starts processes of its own (beyond a lone nats-server, which is cheap) says so with a
// `// tier: slow` or `// tier: serial` line.

const OWN_PROCESSES = /\b(startStack|startHostileStack|startClusterStack|startNetnsClusterStack|startNatsCluster|startActorHost|startGateway|startRunner|startSandboxHost|startProcess)\(/;
const TIER = /^\/\/ tier: (serial|slow) \(.+\)$/m;

function testFiles(dir: string): string[] {
  return readdirSync(join(repoRoot, dir)).flatMap((name) => {
    const rel = join(dir, name);
    if (statSync(join(repoRoot, rel)).isDirectory()) return testFiles(rel);
    return name.endsWith(".test.ts") ? [rel] : [];
  });
}

t.test("every end-to-end file that starts processes of its own is outside the quick tier, with a reason", async (t) => {
  const files = testFiles("test/e2e");
  t.ok(files.length > 50, `${files.length} end-to-end files`);
  const untiered = files.filter((f) => {
    const text = readFileSync(join(repoRoot, f), "utf8");
    return OWN_PROCESSES.test(text) && !TIER.test(text.split("\n", 40).join("\n"));
  });
  t.same(untiered, [], "add `// tier: slow (a stack of its own)` (or serial, with why) at the top of these");
});
