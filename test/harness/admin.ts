import type { ActorHost } from "./processes.js";
import { TEST_ADMIN_TOKEN } from "./processes.js";
import { runCli, type CliResult } from "./cli.js";

// `tributary admin` as an operator runs it, for the tests of the command line itself. Tests that
// only need organizations, keys or invitations call the admin service in process (stack.admin).

export interface AdminResult extends CliResult {
  /** stdout parsed as JSON (the commands run with --json), or undefined. */
  json: any; // eslint-disable-line @typescript-eslint/no-explicit-any
}

/** Runs `tributary admin --json <args>` against the actor host's admin service. */
export async function admin(host: Pick<ActorHost, "adminAddr">, args: string[], options: { token?: string; json?: boolean; input?: string } = {}): Promise<AdminResult> {
  const argv = ["admin", ...(options.json === false ? [] : ["--json"]), "--addr", host.adminAddr, "--token", options.token ?? TEST_ADMIN_TOKEN, ...args];
  const result = await runCli(argv, { env: { TRIBUTARY_ADMIN_TOKEN: "" }, input: options.input ?? "" });
  let json: unknown;
  try {
    json = JSON.parse(result.stdout);
  } catch {
    json = undefined;
  }
  return { ...result, code: result.code ?? 1, json };
}
