import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { parseArgs } from "node:util";
import { gzipSync } from "node:zlib";
import { commonConfig, gatewayConfig, optionToUndefined, readConfig } from "../lib/config.js";

// `tributary deploy [dir]`: finds the app's tributary.yaml (the directory or a parent), packs the
// app (a reproducible tar.gz, without .git, virtualenvs and caches), uploads it in parts with a
// progress bar, creates the deployment, follows it until it is healthy or failed, and prints the
// hosted address. The same bundle as the serving deployment changes nothing.

export const deployUsage = `usage: tributary deploy [DIR] [--url http://127.0.0.1:8080] [--key KEY] [--parallel 4]

  DIR (default: the current directory) or one of its parents holds tributary.yaml.
  The key is --key, else TRIBUTARY_API_KEY, else $TRIBUTARY_HOME/api-key (the local stack's).
`;

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

interface Client {
  json(method: string, path: string, body?: unknown): Promise<any>;
  raw(path: string, bytes: Buffer): Promise<any>;
}

function client(base: string, key: string): Client {
  const call = async (method: string, path: string, body: string | Uint8Array | undefined, contentType: string) => {
    const res = await fetch(base + path, { method, body, headers: { authorization: `Bearer ${key}`, "content-type": contentType } });
    const text = await res.text();
    let json: any;
    try {
      json = JSON.parse(text);
    } catch {
      json = { error: { message: text.slice(0, 200) } };
    }
    if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${json?.error?.message ?? text.slice(0, 200)}${json?.error?.param ? ` (${json.error.param})` : ""}`);
    return json;
  };
  return {
    json: (method, path, body) => call(method, path, body === undefined ? undefined : JSON.stringify(body), "application/json"),
    raw: (path, bytes) => call("POST", path, new Uint8Array(bytes), "application/octet-stream"),
  };
}

function progress(done: number, total: number): void {
  if (!process.stderr.isTTY) return;
  const width = 30;
  const filled = Math.round((done / total) * width);
  process.stderr.write(`\r  uploading [${"#".repeat(filled)}${" ".repeat(width - filled)}] ${((done / total) * 100).toFixed(0).padStart(3)}% ${(done / 1024 / 1024).toFixed(1)}/${(total / 1024 / 1024).toFixed(1)} MiB`);
  if (done === total) process.stderr.write("\n");
}

/** Uploads the bundle in parts (in parallel), returns the artifact id. */
async function upload(api: Client, bundle: Buffer, sha256: string, manifest: string, parallel: number): Promise<string> {
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
      const part = await api.raw(`/v1/multipart/${upload.id}/part?part_number=${n}`, bytes);
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
  let parsed;
  try {
    parsed = parseArgs({ args: argv, allowPositionals: true, options: { url: { type: "string" }, key: { type: "string" }, parallel: { type: "string", default: "4" }, help: { type: "boolean", short: "h", default: false } } });
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n\n${deployUsage}`);
    return 2;
  }
  if (parsed.values.help || parsed.positionals.length > 1) {
    process.stderr.write(deployUsage);
    return parsed.values.help ? 0 : 2;
  }
  const parallel = Number(parsed.values.parallel);
  if (!Number.isInteger(parallel) || parallel < 1 || parallel > 32) {
    process.stderr.write("--parallel: an integer from 1 to 32\n");
    return 2;
  }
  const gateway = readConfig(gatewayConfig);
  const keyFile = join(readConfig(commonConfig).home, "api-key");
  const key = parsed.values.key ?? optionToUndefined(gateway.apiKey) ?? (existsSync(keyFile) ? readFileSync(keyFile, "utf8").trim() : undefined);
  if (!key) {
    process.stderr.write("no API key: pass --key or set TRIBUTARY_API_KEY\n");
    return 2;
  }
  const root = findAppRoot(parsed.positionals[0] ?? ".");
  if (!root) {
    process.stderr.write(`no ${MANIFEST} in ${resolve(parsed.positionals[0] ?? ".")} or its parents\n`);
    return 2;
  }
  const api = client((parsed.values.url ?? `http://${gateway.host === "0.0.0.0" ? "127.0.0.1" : gateway.host}:${gateway.port}`).replace(/\/+$/, ""), key);
  const started = performance.now();
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
    const artifactId = await upload(api, bundle, sha256, readFileSync(join(root, MANIFEST), "utf8"), parallel);
    const created = await api.json("POST", "/v1/apps/deployments", { artifact_id: artifactId });
    if (created.unchanged) {
      process.stderr.write(`unchanged: ${created.id} already serves this bundle\n`);
      printAddresses(created);
      return 0;
    }
    process.stderr.write(`deployment ${created.id}: ${created.status}`);
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
    process.stderr.write(`\ndeploy failed: ${(err as Error).message}\n`);
    return 1;
  }
}

/** The hosted address on stdout (what a script takes); the path address, which every HTTP client resolves, for people. */
function printAddresses(deployment: { hosted_url: string; local_url?: string }): void {
  process.stdout.write(`${deployment.hosted_url}\n`);
  if (deployment.local_url) process.stderr.write(`also at ${deployment.local_url} (a path on the gateway: any HTTP client on its machine reaches it)\n`);
}
