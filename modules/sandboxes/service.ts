import type { Subscription } from "@nats-io/transport-node";
import { newId, newSortableId } from "../../lib/ids.js";
import type { Logger } from "../../lib/log.js";
import { pageOfSorted, type Page, type PageQuery } from "../../lib/page.js";
import { subjects } from "../../lib/nats/subjects.js";
import { errors, NoSandboxHost, type DomainError } from "../errors/mod.js";
import type { SandboxHostClient, SandboxHostDirectory } from "./client.js";
import type { DirEntry, ExecEvent, HostCall, HostReply } from "./protocol.js";
import { nowSeconds, SANDBOX_ID, type SandboxObject, type SandboxStore, type StoredSandbox } from "./records.js";
import * as states from "./sandbox-states.js";
import type { ExecRequest, SandboxCreateRequest } from "./requests.js";

export interface SandboxServiceOptions {
  maxPerProject: number;
  execOutputBytes: number;
  streamOutputBytes: number;
}

/** Bytes of a file moved per call between the gateway and a host (well under NATS's payload limit once base64). */
export const FILE_CHUNK_BYTES = 256 * 1024;
const CALL_TIMEOUT_MS = 15_000;
/** A create at the limit checks the live index against its records at most this often (per project). */
const RECONCILE_INTERVAL_S = 5;
const CREATE_TIMEOUT_MS = 30_000;
/** How long a create waits for a first heartbeat when no host is known. */
const HOST_WAIT_MS = 2_000;
/** How often a streamed exec checks that its host is still heard from. */
const HOST_WATCH_MS = 500;

/** A 409 for a call on a sandbox that failed (its agent died, it ran out of memory, its host was lost), saying why. */
function failedError(id: string, why: string): DomainError {
  return errors.conflict(`The sandbox ${id} failed: ${why}.`, "sandbox_id", "sandbox_failed");
}

export interface ExecResult {
  object: "sandbox.exec_result";
  exit_code: number | null;
  signal: string | null;
  timed_out: boolean;
  truncated: boolean;
  oom_killed: boolean;
  stdout: string;
  stderr: string;
}

/** An interactive shell: a streamed exec that also takes input and terminal size changes. */
export interface ShellSession extends ExecStream {
  input(data: Buffer): void;
  resize(rows: number, cols: number): void;
}

/** A streamed exec: events arrive through `onEvent`; `kill` ends the command (client gone, too slow). */
export interface ExecStream {
  kill(): void;
  close(): void;
}

/**
 * The sandbox API behind the gateway's routes: records in KV (scoped to the caller's project),
 * placement on a host from heartbeats, and every later call routed to that host.
 */
export class SandboxService {
  constructor(
    private readonly store: SandboxStore,
    private readonly directory: SandboxHostDirectory,
    private readonly hosts: SandboxHostClient,
    private readonly options: SandboxServiceOptions,
    private readonly log: Logger,
  ) {}

  private notFound(id: string): DomainError {
    return errors.notFound(`No such sandbox: ${id.slice(0, 64)}`, "sandbox_id");
  }

  /** The record, or a 404 (another project's sandbox, a malformed id, or none). */
  async record(project: string, id: string): Promise<StoredSandbox> {
    if (!SANDBOX_ID.test(id)) throw this.notFound(id);
    const found = await this.store.get(project, id);
    if (!found) throw this.notFound(id);
    return found;
  }

  async create(project: string, request: SandboxCreateRequest): Promise<SandboxObject> {
    const largest = this.directory.largest();
    if (largest && (request.cpu_mhz > largest.cpu_mhz || request.memory_mb + request.disk_mb > largest.memory_mb))
      throw errors.invalidParam(
        request.cpu_mhz > largest.cpu_mhz ? "cpu_mhz" : "memory_mb",
        `No sandbox host can hold this sandbox: the largest offers ${largest.cpu_mhz} cpu_mhz and ${largest.memory_mb} MB for memory_mb + disk_mb together.`,
      );
    if (request.network === "egress" && this.directory.offersEgress() === false)
      throw errors.invalidParam("network", "Invalid value for 'network': no sandbox host here offers network egress (TRIBUTARY_SANDBOX_EGRESS on the hosts, see docs/platform.md).");
    const need = { cpu_mhz: request.cpu_mhz, memory_mb: request.memory_mb, disk_mb: request.disk_mb, egress: request.network === "egress" };
    let placement = this.directory.place(need);
    // Just after a gateway (re)start no heartbeat has come yet: wait for one rather than fail.
    for (let waited = 0; placement.kind === "none" && waited < HOST_WAIT_MS; waited += 100) {
      await new Promise((r) => setTimeout(r, 100));
      placement = this.directory.place(need);
    }
    if (placement.kind === "none") throw new NoSandboxHost({ state: "none", detail: null, retryAfterSeconds: 2 });
    if (placement.kind === "full") throw new NoSandboxHost({ state: "full", detail: placement.detail, retryAfterSeconds: 5 });
    const host = placement.host;
    const id = newSortableId("sbx_");
    await this.admit(project, id);
    const now = nowSeconds();
    const sandbox: SandboxObject = {
      id,
      object: "sandbox",
      status: "starting",
      termination_reason: null,
      error: null,
      created_at: now,
      started_at: null,
      expires_at: now + request.timeout_seconds,
      stopped_at: null,
      timeout_seconds: request.timeout_seconds,
      idle_timeout_seconds: request.idle_timeout_seconds,
      network: request.network,
      resources: { cpu_mhz: request.cpu_mhz, memory_mb: request.memory_mb, disk_mb: request.disk_mb },
      metadata: request.metadata,
      env_names: Object.keys(request.env).sort(),
      secrets: request.secrets,
    };
    try {
      await this.store.create({ sandbox, project, host_id: host.host_id });
    } catch (err) {
      await this.store.release(project, id).catch(() => {});
      throw err;
    }
    let reply: HostReply;
    try {
      reply = await this.hosts.call(
        host.host_id,
        {
          op: "create",
          project,
          sandbox_id: sandbox.id,
          limits: sandbox.resources,
          env: request.env,
          secrets: request.secrets,
          expires_at: sandbox.expires_at,
          idle_timeout_seconds: sandbox.idle_timeout_seconds,
          network: request.network,
          input_dir: request.input_dir === true,
        },
        CREATE_TIMEOUT_MS,
      );
    } catch (err) {
      await this.store.transition(project, sandbox.id, (s) => states.end(s, "error", nowSeconds(), "the sandbox host did not answer"));
      throw err;
    }
    if (!reply.ok) {
      const final = await this.store.transition(project, sandbox.id, (s) => states.end(s, "error", nowSeconds(), reply.message ?? "the sandbox did not start"));
      if (reply.code === "secret_not_found") {
        await this.store.delete(project, sandbox.id);
        throw errors.invalidParam("secrets", reply.message ?? "No such secret.", "secret_not_found");
      }
      if (reply.code === "no_capacity") {
        // Placed by a heartbeat that lagged: the host's own count says what it lacks.
        await this.store.delete(project, sandbox.id);
        throw new NoSandboxHost({ state: "full", detail: reply.message ?? "no room", retryAfterSeconds: 1 });
      }
      if (reply.code === "no_egress") {
        await this.store.delete(project, sandbox.id);
        throw errors.unavailable("The sandbox host chosen had no room after all. Please retry.", 1);
      }
      return final?.sandbox ?? (await this.record(project, sandbox.id)).sandbox;
    }
    return (await this.record(project, sandbox.id)).sandbox;
  }

  /**
   * Admits sandbox `id` against the project's limit of sandboxes not yet stopped (see the store's
   * live index: a compare-and-set, so racing creates cannot pass it together). At the limit the
   * index is checked against its records first (at most every few seconds, at most `maxPerProject`
   * reads), so entries a crash left behind do not hold the project at its limit.
   */
  private async admit(project: string, id: string): Promise<void> {
    const max = this.options.maxPerProject;
    let { admitted, live } = await this.store.admit(project, id, max);
    if (!admitted && (await this.store.reconcile(project, RECONCILE_INTERVAL_S)) !== undefined) ({ admitted, live } = await this.store.admit(project, id, max));
    if (!admitted) throw errors.invalidParam(null, `This project has ${live} sandboxes not yet stopped, the limit is ${max}. Stop some first.`, "sandbox_limit_reached");
  }

  /**
   * One page of the project's sandboxes. Live statuses are listed from the live index (bounded
   * by the limit); other listings read one page of records at a time (pageRecords).
   */
  async list(project: string, query: PageQuery, filter: { status?: states.SandboxStatus; metadata: Record<string, string> }): Promise<Page<SandboxObject>> {
    // `after` names a sandbox of this project (as OpenAI's lists answer an unknown cursor): one read.
    if (query.after !== undefined && !(SANDBOX_ID.test(query.after) && (await this.store.get(project, query.after))))
      throw errors.invalidParam("after", `No sandbox with id '${query.after.slice(0, 64)}' in this list.`);
    const keep = (s: SandboxObject) => (filter.status === undefined || s.status === filter.status) && Object.entries(filter.metadata).every(([k, v]) => s.metadata[k] === v);
    if (filter.status === undefined || states.isFinal(filter.status)) return this.store.page(project, query, keep);
    const live = (await this.store.liveRecords(project)).map((r) => r.sandbox).filter(keep);
    live.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
    return pageOfSorted(live, query);
  }

  /** Stops the sandbox (idempotent): the record once the host ended it. */
  async stop(project: string, id: string, reason: "user_stop" | "deleted" = "user_stop"): Promise<SandboxObject> {
    const record = await this.record(project, id);
    if (states.isFinal(record.sandbox.status)) return record.sandbox;
    await this.store.transition(project, id, states.stopping);
    if (!this.directory.alive(record.host_id)) {
      const final = await this.store.transition(project, id, (s) => states.end(s, "host_lost", nowSeconds(), "the sandbox host stopped answering"));
      return final?.sandbox ?? (await this.record(project, id)).sandbox;
    }
    const reply = await this.hosts.call(record.host_id, { op: "stop", project, sandbox_id: id, reason }, CALL_TIMEOUT_MS).catch(() => undefined);
    if (!reply?.ok) {
      // The host does not run it (any more): nothing runs, so the record ends here.
      await this.store.transition(project, id, (s) => states.end(s, reason, nowSeconds()));
    }
    return (await this.record(project, id)).sandbox;
  }

  async delete(project: string, id: string): Promise<void> {
    await this.stop(project, id, "deleted");
    await this.store.delete(project, id);
  }

  async extend(project: string, id: string, timeoutSeconds: number): Promise<SandboxObject> {
    const record = await this.running(project, id);
    const expiresAt = nowSeconds() + timeoutSeconds;
    const updated = await this.store.transition(project, id, (s) => states.extend(s, expiresAt));
    if (!updated || states.isFinal(updated.sandbox.status)) throw errors.conflict(`The sandbox ${id} is not running.`, "sandbox_id", "sandbox_not_running");
    await this.call(record, { op: "extend", project, sandbox_id: id, expires_at: expiresAt });
    return updated.sandbox;
  }

  /** The record of a running sandbox, or a 404 / 409 (sandbox_failed naming why, sandbox_not_running). */
  async running(project: string, id: string): Promise<StoredSandbox> {
    const record = await this.record(project, id);
    if (record.sandbox.status === "failed") throw failedError(id, record.sandbox.error ?? `it ended as ${record.sandbox.termination_reason}`);
    if (record.sandbox.status !== "running")
      throw errors.conflict(`The sandbox ${id} is ${record.sandbox.status}; it must be running.`, "sandbox_id", "sandbox_not_running");
    return record;
  }

  private async call(record: StoredSandbox, call: HostCall, timeoutMs = CALL_TIMEOUT_MS): Promise<HostReply> {
    const reply = await this.hosts.call(record.host_id, call, timeoutMs);
    if (reply.ok) return reply;
    switch (reply.code) {
      case "sandbox_failed":
        throw failedError(record.sandbox.id, reply.message ?? "the sandbox failed");
      case "no_sandbox":
      case "not_running": {
        // It ended since the record was read: a failed one says why.
        const now = await this.store.get(record.project, record.sandbox.id).catch(() => undefined);
        if (now?.sandbox.status === "failed") throw failedError(record.sandbox.id, now.sandbox.error ?? `it ended as ${now.sandbox.termination_reason}`);
        throw errors.conflict(`The sandbox ${record.sandbox.id} is not running.`, "sandbox_id", "sandbox_not_running");
      }
      case "not_found":
        throw errors.notFound(`No such file or directory in the sandbox: ${"path" in call ? call.path.slice(0, 256) : ""}`, "path");
      case "invalid": {
        const param = call.op === "exec" ? "cwd" : "path";
        throw errors.invalidParam(param, `Invalid value for '${param}': ${(reply.message ?? "invalid").slice(0, 200)}.`);
      }
      case "os_error":
      case "is_directory":
      case "not_directory":
        throw errors.invalidParam("path", `Invalid value for 'path': ${reply.message ?? "invalid"}.`, reply.code);
      default:
        this.log.warn("sandbox host call failed", { sandboxId: record.sandbox.id, op: call.op, code: reply.code });
        throw errors.unavailable("The sandbox host could not complete the call. Please retry.", 1);
    }
  }

  async exec(project: string, id: string, request: ExecRequest): Promise<ExecResult> {
    const record = await this.running(project, id);
    const reply = await this.call(record, this.execCall(project, id, request, null, newId("exec_")), request.timeout_seconds * 1000 + CALL_TIMEOUT_MS);
    return {
      object: "sandbox.exec_result",
      exit_code: reply.exit_code ?? null,
      signal: reply.signal ?? null,
      timed_out: reply.timed_out ?? false,
      truncated: reply.truncated ?? false,
      oom_killed: reply.oom_killed ?? false,
      stdout: Buffer.from(reply.stdout ?? "", "base64").toString("utf8"),
      stderr: Buffer.from(reply.stderr ?? "", "base64").toString("utf8"),
    };
  }

  /**
   * An interactive shell on a terminal of its own: output (terminal bytes) as stdout events, then
   * exit; `input` and `resize` drive it. It lives at most until the sandbox's deadline.
   */
  async openShell(project: string, id: string, size: { rows: number; cols: number }, onEvent: (event: ExecEvent) => void): Promise<ShellSession> {
    const record = await this.running(project, id);
    const shell = ["/bin/bash", "-i"];
    const left = Math.max(1, record.sandbox.expires_at - nowSeconds());
    const execId = newId("exec_");
    const stream = await this.execStream(project, id, { argv: shell, cwd: "/workspace", env: {}, stdin: "", timeout_seconds: left, stream: true }, onEvent, { execId, pty: size, record });
    const call = (c: HostCall) => this.hosts.call(record.host_id, c, CALL_TIMEOUT_MS).catch(() => undefined);
    return {
      ...stream,
      input: (data: Buffer) => void call({ op: "input", project, sandbox_id: id, exec_id: execId, data: data.toString("base64") }),
      resize: (rows: number, cols: number) => void call({ op: "resize", project, sandbox_id: id, exec_id: execId, rows, cols }),
    };
  }

  /** Starts a streamed exec; its events go to `onEvent` (the last is exit or error). */
  async execStream(
    project: string,
    id: string,
    request: ExecRequest,
    onEvent: (event: ExecEvent) => void,
    options: { execId?: string; pty?: { rows: number; cols: number }; record?: StoredSandbox } = {},
  ): Promise<ExecStream> {
    const record = options.record ?? (await this.running(project, id));
    const execId = options.execId ?? newId("exec_");
    let over = false;
    const deliver = (event: ExecEvent) => {
      if (over) return;
      if (event.t !== "stdout" && event.t !== "stderr") over = true;
      onEvent(event);
    };
    let subscription: Subscription | undefined = this.hosts.subscribeExec(execId, deliver);
    // A host that dies sends no exit: its silence ends the stream.
    const watch = setInterval(() => {
      if (!this.directory.alive(record.host_id)) deliver({ t: "error", message: "The sandbox's host was lost." });
    }, HOST_WATCH_MS);
    const close = () => {
      clearInterval(watch);
      subscription?.unsubscribe();
      subscription = undefined;
    };
    try {
      await this.call(record, { ...this.execCall(project, id, request, subjects.sandboxExecEvents(execId), execId), pty: options.pty ?? null } as HostCall);
    } catch (err) {
      close();
      throw err;
    }
    return {
      kill: () => void this.hosts.call(record.host_id, { op: "kill", project, sandbox_id: id, exec_id: execId }, CALL_TIMEOUT_MS).catch(() => {}),
      close,
    };
  }

  private execCall(project: string, id: string, request: ExecRequest, events: string | null, execId: string): HostCall {
    return {
      op: "exec",
      project,
      sandbox_id: id,
      argv: request.argv,
      cwd: request.cwd,
      env: request.env,
      stdin: Buffer.from(request.stdin, "utf8").toString("base64"),
      timeout_ms: request.timeout_seconds * 1000,
      max_output: events === null ? this.options.execOutputBytes : this.options.streamOutputBytes,
      events_subject: events,
      exec_id: execId,
    };
  }

  /** Writes `chunks` to `path` in the workspace, in pieces; the file's size. */
  async writeFile(project: string, id: string, path: string, chunks: AsyncIterable<Buffer>): Promise<number> {
    const record = await this.running(project, id);
    let pending: Buffer[] = [];
    let pendingBytes = 0;
    let first = true;
    let size = 0;
    const flush = async () => {
      const data = Buffer.concat(pending);
      pending = [];
      pendingBytes = 0;
      const reply = await this.call(record, { op: "write", project, sandbox_id: id, path, data: data.toString("base64"), append: !first });
      first = false;
      size = reply.size ?? size;
    };
    for await (const chunk of chunks) {
      let rest = chunk;
      while (rest.length > 0) {
        const take = rest.subarray(0, FILE_CHUNK_BYTES - pendingBytes);
        pending.push(take);
        pendingBytes += take.length;
        rest = rest.subarray(take.length);
        if (pendingBytes >= FILE_CHUNK_BYTES) await flush();
      }
    }
    if (first || pendingBytes > 0) await flush();
    return size;
  }

  /** Writes a read-only input file (`name`: one path segment) into the sandbox's /workspace/input, in pieces. */
  async stageInput(project: string, id: string, name: string, chunks: AsyncIterable<Buffer>): Promise<void> {
    const record = await this.running(project, id);
    let first = true;
    const send = async (data: Buffer) => {
      await this.call(record, { op: "stage", project, sandbox_id: id, name, data: data.toString("base64"), append: !first });
      first = false;
    };
    for await (const chunk of chunks) for (let at = 0; at < chunk.length; at += FILE_CHUNK_BYTES) await send(chunk.subarray(at, at + FILE_CHUNK_BYTES));
    if (first) await send(Buffer.alloc(0));
  }

  /** The file's size, then its contents in pieces (read as the client takes them). */
  async readFile(project: string, id: string, path: string): Promise<{ size: number; chunks: AsyncGenerator<Buffer> }> {
    const record = await this.running(project, id);
    const first = await this.call(record, { op: "read", project, sandbox_id: id, path, offset: 0, length: FILE_CHUNK_BYTES });
    const size = first.size ?? 0;
    const call = (c: HostCall) => this.call(record, c);
    async function* chunks(): AsyncGenerator<Buffer> {
      let data = Buffer.from(first.data ?? "", "base64");
      let offset = 0;
      while (data.length > 0) {
        yield data;
        offset += data.length;
        if (offset >= size) return;
        const next = await call({ op: "read", project, sandbox_id: id, path, offset, length: FILE_CHUNK_BYTES });
        data = Buffer.from(next.data ?? "", "base64");
      }
    }
    return { size, chunks: chunks() };
  }

  async listFiles(project: string, id: string, path: string, limit: number): Promise<DirEntry[]> {
    const record = await this.running(project, id);
    const reply = await this.call(record, { op: "list", project, sandbox_id: id, path, limit });
    return reply.entries ?? [];
  }
}
