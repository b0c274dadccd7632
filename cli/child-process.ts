import { spawn, type ChildProcess } from "node:child_process";
import { closeSync, openSync, writeSync } from "node:fs";
import { createInterface } from "node:readline";
import * as Duration from "effect/Duration";
import * as Effect from "effect/Effect";
import * as Exit from "effect/Exit";
import { logStyle, parseLogRecord, renderChildLine, writeLogText, type Logger, type LogRecord } from "../lib/log.js";
import { RESTART_POLICY, restartForever, type RestartPolicy } from "../lib/process/restart.js";

export interface ChildSpec {
  name: string;
  command: string;
  args: string[];
  env: NodeJS.ProcessEnv;
  /** Grace period after SIGTERM before SIGKILL. */
  stopTimeoutMs: number;
  /** Each line the child writes (its JSON logs), with its record when it is one, after it is logged. */
  onLine?: (line: string, record: LogRecord | undefined) => void;
  /** Records a pretty log leaves out: the caller shows what they say its own way (the start report's progress bars). */
  shownByCaller?: (record: LogRecord) => boolean;
  /**
   * A file the child's output is appended to instead of the terminal (nats-server's): created
   * 0600, its directory made by the caller. onLine still sees each line.
   */
  logFile?: string;
}

interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

/** Children still running: killed if this process exits without stopping them (uncaught error). */
const live = new Set<ChildProcess>();
process.once("exit", () => {
  for (const child of live) child.kill("SIGKILL");
});

function waitForExit(child: ChildProcess): Effect.Effect<Exit> {
  return Effect.callback<Exit>((resume) => {
    if (child.exitCode !== null || child.signalCode !== null) {
      resume(Effect.succeed({ code: child.exitCode, signal: child.signalCode }));
      return;
    }
    child.once("exit", (code, signal) => resume(Effect.succeed({ code, signal })));
  });
}

/** SIGTERM, then SIGKILL if the child has not exited within its grace period. */
function terminate(child: ChildProcess, spec: ChildSpec, log: Logger): Effect.Effect<void> {
  return Effect.gen(function* () {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill("SIGTERM");
    const exited = yield* waitForExit(child).pipe(Effect.timeoutOption(Duration.millis(spec.stopTimeoutMs)));
    if (exited._tag === "None") {
      log.warn("child did not stop in time; killing it", { child: spec.name });
      child.kill("SIGKILL");
      yield* waitForExit(child);
    }
  });
}

/** Starts the child as a scoped resource: closing the scope stops it. */
export function spawnScoped(spec: ChildSpec, log: Logger) {
  return Effect.acquireRelease(
    Effect.sync(() => {
      // Own process group: a terminal's Ctrl-C reaches only the supervisor, which stops the
      // children in order (nats-server must outlive the gateway's drain). Their stdin is a pipe
      // only this process holds: it closes when the supervisor dies, however it dies, and a child
      // started with TRIBUTARY_PARENT_PIPE=stdin stops then (lib/process/lifecycle.ts).
      // stdout too: whatever a child prints reaches the terminal as a line of its own.
      const child = spawn(spec.command, spec.args, { env: spec.env, stdio: ["pipe", "pipe", "pipe"], detached: true });
      live.add(child);
      child.once("exit", () => live.delete(child));
      const file = spec.logFile === undefined ? undefined : { fd: openSync(spec.logFile, "a", 0o600), open: true };
      if (file)
        child.once("close", () => {
          file.open = false;
          closeSync(file.fd);
        });
      const onLine = (line: string) => {
        if (file) {
          if (file.open) writeSync(file.fd, line + "\n");
          spec.onLine?.(line, undefined);
          return;
        }
        const record = parseLogRecord(line);
        const text = record && logStyle.format === "pretty" && spec.shownByCaller?.(record) ? undefined : renderChildLine(logStyle, spec.name, line, record);
        if (text !== undefined) writeLogText(text + "\n");
        spec.onLine?.(line, record);
      };
      createInterface({ input: child.stdout! }).on("line", onLine);
      createInterface({ input: child.stderr! }).on("line", onLine);
      return child;
    }),
    (child) => terminate(child, spec, log),
  );
}

/**
 * Runs the child until the surrounding fiber is interrupted, restarting it whenever it exits on
 * its own, with the restart policy every supervisor shares: exponential backoff from 0.5 s to
 * 30 s, back to 0.5 s once a child had run for a minute before it exited.
 */
export function supervise(spec: ChildSpec, log: Logger, policy: RestartPolicy = RESTART_POLICY): Effect.Effect<never> {
  const once = Effect.scoped(Effect.flatMap(spawnScoped(spec, log), waitForExit));
  return restartForever(once, policy, ({ exit, ranForMs }, restartIn) => {
    const ended = Exit.isSuccess(exit) ? exit.value : undefined;
    log.error("child exited unexpectedly; restarting", {
      child: spec.name, code: ended?.code, signal: ended?.signal, ranForMs, restartInMs: Duration.toMillis(restartIn),
    });
  });
}
