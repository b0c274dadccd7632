import t from "tap";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { repoRoot } from "../../lib/paths.js";

// Every relative link of the README and the docs leads to a file that exists and, when it names
// one, to a heading of that file: pages that link to each other instead of repeating a fact must
// not lose each other when one is edited.

const pages = ["README.md", "bench/README.md", "k8s/README.md", ...readdirSync(join(repoRoot, "docs")).filter((f) => f.endsWith(".md")).map((f) => `docs/${f}`)];

/** GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens. */
const anchorOf = (heading: string) =>
  heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N} _-]/gu, "")
    .replace(/ /g, "-");

function anchorsOf(path: string): Set<string> {
  const text = readFileSync(path, "utf8").replace(/```[\s\S]*?```/g, "");
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const m of text.matchAll(/^#{1,6} (.+)$/gm)) {
    const base = anchorOf(m[1]!);
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  return out;
}

for (const page of pages) {
  t.test(page, async (t) => {
    const text = readFileSync(join(repoRoot, page), "utf8").replace(/```[\s\S]*?```/g, "");
    const broken: string[] = [];
    for (const m of text.matchAll(/\]\(([^)\s]+)\)/g)) {
      const target = m[1]!;
      if (/^[a-z]+:/.test(target)) continue; // http:, https:, mailto:
      const [file, anchor] = target.split("#") as [string, string | undefined];
      const path = file === "" ? join(repoRoot, page) : resolve(dirname(join(repoRoot, page)), file);
      if (!existsSync(path)) {
        broken.push(`${target}: no such file (${relative(repoRoot, path)})`);
        continue;
      }
      if (anchor && statSync(path).isFile() && path.endsWith(".md") && !anchorsOf(path).has(anchor)) broken.push(`${target}: no heading "${anchor}" in ${relative(repoRoot, path)}`);
    }
    t.same(broken, [], "every relative link leads to a file and heading that exist");
  });
}
