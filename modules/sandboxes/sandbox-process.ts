import { spawn, type ChildProcess } from "node:child_process";
import { constants } from "node:os";
import { AGENT_SOURCE } from "./agent-source.js";
import { EGRESS_READY_TIMEOUT_MS, EgressStack, readChildPid, type EgressOptions } from "./egress.js";
import { inCgroup, sandboxCommand, type IsolationOptions, type SandboxCgroup, type SandboxLimits, type SandboxMounts } from "./isolation.js";
import { agentLine, type AgentLine } from "./protocol.js";

/** Longest line the host reads from an agent: larger means a broken or hostile agent. */
const MAX_LINE_BYTES = 4 * 1024 * 1024;

export interface ExecHandlers {
  onOutput?(stream: "stdout" | "stderr", data: Buffer): void;
}

/**
 * One sandbox's process tree as the host holds it: the bwrap'd agent, spoken to over its stdin
 * and stdout. Calls carry an id; the agent answers each with one line ("ok", "error" or, for
 * exec, output lines then "exit"). Lines that do not decode are ignored (and counted).
 */
export class SandboxProcess {
  private readonly child: ChildProcess;
  private readonly pending = new Map<string, { resolve: (line: AgentLine) => void; handlers?: ExecHandlers }>();
  private nextId = 0;
  private buffered: Buffer[] = [];
  private bufferedBytes = 0;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  private readyResolve!: () => void;
  readonly ready = new Promise<void>((resolve) => (this.readyResolve = resolve));
  badLines = 0;
  /** Once its process tree ended: how, in words ("the sandbox's agent was killed by SIGKILL"). */
  endedHow: string | undefined;
  /** The sandbox's network stack (egress sandboxes only). */
  private egress: EgressStack | undefined;
  /** Resolves once the sandbox's network is up (at once without egress); rejects when it cannot be. */
  readonly networkReady: Promise<void>;

  constructor(
    options: IsolationOptions,
    limits: SandboxLimits,
    uid: number | undefined,
    cgroup: SandboxCgroup | undefined,
    setup: { mounts: SandboxMounts; egress?: EgressOptions },
  ) {
    const mounts = setup.egress ? { ...setup.mounts, reportPid: true } : { ...setup.mounts, egressResolvConf: undefined, reportPid: false };
    const argv = inCgroup(cgroup?.procsFiles ?? [], sandboxCommand(options, limits, uid, AGENT_SOURCE, mounts));
    // Egress: bwrap names the sandbox's pid on fd 3 (--info-fd), the network stack attaches to it.
    this.child = spawn(argv[0]!, argv.slice(1), { stdio: setup.egress ? ["pipe", "pipe", "ignore", "pipe"] : ["pipe", "pipe", "ignore"], env: {} });
    const egress = setup.egress;
    this.networkReady = egress
      ? readChildPid(this.child.stdio[3] as NodeJS.ReadableStream).then((pid) => {
          if (!this.alive) throw new Error("the sandbox ended");
          this.egress = new EgressStack(egress, pid, cgroup?.procsFiles ?? []);
          return this.egress.ready;
        })
      : Promise.resolve();
    this.networkReady.catch(() => {});
    this.child.stdin!.on("error", () => {});
    this.child.stdout!.on("data", (chunk: Buffer) => this.onData(chunk));
    this.exited = new Promise((resolve) =>
      this.child.once("exit", (code, signal) => {
        // Before the calls in flight are answered: their callers read it to say how it ended.
        this.endedHow = describeEnd(code, signal);
        for (const [, p] of this.pending) p.resolve({ t: "error", message: this.endedHow });
        this.pending.clear();
        this.egress?.kill();
        resolve({ code, signal });
      }),
    );
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  get alive(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  /** Sends a call; resolves with the agent's final line for it (for exec: the exit line). */
  call(op: Record<string, unknown>, handlers?: ExecHandlers): Promise<AgentLine> {
    if (!this.alive) return Promise.resolve({ t: "error", message: "the sandbox ended" });
    const id = String(++this.nextId);
    return new Promise((resolve) => {
      this.pending.set(id, { resolve, handlers });
      this.child.stdin!.write(JSON.stringify({ ...op, id }) + "\n");
    });
  }

  /** The id the next call will get (so a kill can name an exec before it is sent). */
  peekNextId(): string {
    return String(this.nextId + 1);
  }

  kill(): void {
    if (this.alive) this.child.kill("SIGKILL");
    this.egress?.kill();
  }

  private onData(chunk: Buffer): void {
    let start = 0;
    for (let i = chunk.indexOf(10); i >= 0; i = chunk.indexOf(10, start)) {
      const piece = chunk.subarray(start, i);
      start = i + 1;
      const line = this.bufferedBytes > 0 ? Buffer.concat([...this.buffered, piece]) : piece;
      this.buffered = [];
      this.bufferedBytes = 0;
      this.onLine(line);
    }
    if (start < chunk.length) {
      this.buffered.push(chunk.subarray(start));
      this.bufferedBytes += chunk.length - start;
      if (this.bufferedBytes > MAX_LINE_BYTES) this.kill();
    }
  }

  private onLine(raw: Buffer): void {
    let line: AgentLine;
    try {
      line = agentLine.parse("sandbox agent", raw.toString("utf8"));
    } catch {
      this.badLines++;
      return;
    }
    if (line.t === "ready") return this.readyResolve();
    const id = line.id ?? undefined;
    const pending = id === undefined ? undefined : this.pending.get(id);
    if (!pending) return;
    if (line.t === "out" || line.t === "err") {
      pending.handlers?.onOutput?.(line.t === "out" ? "stdout" : "stderr", Buffer.from(line.d ?? "", "base64"));
      return;
    }
    this.pending.delete(id!);
    pending.resolve(line);
  }
}

/** The agent's exit code when it could not go on (AGENT_FAILED in agent.py). */
const AGENT_FAILED = 70;

/**
 * How a sandbox's process tree ended, from the exit of the bwrap it was started as: bwrap exits
 * as soon as its first child, the agent, does (exiting as it did, 128 + N for signal N), and ends
 * the rest; a signal of its own means bwrap itself was killed.
 */
export function describeEnd(code: number | null, signal: NodeJS.Signals | null): string {
  if (signal !== null) return `the sandbox's processes were killed by ${signal}`;
  if (code === AGENT_FAILED) return "the sandbox's agent failed (an internal error) and exited";
  if (code !== null && code > 128 && code < 128 + 65) return `the sandbox's agent was killed by ${signalName(code - 128)}`;
  return `the sandbox's agent exited with code ${code}`;
}

function signalName(n: number): string {
  return Object.entries(constants.signals).find(([, v]) => v === n)?.[0] ?? `signal ${n}`;
}

/**
 * Starts one egress sandbox as real ones start and waits for its network: undefined when it came
 * up, else why not (missing capabilities, no tap device, a broken slirp4netns).
 */
export async function probeEgress(options: IsolationOptions, uid: number | undefined, egress: EgressOptions): Promise<string | undefined> {
  const proc = new SandboxProcess(options, { memoryMb: 64, diskMb: 1, cpuMhz: 100, pids: 64, openFiles: 64 }, uid, undefined, { mounts: {}, egress });
  let timer: NodeJS.Timeout | undefined;
  try {
    await Promise.race([
      proc.networkReady,
      proc.exited.then(() => Promise.reject(new Error("the probe sandbox ended"))),
      new Promise((_, reject) => (timer = setTimeout(() => reject(new Error("the network did not come up in time")), EGRESS_READY_TIMEOUT_MS))),
    ]);
    return undefined;
  } catch (err) {
    return (err as Error).message;
  } finally {
    clearTimeout(timer);
    proc.kill();
    await proc.exited;
  }
}
