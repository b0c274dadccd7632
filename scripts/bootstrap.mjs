#!/usr/bin/env node
// Makes a fresh checkout runnable, using only Node's standard library:
//   1. npm dependencies (npm ci when node_modules is missing or older than package-lock.json);
//   2. the TypeScript build (incremental: quick when nothing changed);
//   3. nats-server, unless NATS_URL points at an existing server (apt-get when root on Debian,
//      otherwise a message saying what to install).
// Usage: node scripts/bootstrap.mjs [--for-tests]
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, readFileSync, statSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

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
// TypeScript transpiler the tests do not use (they run compiled, from dist/).
if (forTests) {
  const built = join(root, "node_modules", "@tapjs", "test", "test-built", "dist", "esm", "index.js");
  if (!existsSync(built) || readFileSync(built, "utf8").includes("@tapjs/typescript")) {
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
