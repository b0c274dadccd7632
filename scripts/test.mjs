#!/usr/bin/env node
// Runs the test suite: every test file (tap tests, compiled under dist/test/) in a process of its
// own, but the unit tests (test/unit/), which run together in one (scripts/unit-group.mjs), in two
// phases. First every file that may share the machine, TEST_JOBS at a time (default 3); then the timing-sensitive files (a `// tier: serial` line near their top), TEST_SERIAL_JOBS
// at a time (default 2: never more than one other file beside each; the first of them start as
// the last parallel files end). Both phases use one shared stack (test/harness/shared-stack.ts),
// which lives as long as this script.
// Each file's TAP output is kept in .tap/test-results/; a failing file's is printed. Ends with the
// slowest files and one summary line for the run, in tap's own form.
//
// Files run under plain node rather than tap's runner: the runner loads its process-info hooks
// into every test process (for coverage, which the suite does not collect), and they made each
// file's start 2-3 times slower. The files still use tap, and `npx tap FILE` still runs one.
//
// Usage: node scripts/test.mjs [--quick] [FILE...]
//   --quick  the edit-and-test loop: skips the files marked `// tier: serial` or `// tier: slow`
//   FILE     test files (dist/test/....test.js, or their test/....test.ts sources) instead of all
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const usage = "usage: node scripts/test.mjs [--quick] [FILE...]";
const args = process.argv.slice(2);
const quick = args.includes("--quick");
const named = args.filter((a) => !a.startsWith("--"));
const unknown = args.find((a) => a.startsWith("--") && a !== "--quick");
if (unknown) {
  process.stderr.write(`unknown option ${unknown}\n${usage}\n`);
  process.exit(2);
}
const jobs = Math.max(1, Number(process.env.TEST_JOBS ?? 3) || 1);
const serialJobs = Math.max(1, Number(process.env.TEST_SERIAL_JOBS ?? 2) || 1);
/** TEST_CPU=1: each file's CPU time (its own and its children's) beside its wall time, for profiling. */
const measureCpu = process.env.TEST_CPU === "1" && existsSync("/usr/bin/time");
/** Seconds a file may run (tap's own timeout, in package.json); then it is killed. */
const timeoutSeconds = Number(JSON.parse(readFileSync(join(root, "package.json"), "utf8")).tap?.timeout ?? 240);
const SLOWEST = 20;
const resultsDir = join(root, ".tap", "test-results");

/**
 * Every compiled test file under dir whose source is still there, relative to the repository,
 * sorted. tsc leaves the output of a test file deleted or renamed since the last build in dist/,
 * and it would run (or fail) with the others.
 */
function testFiles(dir) {
  const out = [];
  for (const entry of readdirSync(join(root, dir), { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) out.push(...testFiles(path));
    else if (entry.name.endsWith(".test.js") && existsSync(join(root, source(path)))) out.push(path);
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
  const line = readFileSync(src, "utf8").split("\n", 40).find((l) => l.startsWith("// tier: "));
  return line ? line.slice("// tier: ".length).split(/\s/)[0] : "parallel";
}

const files = named.length > 0 ? named.map(compiled) : testFiles("dist/test");
for (const f of files)
  if (!existsSync(join(root, f))) {
    process.stderr.write(`no such test file: ${f} (run npm run build first?)\n`);
    process.exit(2);
  }
const tiers = new Map(files.map((f) => [f, tierOf(f)]));
const chosen = quick ? files.filter((f) => tiers.get(f) === "parallel") : files;
const serial = chosen.filter((f) => tiers.get(f) === "serial");
/**
 * The unit test files run together, in one process (scripts/unit-group.mjs): they start no stack,
 * and a process of its own for each cost more than the tests. Reported as one entry.
 */
const UNIT_DIR = "dist/test/unit/";
const UNIT_GROUP = "dist/test/unit (every file in one process)";
const unitFiles = chosen.filter((f) => f.startsWith(UNIT_DIR));
// Unit tests first: they need no stack, and run while the shared one starts. Then the slow files
// (most start a stack of their own), so that the long ones do not end the phase alone.
const rank = (f) => (f.startsWith("dist/test/e2e/") ? (tiers.get(f) === "slow" ? 1 : 2) : 0);
const parallel = [
  ...(unitFiles.length > 0 ? [UNIT_GROUP] : []),
  ...chosen.filter((f) => tiers.get(f) !== "serial" && !f.startsWith(UNIT_DIR)).sort((a, b) => rank(a) - rank(b)),
];

rmSync(resultsDir, { recursive: true, force: true });
const totals = { total: 0, pass: 0, fail: 0, todo: 0, skip: 0 };
const times = [];
const failedFiles = [];
let done = 0;
const count = parallel.length + serial.length;


/** Runs one test file (or the unit group) to its end; records its summary, time and output. */
function runFile(file, groupFiles = []) {
  return new Promise((resolve) => {
    const began = performance.now();
    const argv = groupFiles.length > 0
      ? [process.execPath, "--enable-source-maps", join(root, "scripts", "unit-group.mjs")]
      : [process.execPath, "--enable-source-maps", join(root, file)];
    if (measureCpu) argv.unshift("/usr/bin/time", "-f", "# cpu %U user %S sys");
    const child = spawn(argv[0], argv.slice(1), {
      cwd: root,
      stdio: ["ignore", "pipe", "pipe"],
      // The shared test stack lives as long as this script, across both phases.
      env: { ...process.env, TAP_TIMEOUT: String(timeoutSeconds), TRIBUTARY_TEST_STACK_OWNER: String(process.pid), TEST_GROUP_FILES: groupFiles.map((f) => join(root, f)).join("\n") },
    });
    const output = [];
    child.stdout.on("data", (chunk) => output.push(chunk));
    child.stderr.on("data", (chunk) => output.push(chunk));
    // tap ends a file at its timeout itself; this is for a file that does not end even then.
    const killer = setTimeout(() => child.kill("SIGKILL"), (timeoutSeconds + 30) * 1000);
    child.on("close", (code, signal) => {
      clearTimeout(killer);
      const seconds = (performance.now() - began) / 1000;
      const text = Buffer.concat(output).toString("utf8");
      const resultFile = groupFiles.length > 0 ? `${UNIT_DIR}all` : file;
      mkdirSync(dirname(join(resultsDir, resultFile)), { recursive: true });
      writeFileSync(join(resultsDir, `${resultFile}.tap`), text);
      // The file's own summary: tap's last `# { total: N, pass: N, ... }` line.
      const summary = [...text.matchAll(/^# \{ ([^}]*) \}$/gm)].at(-1)?.[1];
      const counts = Object.fromEntries([...(summary ?? "").matchAll(/(\w+): (\d+)/g)].map(([, k, v]) => [k, Number(v)]));
      for (const k of Object.keys(totals)) totals[k] += counts[k] ?? 0;
      const ok = code === 0 && summary !== undefined;
      if (!ok) {
        failedFiles.push(file);
        // A file that ended without its summary (a crash, a kill) counts as one failure.
        if (!counts.fail) totals.fail += 1;
        process.stdout.write(`\n# ${file} failed (${signal ?? `exit code ${code}`}); its output:\n${text}\n`);
      }
      const cpu = /^# cpu ([\d.]+) user ([\d.]+) sys$/m.exec(text);
      times.push([file, seconds, cpu ? Number(cpu[1]) + Number(cpu[2]) : undefined]);
      done++;
      process.stdout.write(`${ok ? "ok" : "not ok"} ${done}/${count} - ${file} # time=${seconds.toFixed(1)}s${counts.total !== undefined ? `, ${counts.pass ?? 0}/${counts.total} asserts` : ""}\n`);
      resolve();
    });
  });
}

/**
 * Runs every file: `parallel` ones `jobs` at a time, then `serial` ones `serialJobs` at a time.
 * A serial file starts only when at most `serialJobs - 1` other files run (so it never shares the
 * machine with more than that), which lets the first serial files start beside the last parallel
 * ones instead of after them.
 */
async function schedule(parallel, serial) {
  const waiting = [...parallel];
  const waitingSerial = [...serial];
  let running = 0;
  let serialRunning = 0;
  await new Promise((resolve) => {
    const next = () => {
      while (waiting.length > 0 && running < jobs) start(waiting.shift(), false);
      while (waiting.length === 0 && waitingSerial.length > 0 && serialRunning < serialJobs && running < serialJobs) start(waitingSerial.shift(), true);
      if (running === 0) resolve();
    };
    const start = (file, isSerial) => {
      running++;
      if (isSerial) serialRunning++;
      runFile(file, file === UNIT_GROUP ? unitFiles : []).then(() => {
        running--;
        if (isSerial) serialRunning--;
        next();
      });
    };
    next();
  });
}

const began = Date.now();
// The shared stack starts at once, while the first files (the unit tests) run.
if (chosen.some((f) => f.startsWith("dist/test/e2e/"))) {
  const { startSharedStack } = await import(join(root, "dist", "test", "harness", "shared-stack.js"));
  startSharedStack(process.pid);
}
process.stdout.write(`# ${unitFiles.length > 0 ? `${unitFiles.length} unit test files in one process, ` : ""}${parallel.length - (unitFiles.length > 0 ? 1 : 0)} more test files, ${jobs} at a time${serial.length ? `; then ${serial.length} timing-sensitive ones, ${serialJobs} at a time` : ""}\n`);
await schedule(parallel, serial);

times.sort((a, b) => b[1] - a[1]);
process.stdout.write(`\n# the ${Math.min(SLOWEST, times.length)} slowest test files\n`);
for (const [file, seconds, cpu] of times.slice(0, SLOWEST))
  process.stdout.write(`#   ${seconds.toFixed(1).padStart(6)} s  ${cpu === undefined ? "" : `(${cpu.toFixed(1)} s cpu)  `}${file}\n`);
if (measureCpu) {
  const byCpu = times.filter((t) => t[2] !== undefined).sort((a, b) => b[2] - a[2]);
  process.stdout.write(`# cpu in all: ${byCpu.reduce((n, t) => n + t[2], 0).toFixed(0)} s; the most:\n`);
  for (const [file, , cpu] of byCpu.slice(0, 30)) process.stdout.write(`#   ${cpu.toFixed(1).padStart(6)} s cpu  ${file}\n`);
}
process.stdout.write(`# the whole run: ${((Date.now() - began) / 1000).toFixed(0)} s\n`);
if (failedFiles.length > 0) process.stdout.write(`# failed: ${failedFiles.join(", ")}\n`);
// One summary line for the whole run, in tap's own form (.ci/run reads it).
const extra = ["fail", "todo", "skip"].filter((k) => totals[k] > 0).map((k) => `, ${k}: ${totals[k]}`).join("");
process.stdout.write(`# { total: ${totals.total}, pass: ${totals.pass}${extra} }\n`);
process.exit(failedFiles.length > 0 ? 1 : 0);
