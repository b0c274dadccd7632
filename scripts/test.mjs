#!/usr/bin/env node
// Runs the test suite with tap, in two phases: first every file that may share the machine, up to
// TEST_JOBS at a time (default 3); then the timing-sensitive files (a `// tier: serial` line near
// their top) one at a time. Both phases use one shared stack (test/harness/shared-stack.ts), which
// lives as long as this script. Ends with tap's summary for the whole run and the slowest files.
//
// Usage: node scripts/test.mjs [--quick] [FILE...]
//   --quick  the edit-and-test loop: skips the files marked `// tier: serial` or `// tier: slow`
//   FILE     test files (dist/test/....test.js, or their test/....test.ts sources) instead of all
import { spawn } from "node:child_process";
import { existsSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const args = process.argv.slice(2);
const quick = args.includes("--quick");
const named = args.filter((a) => !a.startsWith("--"));
const unknown = args.filter((a) => a.startsWith("--") && a !== "--quick");
if (unknown.length > 0) {
  process.stderr.write(`unknown option ${unknown[0]}\nusage: node scripts/test.mjs [--quick] [FILE...]\n`);
  process.exit(2);
}
const jobs = Number(process.env.TEST_JOBS ?? 3);
const SLOWEST = 20;

/** Every compiled test file under dir, relative to the repository, sorted as tap sorts them. */
function testFiles(dir) {
  const out = [];
  for (const entry of readdirSync(join(root, dir), { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) out.push(...testFiles(path));
    else if (entry.name.endsWith(".test.js")) out.push(path);
  }
  return out.sort((a, b) => a.localeCompare(b, "en"));
}

/** dist/test/x.test.js for a compiled file or its test/x.test.ts source. */
const compiled = (file) => relative(root, join(root, file)).replace(/^test\/(.*)\.ts$/, "dist/test/$1.js");
const source = (file) => file.replace(/^dist\/(test\/.*)\.js$/, "$1.ts");

/** The file's tier from a `// tier: serial|slow` line near its top ("parallel" without one). */
function tierOf(file) {
  const src = join(root, source(file));
  if (!existsSync(src)) return "parallel";
  const head = readFileSync(src, "utf8").split("\n", 40);
  const line = head.find((l) => /^\/\/ tier: /.test(l));
  return line ? line.slice("// tier: ".length).split(/\s/)[0] : "parallel";
}

const files = named.length > 0 ? named.map(compiled) : testFiles("dist/test");
for (const f of files) if (!existsSync(join(root, f))) {
  process.stderr.write(`no such test file: ${f} (run npm run build first?)\n`);
  process.exit(2);
}
const tiers = new Map(files.map((f) => [f, tierOf(f)]));
const chosen = quick ? files.filter((f) => tiers.get(f) === "parallel") : files;
const serial = chosen.filter((f) => tiers.get(f) === "serial");
const parallel = chosen.filter((f) => tiers.get(f) !== "serial");

// Each file's result lands in .tap/test-results; stale ones would mislead the slowest-files list.
rmSync(join(root, ".tap", "test-results"), { recursive: true, force: true });

const totals = { total: 0, pass: 0, fail: 0, todo: 0, skip: 0 };
let failed = false;

/** Runs tap on `list` with `jobCount` files at a time; adds its summary to the totals. */
function tap(list, jobCount) {
  if (list.length === 0) return Promise.resolve();
  return new Promise((resolve) => {
    const child = spawn(join(root, "node_modules", ".bin", "tap"), [`--jobs=${jobCount}`, ...list], {
      cwd: root,
      stdio: ["inherit", "pipe", "inherit"],
      // The shared test stack lives as long as this script, across both phases.
      env: { ...process.env, TRIBUTARY_TEST_STACK_OWNER: String(process.pid) },
    });
    let tail = "";
    child.stdout.on("data", (chunk) => {
      process.stdout.write(chunk);
      tail = (tail + chunk.toString()).slice(-4096);
    });
    child.on("exit", (code, signal) => {
      if (code !== 0) failed = true;
      const summary = /# \{ ([^}]*) \}/.exec(tail.slice(tail.lastIndexOf("# {")));
      if (summary) for (const [, k, v] of summary[1].matchAll(/(\w+): (\d+)/g)) if (k in totals) totals[k] += Number(v);
      if (signal) failed = true;
      resolve();
    });
  });
}

const began = Date.now();
process.stdout.write(`# ${parallel.length} test files, ${jobs} at a time${serial.length ? `; then ${serial.length} one at a time` : ""}\n`);
await tap(parallel, jobs);
await tap(serial, 1);

// The slowest files, from the time tap recorded at the end of each file's results.
const resultsDir = join(root, ".tap", "test-results");
const times = [];
const walk = (dir) => {
  if (!existsSync(dir)) return;
  for (const entry of readdirSync(dir)) {
    const path = join(dir, entry);
    if (statSync(path).isDirectory()) walk(path);
    else {
      const m = /# time=([\d.]+)ms\s*$/.exec(readFileSync(path, "utf8"));
      if (m) times.push([relative(resultsDir, path).replace(/\.tap$/, ""), Number(m[1]) / 1000]);
    }
  }
};
walk(resultsDir);
times.sort((a, b) => b[1] - a[1]);
process.stdout.write(`\n# the ${Math.min(SLOWEST, times.length)} slowest test files\n`);
for (const [file, seconds] of times.slice(0, SLOWEST)) process.stdout.write(`#   ${seconds.toFixed(1).padStart(6)} s  ${file}\n`);
process.stdout.write(`# the whole run: ${((Date.now() - began) / 1000).toFixed(0)} s\n`);
// One summary line for the whole run, in tap's own form (.ci/run reads it).
process.stdout.write(`# { total: ${totals.total}, pass: ${totals.pass}${totals.fail ? `, fail: ${totals.fail}` : ""} }\n`);
process.exit(failed || totals.fail > 0 ? 1 : 0);
