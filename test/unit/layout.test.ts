import { readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, normalize, relative } from "node:path";
import t from "tap";
import { repoRoot } from "../../lib/paths.js";

// The layout rules of docs/architecture.md ("Code layout"), checked on the TypeScript sources:
//   - process shells (gateway, actors, runners, cli) import no other shell;
//   - shared modules (modules/*) and lib/ import no shell: nothing imports upward;
//   - lib/ imports no domain module;
//   - a module is entered through its mod.ts only.

const SHELLS = ["gateway", "actors", "runners", "sandbox-host", "cli"];
const SOURCE_ROOTS = [...SHELLS, "modules", "lib"];

function sources(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(join(repoRoot, dir))) {
    const rel = join(dir, name);
    if (statSync(join(repoRoot, rel)).isDirectory()) out.push(...sources(rel));
    else if (name.endsWith(".ts")) out.push(rel);
  }
  return out;
}

interface Edge {
  from: string;
  to: string;
}

function importsOf(file: string): Edge[] {
  const text = readFileSync(join(repoRoot, file), "utf8");
  const edges: Edge[] = [];
  for (const m of text.matchAll(/(?:from|import)\s*\(?\s*"(\.{1,2}\/[^"]+)"/g))
    edges.push({ from: file, to: normalize(join(dirname(file), m[1]!)).replace(/\.js$/, ".ts") });
  return edges;
}

const top = (path: string) => path.split("/")[0]!;
const moduleOf = (path: string) => (top(path) === "modules" ? path.split("/")[1] : undefined);

const edges = SOURCE_ROOTS.flatMap(sources).flatMap(importsOf);

t.test("the sources were found", async (t) => {
  t.ok(edges.length > 300, `${edges.length} imports read`);
  t.ok(edges.some((e) => top(e.from) === "gateway" && moduleOf(e.to) === "inference"), "the gateway imports the inference module");
});

t.test("no process shell imports another", async (t) => {
  const bad = edges.filter((e) => SHELLS.includes(top(e.from)) && SHELLS.includes(top(e.to)) && top(e.from) !== top(e.to));
  t.same(bad, [], "shell -> other shell");
});

t.test("shared modules and lib import no process shell", async (t) => {
  const bad = edges.filter((e) => (top(e.from) === "modules" || top(e.from) === "lib") && SHELLS.includes(top(e.to)));
  t.same(bad, [], "module or lib -> shell");
});

t.test("lib imports no domain module", async (t) => {
  const bad = edges.filter((e) => top(e.from) === "lib" && top(e.to) === "modules");
  t.same(bad, [], "lib -> modules");
});

t.test("modules are entered through their mod.ts", async (t) => {
  const bad = edges.filter((e) => {
    const target = moduleOf(e.to);
    if (!target || moduleOf(e.from) === target) return false;
    return relative(join("modules", target), e.to) !== "mod.ts";
  });
  t.same(bad, [], "import of a module's internal file from outside it");
});

t.test("every module has a mod.ts", async (t) => {
  for (const name of readdirSync(join(repoRoot, "modules")))
    t.ok(statSync(join(repoRoot, "modules", name, "mod.ts"), { throwIfNoEntry: false })?.isFile(), `modules/${name}/mod.ts`);
});

t.test("HTTP statuses are chosen only at the edge: the gateway, and the one error mapping", async (t) => {
  // Numbers where a status is set or compared; the runner's probe server, its Hugging Face client and the
  // naming of that client's failures speak HTTP themselves.
  const statusLike = /\b(?:status(?:Code)?|status_code)\s*(?:===|!==|==|=|:)\s*[1-5]\d\d\b|\bnew\s+\w*Error\(\s*[1-5]\d\d\s*,/;
  const allowed = new Set(["modules/openai/error-body.ts", "modules/openai/batch-lines.ts", "runners/health-server.ts", "runners/engines/llama/model-source.ts", "modules/catalog/model-file-failure.ts"]);
  const offenders: string[] = [];
  for (const file of ["modules", "actors", "runners", "sandbox-host", "lib", "cli"].flatMap(sources)) {
    if (allowed.has(file)) continue;
    readFileSync(join(repoRoot, file), "utf8")
      .split("\n")
      .forEach((line, i) => {
        if (statusLike.test(line.replace(/\/\/.*$/, ""))) offenders.push(`${file}:${i + 1}: ${line.trim()}`);
      });
  }
  t.same(offenders, [], "status numbers outside the edge");
});

t.test("environment variables are read in lib/config.ts only, and each is in docs/configuration.md", async (t) => {
  // Passing the whole environment on to a child process is not reading a variable.
  const reads = /process\.env\s*(?:\.\s*\w|\[)|\bConfig\.\w+\(\s*"/;
  const offenders: string[] = [];
  for (const file of SOURCE_ROOTS.flatMap(sources)) {
    if (file === "lib/config.ts") continue;
    readFileSync(join(repoRoot, file), "utf8")
      .split("\n")
      .forEach((line, i) => {
        if (reads.test(line)) offenders.push(`${file}:${i + 1}: ${line.trim()}`);
      });
  }
  t.same(offenders, [], "environment reads outside lib/config.ts");

  const config = readFileSync(join(repoRoot, "lib/config.ts"), "utf8");
  const names = [...new Set([...config.matchAll(/"((?:TRIBUTARY|NATS|HF)_[A-Z_]+)"/g)].map((m) => m[1]!))];
  t.ok(names.length > 40, `${names.length} variables in lib/config.ts`);
  const page = readFileSync(join(repoRoot, "docs", "configuration.md"), "utf8");
  t.same(names.filter((n) => !page.includes("`" + n + "`")), [], "variables missing from docs/configuration.md (node scripts/config-doc.mjs)");
});
