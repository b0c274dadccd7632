import t from "tap";
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import * as Option from "effect/Option";
import * as config from "../../lib/config.js";
import { repoRoot } from "../../lib/paths.js";

// docs/configuration.md is generated from lib/config.ts (scripts/config-doc.mjs): the page, every
// variable the code reads, and the defaults the code really uses must agree.

interface Variable {
  name: string;
  field: string;
  default: string | number | undefined;
  meaning: string;
}
interface Section {
  name: string;
  title: string;
  variables: Variable[];
}
interface ConfigDoc {
  renderConfigDoc(source: string): string;
  parseConfig(source: string): Section[];
}

const REGENERATE = "docs/configuration.md differs from lib/config.ts: regenerate it with `node scripts/config-doc.mjs` (edit the comments in lib/config.ts, not the page)";
const generator = (await import(pathToFileURL(join(repoRoot, "scripts", "config-doc.mjs")).href)) as ConfigDoc;
const source = readFileSync(join(repoRoot, "lib", "config.ts"), "utf8");
const page = readFileSync(join(repoRoot, "docs", "configuration.md"), "utf8");

t.test("docs/configuration.md is the page lib/config.ts renders", async (t) => {
  t.equal(page, generator.renderConfigDoc(source), REGENERATE);
});

t.test("every variable lib/config.ts names has one row", async (t) => {
  const named = [...new Set([...source.matchAll(/"([A-Z][A-Z0-9]*_[A-Z0-9_]*)"/g)].map((m) => m[1]!))].sort();
  const rows = [...page.matchAll(/^\| `([A-Z0-9_]+)` \|/gm)].map((m) => m[1]!);
  t.same([...rows].sort(), named, "the page's rows are the variables of the code");
  t.equal(new Set(rows).size, rows.length, "each variable once");
});

t.test("the defaults the page shows are the ones the code reads from an empty environment", async (t) => {
  const exported = config as unknown as Record<string, unknown>;
  let checked = 0;
  for (const section of generator.parseConfig(source)) {
    const read = config.readConfig(exported[section.name] as Parameters<typeof config.readConfig>[0], {}) as Record<string, unknown>;
    for (const v of section.variables) {
      const raw = read[v.field];
      const actual = Option.isOption(raw) ? Option.getOrUndefined(raw) : raw;
      // Paths are read relative to the repository and shown relative to it.
      const shown = v.name === "TRIBUTARY_HOME" || v.name === "TRIBUTARY_CATALOG" ? resolve(repoRoot, String(v.default)) : v.default;
      t.same(actual, shown, `${v.name}: the page's default is the code's (else: node scripts/config-doc.mjs)`);
      checked++;
    }
  }
  t.ok(checked > 150, `${checked} defaults checked`);
});
