import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";
import { repoRoot } from "./processes.js";

// llama.cpp's own llama-server, built from the llama.cpp source node-llama-cpp bundles (a git
// bundle inside the package: no network), so both sides of a comparison run the same llama.cpp.
// Built once into $TRIBUTARY_HOME/llama-server (OpenMP, this CPU's instruction set, static).

const nlcDir = join(repoRoot, "node_modules", "node-llama-cpp");
const bundle = join(nlcDir, "llama", "gitRelease.bundle");

function onPath(cmd: string): boolean {
  return spawnSync("sh", ["-c", `command -v ${cmd}`], { stdio: "ignore" }).status === 0;
}

function run(cmd: string, args: string[], cwd: string, log: string): void {
  process.stderr.write(`[llama-server] ${cmd} ${args.join(" ")}\n`);
  const r = spawnSync(cmd, args, { cwd, stdio: ["ignore", "pipe", "pipe"], maxBuffer: 1 << 30 });
  writeFileSync(log, Buffer.concat([r.stdout ?? Buffer.alloc(0), r.stderr ?? Buffer.alloc(0)]), { flag: "a" });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(" ")} failed (exit ${r.status}); see ${log}`);
}

/** The llama-server binary, building it when missing; a string explaining why not otherwise. */
export function ensureLlamaServer(home: string): { path: string } | { skip: string } {
  // The real path: a symlinked home must not look like another source tree (that wipes the build).
  const linked = join(home, "llama-server");
  const dir = existsSync(linked) ? realpathSync(linked) : linked;
  const binary = join(dir, "build", "bin", "llama-server");
  const version = JSON.parse(readFileSync(join(nlcDir, "package.json"), "utf8")).version as string;
  const stamp = join(dir, "built-from.txt");
  if (existsSync(binary) && existsSync(stamp) && readFileSync(stamp, "utf8").trim() === version) return { path: binary };
  if (!onPath("cmake") || !(onPath("c++") || onPath("g++")) || !onPath("git"))
    return { skip: "llama-server is not built and cmake, git or a C++ compiler is missing (Debian: apt-get install cmake g++ git)" };
  if (!existsSync(bundle)) return { skip: `node-llama-cpp ${version} ships no llama.cpp source bundle (${bundle})` };
  mkdirSync(dir, { recursive: true });
  // One build at a time per home: another bench (or session) building it is waited for, not joined.
  const lock = join(dir, "build.lock");
  const holder = existsSync(lock) ? Number(readFileSync(lock, "utf8")) : 0;
  if (holder && holder !== process.pid && alive(holder)) return { skip: `llama-server is being built by process ${holder} (${lock}); run again when it is done` };
  // A build started otherwise (by hand, or by code without the lock): its cmake/make name the directory.
  const builder = processNaming(join(dir, "build"));
  if (builder) return { skip: `process ${builder} is building in ${join(dir, "build")}; run again when it is done (two builds in one tree break each other)` };
  writeFileSync(lock, String(process.pid));
  try {
    return buildLlamaServer(dir, binary, stamp, version);
  } finally {
    rmSync(lock, { force: true });
  }
}

/** A running process (not this one) whose command line contains `text`. */
function processNaming(text: string): number | undefined {
  for (const entry of existsSync("/proc") ? readdirSync("/proc") : []) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    try {
      if (readFileSync(`/proc/${entry}/cmdline`, "utf8").includes(text)) return Number(entry);
    } catch {
      // gone
    }
  }
  return undefined;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

function buildLlamaServer(dir: string, binary: string, stamp: string, version: string): { path: string } {
  const src = join(dir, "src");
  const log = join(dir, "build.log");
  process.stderr.write(`[llama-server] building from node-llama-cpp ${version}'s bundled llama.cpp (once; 15-40 min on 2 cores), log: ${log}\n`);
  if (!existsSync(join(src, "CMakeLists.txt"))) run("git", ["clone", "--quiet", bundle, src], dir, log);
  // A build tree configured from another source directory cannot be reused.
  const cache = join(dir, "build", "CMakeCache.txt");
  if (existsSync(cache) && !readFileSync(cache, "utf8").includes(`CMAKE_HOME_DIRECTORY:INTERNAL=${src}\n`)) rmSync(join(dir, "build"), { recursive: true, force: true });
  run("cmake", ["-S", src, "-B", join(dir, "build"), "-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF",
    "-DGGML_OPENMP=ON", "-DGGML_NATIVE=ON", "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DBUILD_SHARED_LIBS=OFF"], dir, log);
  run("cmake", ["--build", join(dir, "build"), "--target", "llama-server", "-j", "2"], dir, log);
  writeFileSync(stamp, version);
  return { path: binary };
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() => (typeof address === "object" && address ? resolve(address.port) : reject(new Error("no port"))));
    });
  });
}

export interface LlamaServer {
  port: number;
  process: ChildProcess;
  stop(): Promise<void>;
}

/** Starts llama-server on `model` with `slots` parallel sequences of `contextPerSlot` tokens each. */
export async function startLlamaServer(binary: string, model: string, o: { slots: number; contextPerSlot: number; threads: number; cpus?: readonly number[]; chatTemplate?: string }): Promise<LlamaServer> {
  const port = await freePort();
  const args = ["-m", model, "--host", "127.0.0.1", "--port", String(port), "-np", String(o.slots), "-c", String(o.slots * o.contextPerSlot),
    "-t", String(o.threads), "-tb", String(o.threads), "--no-webui", "--log-disable", ...(o.chatTemplate ? ["--chat-template", o.chatTemplate] : [])];
  const [command, argv] = o.cpus ? ["taskset", ["-c", o.cpus.join(","), binary, ...args]] : [binary, args];
  const child = spawn(command as string, argv as string[], { stdio: ["ignore", "ignore", "pipe"] });
  let stderr = "";
  child.stderr!.on("data", (d) => (stderr = (stderr + d).slice(-4000)));
  const deadline = Date.now() + 120_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`llama-server exited (${child.exitCode}): ${stderr}`);
    const ok = await fetch(`http://127.0.0.1:${port}/health`).then((r) => r.ok, () => false);
    if (ok) break;
    if (Date.now() > deadline) throw new Error(`llama-server did not become healthy: ${stderr}`);
    await new Promise((r) => setTimeout(r, 250));
  }
  return {
    port,
    process: child,
    stop: () => new Promise((resolve) => {
      if (child.exitCode !== null) return resolve();
      child.once("exit", () => resolve());
      child.kill("SIGKILL");
    }),
  };
}
