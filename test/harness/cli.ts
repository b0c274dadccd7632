import { execFile, spawn, type ChildProcess, type StdioOptions } from "node:child_process";
import { join } from "node:path";
import { childEnv, repoRoot } from "./processes.js";

// The tributary command line as a test runs it: the compiled CLI in a child process, with the
// harness's environment (childEnv: without the test runner's hooks) and the test's additions.

export const cliPath = join(repoRoot, "dist", "cli", "main.js");

export interface CliResult {
  /** The exit code (null when a signal ended it). */
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs `tributary ARGS` to its end: its exit code and output (`input` on its stdin). */
export function runCli(args: string[], options: { env?: NodeJS.ProcessEnv; input?: string; timeoutMs?: number } = {}): Promise<CliResult> {
  return new Promise((resolve) => {
    const child = execFile(process.execPath, [cliPath, ...args], { env: childEnv(options.env), timeout: options.timeoutMs ?? 60_000 }, (_err, stdout, stderr) =>
      resolve({ code: child.exitCode, stdout, stderr }),
    );
    child.stdin!.end(options.input);
  });
}

/** Starts `tributary ARGS` and leaves it running (a stack, an interactive shell). */
export function spawnCli(args: string[], options: { env?: NodeJS.ProcessEnv; stdio?: StdioOptions } = {}): ChildProcess {
  return spawn(process.execPath, [cliPath, ...args], { env: childEnv(options.env), stdio: options.stdio ?? ["pipe", "pipe", "pipe"] });
}
