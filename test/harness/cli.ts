import { execFile, spawn, type ChildProcess, type StdioOptions } from "node:child_process";
import { join } from "node:path";
import { Writable } from "node:stream";
import { exitCodeOf } from "../../cli/args.js";
import { runCommand } from "../../cli/commands.js";
import { childEnv, repoRoot } from "./processes.js";

// The tributary command line as a test runs it: the compiled CLI in a child process, with the
// harness's environment (childEnv: without the test runner's hooks) and the test's additions; or,
// for checks of its arguments alone, its commands in this process.

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

/**
 * Runs `tributary ARGS` in this process, as cli/main.ts does (the exit code a command returns, or
 * the one exitCodeOf gives what it throws): for the checks of a command's arguments (usage errors,
 * --help), which never get past the parse, without a cold start of node each. A command that
 * would run (a process command starts its process) is not for this.
 */
export async function runCliInProcess(args: string[]): Promise<CliResult> {
  const captured = { stdout: "", stderr: "" };
  const sink = (name: keyof typeof captured) =>
    new Writable({
      write(chunk: Buffer | string, _encoding, done) {
        captured[name] += chunk.toString();
        done();
      },
    });
  const out = { stdout: sink("stdout"), stderr: sink("stderr") };
  let code: number;
  try {
    code = await runCommand(args, out);
  } catch (err) {
    code = exitCodeOf(err, out);
  }
  return { code, ...captured };
}
