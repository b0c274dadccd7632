import { execFileSync } from "node:child_process";
import { cpSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { request } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { repoRoot } from "./processes.js";

// Helpers of the hosted-apps tests: bundles from directories, uploads with a manifest, and HTTP
// to a hosted address (Node's fetch cannot set Host, so node:http).

export const EXAMPLE_APP = join(repoRoot, "examples", "chat-app");

/** A copy of `source` (or an empty directory) with `files` written into it: a fresh app directory. */
export function appDir(source: string | undefined, files: Record<string, string> = {}): string {
  const dir = mkdtempSync(join(tmpdir(), "tributary-app-"));
  if (source) cpSync(source, dir, { recursive: true });
  for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text);
  return dir;
}

/** Uploads `dir` as a tar.gz artifact with its tributary.yaml; the artifact id. */
export async function uploadBundle(gatewayUrl: string, key: string, dir: string): Promise<string> {
  const archive = execFileSync("tar", ["-czf", "-", "-C", dir, "."]);
  const form = new FormData();
  form.set("manifest", readFileSync(join(dir, "tributary.yaml"), "utf8"));
  form.set("file", new Blob([archive]), "bundle.tar.gz");
  const res = await fetch(`${gatewayUrl}/v1/artifacts`, { method: "POST", body: form, headers: { authorization: `Bearer ${key}` } });
  const body = (await res.json()) as { id?: string };
  if (!res.ok || !body.id) throw new Error(`upload failed: ${res.status} ${JSON.stringify(body)}`);
  return body.id;
}

export interface HostedResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
  /** Chunks as they arrived (a streamed answer arrives in several). */
  chunks: number;
}

/** One request to a hosted address through the gateway. */
export function hosted(gatewayPort: number, host: string, path: string, options: { method?: string; key?: string; body?: string; headers?: Record<string, string> } = {}): Promise<HostedResponse> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string> = { ...options.headers, host };
    if (options.key) headers.authorization = `Bearer ${options.key}`;
    if (options.body !== undefined) headers["content-type"] = "application/json";
    const req = request({ host: "127.0.0.1", port: gatewayPort, path, method: options.method ?? "GET", headers }, (res) => {
      let body = "";
      let chunks = 0;
      res.setEncoding("utf8");
      res.on("data", (c: string) => {
        chunks++;
        body += c;
      });
      res.on("end", () => resolve({ status: res.statusCode!, headers: res.headers, body, chunks }));
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end(options.body);
  });
}

/** The smallest ASGI app: every HTTP request gets 200 "ok". */
export const OK_APP = `
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"ok"})
`;

/** A manifest of the local stack's default project (organization `local`): 96 MB, `cpuMhz`, then `more` lines (scaling). */
export const localManifest = (cpuMhz: number, more = "") =>
  `entrypoint: app:app\norganization_slug: local\nproject: Default project\nproject_slug: default-project\ncpu_mhz: ${cpuMhz}\ngpu_count: 0\nmemory_size_mb: 96\n${more}`;

/** Polls a deployment until its status is one of `statuses`. */
export async function waitForDeployment(gatewayUrl: string, key: string, id: string, statuses: string[], timeoutMs = 30_000): Promise<any> {
  return untilDeployment(gatewayUrl, key, id, (d) => typeof d.status === "string" && statuses.includes(d.status), `${statuses.join("/")}`, timeoutMs);
}

/** Polls the deployment until `done` holds of it (or the time is up: the error shows it as it was, and `what` it never became). */
export async function untilDeployment(gatewayUrl: string, key: string, id: string, done: (d: any) => boolean, what: string, timeoutMs = 30_000): Promise<any> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const res = await fetch(`${gatewayUrl}/v1/apps/deployments/${id}`, { headers: { authorization: `Bearer ${key}` } });
    const body = (await res.json()) as any;
    if (done(body)) return body;
    if (Date.now() > deadline) throw new Error(`deployment ${id} never ${what}: ${JSON.stringify(body)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}
