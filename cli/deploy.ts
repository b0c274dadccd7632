import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { gzipSync } from "node:zlib";
import { CommandFailed, intOption, parseCommand, UsageError } from "./args.js";
import { gatewayClient, gatewayOptions, gatewayOptionsUsage, type GatewayClient } from "./gateway-client.js";

// `tributary deploy [dir]`: finds the app's tributary.yaml (the directory or a parent), packs the
// app (a reproducible tar.gz, without .git, virtualenvs and caches), uploads it in parts with a
// progress bar, creates the deployment, follows it until it is healthy or failed, and prints the
// hosted address. The same bundle as the serving deployment changes nothing.

export const deployUsage = `usage: tributary deploy [DIR] [--parallel 4]

  Packs the app in DIR (default: the current directory) or the nearest parent holding
  tributary.yaml, uploads it (--parallel parts at once), deploys it, follows it until it is
  healthy, and prints its hosted address. The same bundle as the serving one changes nothing.

${gatewayOptionsUsage}`;

const MANIFEST = "tributary.yaml";
/** Directory names never packed: version control, caches, dependencies installed locally. */
const SKIPPED_DIRS = new Set([".git", ".hg", ".svn", "__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".tox", ".nox", "node_modules", ".venv", "venv", ".idea", ".vscode"]);
const SKIPPED_FILES = [/\.py[co]$/, /^\.DS_Store$/];

/** The directory holding tributary.yaml: `start` or its nearest parent that has one. */
export function findAppRoot(start: string): string | undefined {
  for (let dir = resolve(start); ; dir = dirname(dir)) {
    if (existsSync(join(dir, MANIFEST))) return dir;
    if (dirname(dir) === dir) return undefined;
  }
}

/** The files of the app, relative to its root, sorted; skipped: SKIPPED_DIRS, any virtualenv (a pyvenv.cfg), byte code. */
export function appFiles(root: string): string[] {
  const out: string[] = [];
  const walk = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) {
        if (SKIPPED_DIRS.has(entry.name) || existsSync(join(path, "pyvenv.cfg"))) continue;
        walk(path);
      } else if ((entry.isFile() || entry.isSymbolicLink()) && !SKIPPED_FILES.some((re) => re.test(entry.name))) out.push(relative(root, path));
    }
  };
  walk(root);
  return out.sort();
}

/** A reproducible tar.gz of `files` (sorted, fixed owner and times): the same app packs to the same sha256. */
export async function pack(root: string, files: string[]): Promise<Buffer> {
  const tar = spawn("tar", ["-cf", "-", "--no-recursion", "--owner=0", "--group=0", "--numeric-owner", "--mtime=@0", "--mode=u+rwX,go+rX,go-w", "-C", root, "-T", "-"], { stdio: ["pipe", "pipe", "pipe"] });
  const chunks: Buffer[] = [];
  let stderr = "";
  tar.stdout.on("data", (c: Buffer) => chunks.push(c));
  tar.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
  tar.stdin.end(files.join("\n") + "\n");
  const code = await new Promise<number | null>((r) => tar.on("close", r));
  if (code !== 0) throw new Error(`tar failed: ${stderr.trim()}`);
  return gzipSync(Buffer.concat(chunks), { level: 9 });
}

function progress(done: number, total: number): void {
  if (!process.stderr.isTTY) return;
  const width = 30;
  const filled = Math.round((done / total) * width);
  process.stderr.write(`\r  uploading [${"#".repeat(filled)}${" ".repeat(width - filled)}] ${((done / total) * 100).toFixed(0).padStart(3)}% ${(done / 1024 / 1024).toFixed(1)}/${(total / 1024 / 1024).toFixed(1)} MiB`);
  if (done === total) process.stderr.write("\n");
}

/** Uploads the bundle in parts (in parallel), returns the artifact id. */
async function upload(api: GatewayClient, bundle: Buffer, sha256: string, manifest: string, parallel: number): Promise<string> {
  const upload = await api.json("POST", "/v1/multipart", { filename: "bundle.tar.gz", bytes: bundle.length, sha256, manifest });
  const partSize: number = upload.part_size;
  const count = Math.ceil(bundle.length / partSize);
  let sent = 0;
  progress(0, bundle.length);
  const parts: Array<{ part_number: number; sha256: string }> = [];
  let next = 1;
  const worker = async () => {
    while (next <= count) {
      const n = next++;
      const bytes = bundle.subarray((n - 1) * partSize, Math.min(bundle.length, n * partSize));
      const part = await api.upload(`/v1/multipart/${upload.id}/part?part_number=${n}`, bytes);
      parts[n - 1] = { part_number: n, sha256: part.sha256 };
      sent += bytes.length;
      progress(sent, bundle.length);
    }
  };
  await Promise.all(Array.from({ length: Math.min(parallel, count) }, worker));
  const artifact = await api.json("POST", `/v1/multipart/${upload.id}/finish`, { parts });
  return artifact.id as string;
}

export async function runDeploy(argv: string[]): Promise<number> {
  const { values, positionals } = parseCommand(argv, { name: "tributary deploy", usage: deployUsage, positionals: ["[DIR]"], options: { ...gatewayOptions, parallel: { type: "string" } } });
  const parallel = intOption("tributary deploy", "parallel", values.parallel, 1, 32) ?? 4;
  const api = gatewayClient(values);
  const root = findAppRoot(positionals[0] ?? ".");
  if (!root) throw new UsageError(`tributary deploy: no ${MANIFEST} in ${resolve(positionals[0] ?? ".")} or its parents`);
  const started = performance.now();
  // Set while stderr's last line is unfinished (the upload's bar, the deployment's statuses).
  let lineOpen = false;
  try {
    const files = appFiles(root);
    const bundle = await pack(root, files);
    const sha256 = createHash("sha256").update(bundle).digest("hex");
    process.stderr.write(`packed ${root}: ${files.length} files, ${bundle.length} bytes, sha256 ${sha256.slice(0, 12)}\n`);
    // The same bundle already serving: nothing to upload, nothing changes.
    const serving = ((await api.json("GET", "/v1/apps/deployments?limit=100")).data as any[]).find((d) => d.status === "healthy" && d.sha256 === sha256);
    if (serving) {
      process.stderr.write(`unchanged: ${serving.id} already serves this bundle\n`);
      printAddresses(serving);
      return 0;
    }
    lineOpen = process.stderr.isTTY;
    const artifactId = await upload(api, bundle, sha256, readFileSync(join(root, MANIFEST), "utf8"), parallel);
    const created = await api.json("POST", "/v1/apps/deployments", { artifact_id: artifactId });
    if (created.unchanged) {
      process.stderr.write(`unchanged: ${created.id} already serves this bundle\n`);
      printAddresses(created);
      return 0;
    }
    process.stderr.write(`deployment ${created.id}: ${created.status}`);
    lineOpen = true;
    let status = created.status as string;
    for (;;) {
      await new Promise((r) => setTimeout(r, 300));
      const d = await api.json("GET", `/v1/apps/deployments/${created.id}`);
      if (d.status !== status) process.stderr.write(` -> ${d.status}`);
      status = d.status;
      if (status === "healthy") {
        process.stderr.write(` (${((performance.now() - started) / 1000).toFixed(1)} s)\n`);
        printAddresses(d);
        return 0;
      }
      if (["failed", "stopped", "superseded"].includes(status)) {
        process.stderr.write(`\n${d.reason ?? ""}: ${d.message ?? ""}\n`);
        for (const line of d.last_logs ?? []) process.stderr.write(`  | ${line}\n`);
        return 1;
      }
    }
  } catch (err) {
    if (lineOpen) process.stderr.write("\n");
    throw new CommandFailed(`deploy failed: ${(err as Error).message}`);
  }
}

/** The hosted address on stdout (what a script takes); the path address, which every HTTP client resolves, for people. */
function printAddresses(deployment: { hosted_url: string; local_url?: string }): void {
  process.stdout.write(`${deployment.hosted_url}\n`);
  if (deployment.local_url) process.stderr.write(`also at ${deployment.local_url} (a path on the gateway: any HTTP client on its machine reaches it)\n`);
}
