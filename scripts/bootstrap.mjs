#!/usr/bin/env node
// Makes a fresh checkout runnable, using only Node's standard library:
//   1. npm dependencies (npm ci when node_modules is missing or older than package-lock.json);
//   2. the TypeScript build (incremental: quick when nothing changed);
//   3. nats-server, unless NATS_URL points at an existing server, and the Debian tools the stack
//      and the tests use (apt-get when root on Debian, otherwise a message saying what to install);
//   4. with TRIBUTARY_LLAMA_SOURCE_BUILD=on, node-llama-cpp's CPU library built from the llama.cpp
//      source it bundles (OpenMP, this CPU's instruction set), cached in $TRIBUTARY_HOME.
// Usage: node scripts/bootstrap.mjs [--for-tests]
import { execFileSync, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { cpSync, existsSync, readFileSync, renameSync, rmSync, statSync } from "node:fs";
import { cpus } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const forTests = process.argv.includes("--for-tests");
const say = (msg) => process.stderr.write(`[bootstrap] ${msg}\n`);

function fail(msg) {
  say(msg);
  process.exit(1);
}

function run(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { cwd: root, stdio: "inherit", ...opts });
  if (r.status !== 0) fail(`${cmd} ${args.join(" ")} failed (exit ${r.status})`);
}

function onPath(cmd) {
  return spawnSync("sh", ["-c", `command -v ${cmd}`], { stdio: "ignore" }).status === 0;
}

const [major] = process.versions.node.split(".").map(Number);
if (major < 20) fail(`Node.js 20 or newer is required (this is ${process.version})`);

const lock = join(root, "package-lock.json");
const installed = join(root, "node_modules", ".package-lock.json");
if (!existsSync(installed) || statSync(installed).mtimeMs < statSync(lock).mtimeMs) {
  say("installing npm dependencies (npm ci)");
  run("npm", ["ci", "--no-audit", "--no-fund"]);
}

run(join(root, "node_modules", ".bin", "tsc"), ["-p", "."]);

// tap compiles its plugin set into node_modules; npm ci restores the default set, which loads a
// TypeScript transpiler and plugins the tests do not use (package.json's tap.plugin drops them:
// each costs every test file's start).
if (forTests) {
  const built = join(root, "node_modules", "@tapjs", "test", "test-built", "dist", "esm", "index.js");
  const dropped = JSON.parse(readFileSync(join(root, "package.json"), "utf8")).tap.plugin.filter((p) => p.startsWith("!")).map((p) => p.slice(1));
  if (!existsSync(built) || dropped.some((plugin) => readFileSync(built, "utf8").includes(`"${plugin}"`))) {
    say("building tap's plugin set (tap build)");
    run(join(root, "node_modules", ".bin", "tap"), ["build"]);
  }
}

const apt = (packages) => {
  if (process.getuid?.() !== 0 || !onPath("apt-get")) return false;
  say(`installing ${packages.join(", ")} with apt-get`);
  run("apt-get", ["update", "-qq"], { env: { ...process.env, DEBIAN_FRONTEND: "noninteractive" } });
  run("apt-get", ["install", "-y", "-qq", ...packages], { env: { ...process.env, DEBIAN_FRONTEND: "noninteractive" } });
  return true;
};

const needNats = forTests || !process.env.NATS_URL;
if (needNats && !onPath("nats-server") && !apt(["nats-server"]))
  fail("nats-server is not installed. On Debian/Ubuntu: sudo apt-get install nats-server; elsewhere see https://docs.nats.io/running-a-nats-service/introduction/installation (or set NATS_URL to an existing server)");
if (needNats) {
  const version = execFileSync("nats-server", ["--version"], { encoding: "utf8" }).trim();
  if (forTests) say(`using ${version}`);
}

function pythonHas(python, module) {
  try {
    execFileSync(python, ["-c", `import ${module}`], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
}

// Debian's tools the stack runs (the sandbox host: bubblewrap, prlimit and setpriv, Python for
// its in-sandbox agent, slirp4netns for sandboxes with network egress) and the ones the tests drive (a real Prometheus scrapes /metrics,
// Chromium opens the dashboard, kubectl renders k8s/): [command, package].
const tools = [["bwrap", "bubblewrap"], ["setpriv", "util-linux"], ["python3", "python3"], ["slirp4netns", "slirp4netns"]];
if (forTests) tools.push(["chromium", "chromium"], ["prometheus", "prometheus"], ["kubectl", "kubernetes-client"]);
const missing = tools.filter(([cmd]) => !onPath(cmd)).map(([, pkg]) => pkg);
// Hosted apps run on Debian's uvicorn, imported by Debian's Python (not a command on PATH).
if (!pythonHas("/usr/bin/python3", "uvicorn")) missing.push("python3-uvicorn");
if (missing.length > 0 && !apt(missing)) {
  const what = `missing: ${missing.join(", ")} (Debian/Ubuntu: sudo apt-get install ${missing.join(" ")})`;
  if (forTests) fail(`the tests need Debian's tools: ${what}`);
  say(`sandboxes are unavailable until these are installed: ${what}`);
}

// node-llama-cpp's prebuilt CPU library is built without OpenMP: it starts its worker threads at
// every decode step and spins at every barrier, so `threads` > 1 collapses on a busy machine.
// Built from its bundled source (offline: the source ships as a git bundle) it uses OpenMP's
// persistent, oversubscription-aware thread pool. node-llama-cpp loads a local build in
// preference to the prebuilt one (getLlama with build "never" looks in llama/localBuilds first).
// The build takes tens of minutes on 2 cores, so it is opt-in and cached outside node_modules
// (npm ci empties it), keyed by node-llama-cpp's version and this CPU (it is built for its
// instruction set).
const { readConfig, bootstrapConfig, commonConfig } = await import(pathToFileURL(join(root, "dist", "lib", "config.js")).href);
if (readConfig(bootstrapConfig).llamaSourceBuild === "on") llamaSourceBuild(readConfig(commonConfig).home);

function llamaSourceBuild(home) {
  const nlc = join(root, "node_modules", "node-llama-cpp");
  const version = JSON.parse(readFileSync(join(nlc, "package.json"), "utf8")).version;
  const platform = { darwin: "mac", win32: "win" }[process.platform] ?? process.platform;
  const folder = `${platform}-${process.arch}`;
  const target = join(nlc, "llama", "localBuilds", folder);
  const cpuInfo = existsSync("/proc/cpuinfo") ? readFileSync("/proc/cpuinfo", "utf8").match(/^flags\s*:.*$/m)?.[0] ?? "" : "";
  const cpuKey = createHash("sha256").update(`${cpus()[0]?.model}\n${cpuInfo}`).digest("hex").slice(0, 12);
  const cache = join(home, "llama-builds", `node-llama-cpp-${version}-${folder}-${cpuKey}`);
  const built = () => existsSync(join(target, "Release", "llama-addon.node"));
  const keep = () => {
    if (existsSync(cache)) return;
    const partial = `${cache}.partial-${process.pid}`;
    cpSync(target, partial, { recursive: true });
    renameSync(partial, cache);
  };
  if (built()) return keep();
  if (existsSync(cache)) {
    say(`node-llama-cpp: using the cached source build ${cache}`);
    rmSync(target, { recursive: true, force: true });
    cpSync(cache, target, { recursive: true });
    return;
  }
  if (!onPath("cmake") || !(onPath("c++") || onPath("g++"))) {
    say("TRIBUTARY_LLAMA_SOURCE_BUILD=on, but cmake or a C++ compiler is missing (Debian: apt-get install cmake g++): using node-llama-cpp's prebuilt library (run runners with threads 1)");
    return;
  }
  say("building node-llama-cpp's CPU library from its bundled llama.cpp source (once; tens of minutes on 2 cores)");
  const started = Date.now();
  // `source download` clones the bundled git bundle (no network) and builds it.
  const r = spawnSync(join(root, "node_modules", ".bin", "node-llama-cpp"), ["source", "download", "--gpu", "false"], { cwd: root, stdio: "inherit" });
  if (r.status !== 0 || !built()) {
    say(`the source build failed (exit ${r.status}): using node-llama-cpp's prebuilt library (run runners with threads 1)`);
    return;
  }
  say(`built in ${Math.round((Date.now() - started) / 60000)} min; cached in ${cache}`);
  keep();
}
