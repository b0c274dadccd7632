import { execFileSync } from "node:child_process";

// A child that is not a Node process of ours (nats-server) cannot watch its parent's pipe
// (lifecycle.ts); the kernel ends it instead. util-linux's `setpriv --pdeathsig` sets
// PR_SET_PDEATHSIG and execs the command: the child gets the signal the moment the process that
// started it dies, however it dies (a kill -9 included). The signal survives taskset's exec too.

let setprivPath: string | null | undefined;

/** setpriv when it has --pdeathsig (util-linux 2.33 and later; Debian's util-linux is essential). */
function setprivWithDeathSignal(): string | null {
  if (setprivPath === undefined) {
    try {
      setprivPath = execFileSync("setpriv", ["--help"], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).includes("--pdeathsig") ? "setpriv" : null;
    } catch {
      setprivPath = null;
    }
  }
  return setprivPath;
}

/**
 * The command line that runs `line` with `signal` (a name without SIG) sent to it when this
 * process dies; `bound` false (the line unchanged) where setpriv cannot do it.
 */
export function withParentDeathSignal(line: { command: string; args: readonly string[] }, signal = "TERM"): { command: string; args: string[]; bound: boolean } {
  const setpriv = setprivWithDeathSignal();
  if (!setpriv) return { command: line.command, args: [...line.args], bound: false };
  return { command: setpriv, args: ["--pdeathsig", signal, "--", line.command, ...line.args], bound: true };
}
