import type { Msg, NatsConnection, Subscription } from "@nats-io/transport-node";
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import type { Logger } from "../../lib/log.js";
import { subjects } from "../../lib/nats/subjects.js";
import type { SecretStore } from "../secrets/mod.js";
import { EGRESS_DNS, type EgressOptions } from "./egress.js";
import { roomOf, shortage, type HostBudget, type Reserved } from "./admission.js";
import { SandboxCgroup, type CgroupMode, type IsolationOptions, type SandboxLimits } from "./isolation.js";
import { encodeJson, hostCall, type CallOf, type HostCall, type HostHeartbeat, type HostReply } from "./protocol.js";
import { nowSeconds, type SandboxStore } from "./records.js";
import * as states from "./sandbox-states.js";
import { SandboxProcess } from "./sandbox-process.js";

export interface SandboxHostOptions {
  hostId: string;
  heartbeatMs: number;
  maxSandboxes: number;
  /** The host's CPU (cores × core MHz): one sandbox's quota is at most this. */
  cpuMhz: number;
  /** Sandboxes' `cpu_mhz` may add up to this many times `cpuMhz` (admission.ts). */
  cpuOvercommit: number;
  coreMhz: number;
  /** Memory for sandboxes' `memory_mb + disk_mb`, a hard limit. */
  memoryMb: number;
  /** First host uid of the per-sandbox range; undefined: sandboxes run as this process's uid. */
  uidBase: number | undefined;
  isolation: IsolationOptions;
  cgroups: CgroupMode;
  /** Outbound network for sandboxes that ask (network: "egress"); undefined: this host offers none. */
  egress: EgressOptions | undefined;
  /** A directory of this host's own (made 0711): read-only inputs of its sandboxes, its resolv.conf. */
  workDir: string;
}

interface LiveSandbox {
  id: string;
  project: string;
  proc: SandboxProcess;
  cgroup: SandboxCgroup | undefined;
  slot: number;
  limits: SandboxLimits;
  expiresAtMs: number;
  idleMs: number | undefined;
  lastActive: number;
  activeExecs: number;
  /** exec id (the gateway's) -> the agent's call id, while it runs. */
  execs: Map<string, string>;
  stopReason: states.TerminationReason | undefined;
  /** Resolves once the record says how it ended. */
  finished: Promise<void>;
  /** Host directory bound read-only at /workspace/input, when the sandbox has one. */
  inputDir: string | undefined;
  inputBytes: number;
}

const READY_TIMEOUT_MS = 15_000;
const OOM = "the sandbox ran out of memory";
const FILES_PER_SANDBOX = 1024;
/** Processes per sandbox (the pids cgroup, and RLIMIT_NPROC of its uid). */
export const SANDBOX_PIDS = 256;
/** Bytes of read-only input one sandbox may be given (on the host's disk, not in its memory). */
export const MAX_INPUT_BYTES = 2 * 1024 * 1024 * 1024;
const INPUT_NAME = /^[^/\u0000]{1,255}$/;

/** Work directories of hosts are named this plus the host's id. */
export const WORK_DIR_PREFIX = "tributary-sandbox-host-";

/** Removes work directories of hosts killed before they could (their `pid` file names a process that is gone). */
export function removeStaleWorkDirs(parent: string, own: string): void {
  const prefix = WORK_DIR_PREFIX;
  let entries: string[];
  try {
    entries = readdirSync(parent).filter((e) => e.startsWith(prefix) && e !== own);
  } catch {
    return;
  }
  for (const entry of entries) {
    try {
      const pid = Number(readFileSync(join(parent, entry, "pid"), "utf8"));
      if (!Number.isInteger(pid) || pid <= 0) continue;
      try {
        process.kill(pid, 0);
        continue; // its host lives
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== "ESRCH") continue;
      }
      rmSync(join(parent, entry), { recursive: true, force: true });
    } catch {
      // not a host's directory, or removed meanwhile
    }
  }
}

/**
 * A sandbox host: starts sandboxes on this machine when a gateway asks (create), runs commands
 * and file operations in them, and ends them on request, at their deadline, when idle, or when
 * they die (oom, error), writing each end to the sandbox's record. Announces its free capacity
 * in heartbeats. Calls arrive over NATS request/reply on this host's own subject.
 */
export class SandboxHost {
  private readonly sandboxes = new Map<string, LiveSandbox>();
  private readonly freeSlots: number[];
  private subscription: Subscription | undefined;
  private heartbeatTimer: NodeJS.Timeout | undefined;
  private tickTimer: NodeJS.Timeout | undefined;
  private draining = false;

  constructor(
    private readonly nc: NatsConnection,
    private readonly store: SandboxStore,
    private readonly secrets: SecretStore,
    private readonly options: SandboxHostOptions,
    private readonly log: Logger,
  ) {
    this.freeSlots = Array.from({ length: options.maxSandboxes }, (_, i) => options.maxSandboxes - 1 - i);
    removeStaleWorkDirs(dirname(options.workDir), basename(options.workDir));
    mkdirSync(options.workDir, { recursive: true, mode: 0o711 });
    // Whose directory this is: a later host removes it once this process is gone (a kill -9 leaves it).
    writeFileSync(join(options.workDir, "pid"), String(process.pid));
    // Egress sandboxes resolve names through slirp4netns's DNS forwarder (to this host's resolver).
    writeFileSync(this.resolvConf, `nameserver ${EGRESS_DNS}\n`, { mode: 0o644 });
    writeFileSync(this.hostsFile, "127.0.0.1 localhost sandbox\n::1 localhost\n", { mode: 0o644 });
  }

  private get hostsFile(): string {
    return join(this.options.workDir, "hosts");
  }

  private get resolvConf(): string {
    return join(this.options.workDir, "resolv.conf");
  }

  start(): void {
    this.subscription = this.nc.subscribe(subjects.sandboxHostRpc(this.options.hostId), {
      callback: (err, msg) => {
        if (!err) void this.onCall(msg);
      },
    });
    this.heartbeat();
    this.heartbeatTimer = setInterval(() => this.heartbeat(), this.options.heartbeatMs);
    this.tickTimer = setInterval(() => this.tick(), 250);
  }

  /** Ends every sandbox (their records say host_lost: the host went away under them). */
  async stop(): Promise<void> {
    this.draining = true;
    this.heartbeat();
    this.subscription?.unsubscribe();
    clearInterval(this.tickTimer);
    await Promise.all([...this.sandboxes.values()].map((s) => this.end(s, "host_lost")));
    clearInterval(this.heartbeatTimer);
    rmSync(this.options.workDir, { recursive: true, force: true });
  }

  private get budget(): HostBudget {
    return { sandboxesMax: this.options.maxSandboxes, cpuMhz: this.options.cpuMhz, cpuOvercommit: this.options.cpuOvercommit, memoryMb: this.options.memoryMb };
  }

  private reserved(): Reserved {
    let cpuMhz = 0;
    let memoryMb = 0;
    for (const s of this.sandboxes.values()) {
      cpuMhz += s.limits.cpuMhz;
      memoryMb += s.limits.memoryMb + s.limits.diskMb;
    }
    return { sandboxes: this.sandboxes.size, cpuMhz, memoryMb };
  }

  private heartbeat(): void {
    const reserved = this.reserved();
    const beat: HostHeartbeat = {
      host_id: this.options.hostId,
      state: this.draining ? "draining" : "ready",
      interval_ms: this.options.heartbeatMs,
      ...roomOf(this.budget, reserved),
      sandbox_ids: [...this.sandboxes.keys()],
      egress: this.options.egress !== undefined,
    };
    this.nc.publish(subjects.sandboxHostHeartbeat, encodeJson(beat));
  }

  private tick(): void {
    const now = Date.now();
    for (const s of this.sandboxes.values()) {
      if (s.stopReason) continue;
      if (now >= s.expiresAtMs) void this.end(s, "timeout");
      else if (s.idleMs !== undefined && s.activeExecs === 0 && now - s.lastActive >= s.idleMs) void this.end(s, "idle");
    }
  }

  private async onCall(msg: Msg): Promise<void> {
    let reply: HostReply;
    try {
      const call = hostCall.parseBytes(msg.subject, msg.data);
      reply = await this.handle(call);
    } catch (err) {
      this.log.error("sandbox call failed", { err: err instanceof Error ? err.message : String(err) });
      reply = { ok: false, code: "error", message: "the sandbox host could not complete the call" };
    }
    if (msg.reply) msg.respond(encodeJson(reply));
  }

  private handle(call: HostCall): Promise<HostReply> {
    if (call.op === "create") return this.create(call);
    const s = this.sandboxes.get(call.sandbox_id);
    if (!s || s.project !== call.project) return Promise.resolve({ ok: false, code: "no_sandbox", message: "no such sandbox on this host" });
    switch (call.op) {
      case "stop":
        return this.end(s, call.reason).then(() => ({ ok: true }));
      case "extend":
        s.expiresAtMs = call.expires_at * 1000;
        return Promise.resolve({ ok: true });
      case "exec":
        return this.exec(s, call);
      case "kill": {
        const target = s.execs.get(call.exec_id);
        if (target) void s.proc.call({ op: "kill", target });
        return Promise.resolve({ ok: true });
      }
      case "input":
      case "resize": {
        const target = s.execs.get(call.exec_id);
        if (!target) return Promise.resolve({ ok: false, code: "not_running", message: "the session ended" });
        s.lastActive = Date.now();
        const op = call.op === "input" ? { op: "pty_in", target, data: call.data } : { op: "pty_resize", target, rows: call.rows, cols: call.cols };
        return s.proc.call(op).then((line) => (line.t === "ok" ? { ok: true } : { ok: false, code: "not_running", message: "the session ended" }));
      }
      case "stage":
        return Promise.resolve(this.stage(s, call));
      case "write":
      case "read":
      case "list":
        return this.fileCall(s, call);
    }
  }

  private async create(call: CallOf<"create">): Promise<HostReply> {
    if (this.draining) return { ok: false, code: "no_capacity", message: "the host is draining" };
    if (this.sandboxes.has(call.sandbox_id)) return { ok: false, code: "invalid", message: "the sandbox exists already" };
    const egress = call.network === "egress";
    if (egress && !this.options.egress) return { ok: false, code: "no_egress", message: "this host offers no network egress" };
    const limits: SandboxLimits = { cpuMhz: call.limits.cpu_mhz, memoryMb: call.limits.memory_mb, diskMb: call.limits.disk_mb, pids: SANDBOX_PIDS, openFiles: FILES_PER_SANDBOX };
    // Gateways place by heartbeats, which lag: the host's own count decides.
    const short = shortage(this.budget, this.reserved(), call.limits);
    const slot = short ? undefined : this.freeSlots.pop();
    if (slot === undefined) return { ok: false, code: "no_capacity", message: short?.detail ?? `sandboxes: no uid left of ${this.options.maxSandboxes}` };
    let revealed: Record<string, string>;
    try {
      const { values, missing } = await this.secrets.reveal(call.project, call.secrets);
      if (missing.length > 0) {
        this.freeSlots.push(slot);
        return { ok: false, code: "secret_not_found", message: `No such secret: ${missing.join(", ")}.` };
      }
      revealed = values;
    } catch (err) {
      this.freeSlots.push(slot);
      // The error names no value; the cause (a missing master key) is the operator's to fix.
      this.log.error("secrets could not be decrypted", { sandboxId: call.sandbox_id, err: err instanceof Error ? err.message : "error" });
      return { ok: false, code: "error", message: "the sandbox's secrets could not be decrypted" };
    }
    // The id passed the gateway's check (SANDBOX_ID); basename keeps it one path segment regardless.
    const inputDir = call.input_dir ? join(this.options.workDir, basename(call.sandbox_id), "input") : undefined;
    try {
      if (inputDir) mkdirSync(inputDir, { recursive: true, mode: 0o755 });
    } catch (err) {
      this.freeSlots.push(slot);
      this.log.error("sandbox input directory could not be made", { sandboxId: call.sandbox_id, err: (err as Error).message });
      return { ok: false, code: "error", message: "the sandbox's input directory could not be made" };
    }
    const cgroup = SandboxCgroup.create(this.options.cgroups, call.sandbox_id, limits, this.options.coreMhz);
    const uid = this.options.uidBase === undefined ? undefined : this.options.uidBase + slot;
    const proc = new SandboxProcess(this.options.isolation, limits, uid, cgroup, {
      mounts: { inputDir, egressResolvConf: this.resolvConf, hostsFile: this.hostsFile },
      egress: egress ? this.options.egress : undefined,
    });
    let markFinished!: () => void;
    const s: LiveSandbox = {
      id: call.sandbox_id,
      project: call.project,
      proc,
      cgroup,
      slot,
      limits,
      expiresAtMs: call.expires_at * 1000,
      idleMs: call.idle_timeout_seconds === null ? undefined : call.idle_timeout_seconds * 1000,
      lastActive: Date.now(),
      activeExecs: 0,
      execs: new Map(),
      stopReason: undefined,
      finished: new Promise((resolve) => (markFinished = resolve)),
      inputDir,
      inputBytes: 0,
    };
    this.sandboxes.set(s.id, s);
    void proc.exited.then(() => this.onExit(s).finally(markFinished));
    let timer: NodeJS.Timeout | undefined;
    const started = await Promise.race([
      Promise.all([proc.ready, proc.networkReady]).then(
        () => true,
        (err: Error) => {
          this.log.error("sandbox network did not come up", { sandboxId: s.id, err: err.message });
          return false;
        },
      ),
      proc.exited.then(() => false),
      new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), READY_TIMEOUT_MS))),
    ]);
    clearTimeout(timer);
    if (!started) {
      await this.end(s, "error");
      return { ok: false, code: "error", message: "the sandbox did not start" };
    }
    const init = await proc.call({ op: "init", env: { ...call.env, ...revealed } });
    if (init.t !== "ok") {
      await this.end(s, "error");
      return { ok: false, code: "error", message: "the sandbox did not start" };
    }
    const startedAt = nowSeconds();
    const record = await this.store.transition(s.project, s.id, (current) => states.start(current, startedAt));
    if (!record || record.sandbox.status !== "running") {
      // Stopped or deleted while it started: it does not run on.
      await this.end(s, "deleted");
      return { ok: false, code: "no_sandbox", message: "the sandbox was stopped while it started" };
    }
    this.log.info("sandbox started", { sandboxId: s.id, pid: proc.pid, uid, cgroup: this.options.cgroups.version, network: egress ? "egress" : "none" });
    this.heartbeat();
    return { ok: true, started_at: startedAt };
  }

  /** Ends the sandbox for `reason` (once) and waits until its record says so. */
  private async end(s: LiveSandbox, reason: states.TerminationReason): Promise<void> {
    s.stopReason ??= reason;
    s.proc.kill();
    await s.finished;
  }

  /**
   * Why the sandbox failed when its processes ended without this host ending them (its agent
   * died, or the memory limit killed it); undefined while they run, or when they were ended on
   * purpose.
   */
  private failureOf(s: LiveSandbox): string | undefined {
    if (s.stopReason === "oom") return OOM;
    if (s.stopReason !== undefined || s.proc.endedHow === undefined) return undefined;
    return (s.cgroup?.oomKills() ?? 0) > 0 ? OOM : s.proc.endedHow;
  }

  /** The answer to a call on a sandbox that is ending: failed (saying how), or stopping. */
  private notRunning(s: LiveSandbox): HostReply {
    const failure = this.failureOf(s);
    return failure ? { ok: false, code: "sandbox_failed", message: failure } : { ok: false, code: "not_running", message: "the sandbox is stopping" };
  }

  private async onExit(s: LiveSandbox): Promise<void> {
    const failure = this.failureOf(s);
    const reason: states.TerminationReason = failure === OOM ? "oom" : failure !== undefined || s.stopReason === undefined ? "error" : s.stopReason;
    const detail = failure ?? (reason === "error" ? "the sandbox's processes ended unexpectedly" : null);
    if (failure) this.log.warn("sandbox failed", { sandboxId: s.id, failure });
    // The record first: until it says so, calls still find the sandbox here and are told it failed.
    try {
      await this.store.transition(s.project, s.id, (current) => states.end(current, reason, nowSeconds(), detail));
    } catch (err) {
      this.log.error("sandbox record could not be updated", { sandboxId: s.id, err });
    }
    this.sandboxes.delete(s.id);
    this.freeSlots.push(s.slot);
    await s.cgroup?.remove();
    if (s.inputDir) rmSync(join(s.inputDir, ".."), { recursive: true, force: true });
    this.log.info("sandbox ended", { sandboxId: s.id, reason });
    this.heartbeat();
  }

  private async exec(s: LiveSandbox, call: CallOf<"exec">): Promise<HostReply> {
    if (s.stopReason || !s.proc.alive) return this.notRunning(s);
    s.activeExecs++;
    s.lastActive = Date.now();
    s.execs.set(call.exec_id, s.proc.peekNextId());
    const events = call.events_subject;
    const done = s.proc
      .call(
        call.pty
          ? { op: "pty_open", argv: call.argv, cwd: call.cwd, env: call.env, timeout_ms: call.timeout_ms, rows: call.pty.rows, cols: call.pty.cols }
          : { op: "exec", argv: call.argv, cwd: call.cwd, env: call.env, stdin: call.stdin, timeout_ms: call.timeout_ms, max_output: call.max_output, stream: events !== null },
        events === null ? undefined : { onOutput: (stream, data) => this.nc.publish(events, encodeJson({ t: stream, d: data.toString("base64") })) },
      )
      .then((line) => {
        s.activeExecs--;
        s.lastActive = Date.now();
        s.execs.delete(call.exec_id);
        const oom = (s.cgroup?.oomKills() ?? 0) > 0;
        // A command the memory limit killed ends its sandbox as oom: the sandbox's own process may be next.
        if (oom) void this.end(s, "oom");
        if (line.t === "error" && line.code === "invalid") return { ok: false, code: "invalid", message: line.message ?? "invalid" } satisfies HostReply;
        if (line.t !== "exit") return s.proc.alive ? ({ ok: false, code: "not_running", message: line.message ?? "the sandbox ended" } satisfies HostReply) : this.notRunning(s);
        return {
          ok: true,
          exit_code: typeof line.code === "number" ? line.code : null,
          signal: line.signal ?? null,
          timed_out: line.timed_out ?? false,
          truncated: line.truncated ?? false,
          oom_killed: oom,
          stdout: line.stdout ?? "",
          stderr: line.stderr ?? "",
        } satisfies HostReply;
      });
    if (events === null) return done;
    void done.then((r) =>
      this.nc.publish(
        events,
        encodeJson(
          r.ok
            ? { t: "exit", exit_code: r.exit_code ?? null, signal: r.signal ?? null, timed_out: r.timed_out ?? false, truncated: r.truncated ?? false, oom_killed: r.oom_killed ?? false }
            : { t: "error", message: r.message ?? "the sandbox ended" },
        ),
      ),
    );
    return { ok: true };
  }

  /** Writes a piece of a read-only input file (host side: the sandbox only reads it). */
  private stage(s: LiveSandbox, call: CallOf<"stage">): HostReply {
    if (s.stopReason || !s.proc.alive) return this.notRunning(s);
    if (!s.inputDir) return { ok: false, code: "invalid", message: "the sandbox has no input directory" };
    if (!INPUT_NAME.test(call.name) || call.name === "." || call.name === "..") return { ok: false, code: "invalid", message: "not a file name" };
    const data = Buffer.from(call.data, "base64");
    if (s.inputBytes + data.length > MAX_INPUT_BYTES) return { ok: false, code: "invalid", message: `at most ${MAX_INPUT_BYTES} bytes of input` };
    s.inputBytes += data.length;
    writeFileSync(join(s.inputDir, call.name), data, { flag: call.append ? "a" : "w", mode: 0o644 });
    return { ok: true };
  }

  private async fileCall(s: LiveSandbox, call: CallOf<"write" | "read" | "list">): Promise<HostReply> {
    if (s.stopReason || !s.proc.alive) return this.notRunning(s);
    s.lastActive = Date.now();
    const { op: _op, project: _p, sandbox_id: _s, ...args } = call;
    const line = await s.proc.call({ op: call.op, ...args });
    s.lastActive = Date.now();
    if (line.t === "error" && !s.proc.alive) return this.notRunning(s);
    if (line.t === "error") {
      const code = typeof line.code === "string" ? line.code : "error";
      return { ok: false, code, message: line.message ?? "the file operation failed" };
    }
    if (line.t !== "ok") return { ok: false, code: "error", message: "unexpected answer from the sandbox" };
    return { ok: true, data: line.d, size: line.size, entries: line.entries };
  }
}
