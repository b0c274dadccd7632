import { execFile } from "node:child_process";
import { join } from "node:path";
import { childEnv, repoRoot, TEST_ADMIN_TOKEN, type ActorHost } from "./processes.js";

export interface AdminResult {
  code: number;
  stdout: string;
  stderr: string;
  /** stdout parsed as JSON (the commands run with --json), or undefined. */
  json: any; // eslint-disable-line @typescript-eslint/no-explicit-any
}

/** Runs `tributary admin --json <args>` against the actor host's admin service, as an operator would. */
export function admin(host: ActorHost, args: string[], options: { token?: string; json?: boolean; input?: string } = {}): Promise<AdminResult> {
  const argv = [join(repoRoot, "bin", "tributary"), "admin", ...(options.json === false ? [] : ["--json"]), "--addr", host.adminAddr, "--token", options.token ?? TEST_ADMIN_TOKEN, ...args];
  return new Promise((resolve) => {
    const child = execFile(process.execPath, argv, { env: childEnv({ TRIBUTARY_ADMIN_TOKEN: "" }) }, (err, stdout, stderr) => {
      const code = err ? ((err as { code?: number }).code ?? 1) : 0;
      let json: unknown;
      try {
        json = JSON.parse(stdout);
      } catch {
        json = undefined;
      }
      resolve({ code: typeof code === "number" ? code : 1, stdout, stderr, json });
    });
    if (options.input !== undefined) child.stdin!.end(options.input);
    else child.stdin!.end();
  });
}

/** Like `admin`, failing the test's expectations loudly when the command did not succeed. */
export async function adminOk(host: ActorHost, args: string[]): Promise<any> { // eslint-disable-line @typescript-eslint/no-explicit-any
  const r = await admin(host, args);
  if (r.code !== 0) throw new Error(`tributary admin ${args.join(" ")} failed (${r.code}): ${r.stderr}`);
  return r.json;
}
