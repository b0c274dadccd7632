#!/usr/bin/env node
// The tributary command line: runs the command (cli/commands.ts) and exits with its code. Bad
// input, --help, an API's refusal: a message and an exit code (cli/args.ts), never a stack trace.
import { runCommand } from "./commands.js";

runCommand(process.argv.slice(2)).then(
  (code) => process.exit(code),
  async (err: unknown) => process.exit((await import("./args.js")).exitCodeOf(err)),
);
