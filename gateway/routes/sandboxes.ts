import {
  parseEmpty,
  parseExec,
  parseSandboxCreate,
  parseTimeoutUpdate,
  SANDBOX_STATUSES,
  workspacePath,
  type ExecEvent,
  type SandboxService,
  type SandboxStatus,
} from "../../modules/sandboxes/mod.js";
import { errors } from "../../modules/errors/mod.js";
import { listObject } from "../../modules/openai/mod.js";
import type { HttpExchange } from "../http/exchange.js";
import type { Router } from "../http/router.js";
import { streamBody } from "../http/stream-body.js";
import type { PendingBudget } from "../sse/pending-budget.js";
import { sseEvent, SseWriter } from "../sse/sse-writer.js";
import { listQuery } from "./list-query.js";

export interface SandboxRouteDeps {
  sandboxes: SandboxService;
  maxBodyBytes: number;
  maxFileBytes: number;
  maxCpuMhz: number;
  maxMemoryMb: number;
  maxDiskMb: number;
  streamBudget: PendingBudget;
}

const MAX_LIST_ENTRIES = 1_000;
const MAX_METADATA_FILTERS = 16;

/**
 * /v1/sandboxes: create, list, get, stop, delete, extend; exec (JSON or SSE) and files in the
 * sandbox's /workspace. Every route is scoped to the key's project: another project's sandbox
 * is a 404, like one that does not exist.
 */
export function registerSandboxRoutes(router: Router, deps: SandboxRouteDeps): void {
  const project = (ex: HttpExchange) => ex.principal!.projectId;
  const service = deps.sandboxes;

  router.post("/v1/sandboxes", async (ex) => {
    const request = parseSandboxCreate(await ex.readJson(deps.maxBodyBytes), { maxCpuMhz: deps.maxCpuMhz, maxMemoryMb: deps.maxMemoryMb, maxDiskMb: deps.maxDiskMb });
    ex.json(200, await service.create(project(ex), request));
  });

  router.get("/v1/sandboxes", async (ex) => {
    const query = listQuery(ex);
    const params = ex.searchParams();
    const status = params.get("status") ?? undefined;
    if (status !== undefined && !(SANDBOX_STATUSES as readonly string[]).includes(status))
      throw errors.invalidParam("status", `Invalid value for 'status': expected one of ${SANDBOX_STATUSES.join(", ")}.`);
    // metadata[key]=value filters, all of which must match.
    const metadata: Record<string, string> = {};
    for (const [k, v] of params) {
      const m = /^metadata\[(.{1,64})\]$/.exec(k);
      if (!m) continue;
      if (Object.keys(metadata).length >= MAX_METADATA_FILTERS) throw errors.invalidParam("metadata", `At most ${MAX_METADATA_FILTERS} metadata filters.`);
      metadata[m[1]!] = v.slice(0, 512);
    }
    const page = await service.list(project(ex), query, { status: status as SandboxStatus | undefined, metadata });
    ex.json(200, listObject(page));
  });

  router.get("/v1/sandboxes/:id", async (ex, { id }) => ex.json(200, (await service.record(project(ex), id!)).sandbox));

  router.post("/v1/sandboxes/:id/stop", async (ex, { id }) => {
    const body = await ex.readBody(deps.maxBodyBytes);
    if (body.length > 0) parseEmpty(parseJson(body));
    ex.json(200, await service.stop(project(ex), id!));
  });

  router.delete("/v1/sandboxes/:id", async (ex, { id }) => {
    await service.delete(project(ex), id!);
    ex.json(200, { id, object: "sandbox.deleted", deleted: true });
  });

  router.post("/v1/sandboxes/:id/timeout", async (ex, { id }) => {
    const { timeout_seconds } = parseTimeoutUpdate(await ex.readJson(deps.maxBodyBytes));
    ex.json(200, await service.extend(project(ex), id!, timeout_seconds));
  });

  router.post("/v1/sandboxes/:id/exec", async (ex, { id }) => {
    const request = parseExec(await ex.readJson(deps.maxBodyBytes));
    if (!request.stream) return ex.json(200, await service.exec(project(ex), id!, request));
    await streamExec(ex, deps, project(ex), id!, request);
  });

  // Files: raw bodies in and out, streamed in pieces to and from the sandbox's host.
  router.post("/v1/sandboxes/:id/files", async (ex, { id }) => {
    const path = workspacePath(ex.searchParams().get("path"));
    await service.record(project(ex), id!);
    const size = await service.writeFile(project(ex), id!, path, ex.bodyChunks(deps.maxFileBytes));
    ex.json(200, { object: "sandbox.file", path, size });
  });

  router.get("/v1/sandboxes/:id/files/content", async (ex, { id }) => {
    const path = workspacePath(ex.searchParams().get("path"));
    const file = await service.readFile(project(ex), id!, path);
    ex.responseHeaders["x-file-size"] = String(file.size);
    await streamBody(ex, "application/octet-stream", file.chunks);
  });

  router.get("/v1/sandboxes/:id/files", async (ex, { id }) => {
    const params = ex.searchParams();
    const path = params.get("path") === null ? "/workspace" : workspacePath(params.get("path"));
    const rawLimit = params.get("limit");
    const limit = rawLimit === null ? MAX_LIST_ENTRIES : /^\d{1,10}$/.test(rawLimit) ? Number(rawLimit) : NaN;
    if (!(limit >= 1 && limit <= MAX_LIST_ENTRIES))
      throw errors.invalidParam("limit", `Invalid value for 'limit': expected an integer between 1 and ${MAX_LIST_ENTRIES}.`);
    const entries = await service.listFiles(project(ex), id!, path, limit);
    ex.json(200, { object: "list", path, data: entries, has_more: entries.length >= limit });
  });
}

function parseJson(body: Buffer): unknown {
  try {
    return JSON.parse(body.toString("utf8"));
  } catch (err) {
    throw errors.invalidJson((err as Error).message);
  }
}

/**
 * SSE events start, stdout, stderr (text, with the bytes as UTF-8) and exit (or error). A client
 * that falls behind holds output in the gateway up to the stream bounds; past them the command is
 * killed and the stream dropped. A client that leaves kills the command.
 */
async function streamExec(ex: HttpExchange, deps: SandboxRouteDeps, project: string, id: string, request: ReturnType<typeof parseExec>): Promise<void> {
  const writer = new SseWriter(ex, deps.streamBudget);
  let queue: string[] = [];
  let queuedBytes = 0;
  let opened = false;
  let last = false;
  let finished = false;
  let stream: { kill(): void; close(): void } | undefined;
  let done!: () => void;
  const over = new Promise<void>((resolve) => (done = resolve));
  const finish = () => {
    if (finished) return;
    finished = true;
    stream?.close();
    done();
  };
  // Writes what is queued while the client keeps up; the exit goes out last, ending the response.
  const pump = () => {
    if (!opened || finished) return;
    if (writer.closed) return finish();
    if (!writer.writable) return;
    const frames = queue.join("");
    queue = [];
    queuedBytes = 0;
    writer.hold(0);
    if (last) {
      writer.end(frames);
      finish();
    } else if (frames) writer.write(frames);
  };
  const push = (frame: string, isLast: boolean) => {
    if (finished || last) return;
    queue.push(frame);
    queuedBytes += frame.length;
    last = isLast;
    if (opened) writer.hold(queuedBytes);
    if (opened && writer.overLimit) {
      stream?.kill();
      writer.drop();
      return finish();
    }
    pump();
  };
  const onEvent = (event: ExecEvent) => {
    if (event.t === "stdout" || event.t === "stderr") return push(sseEvent(event.t, JSON.stringify({ data: Buffer.from(event.d, "base64").toString("utf8") })), false);
    const payload =
      event.t === "exit"
        ? { exit_code: event.exit_code, signal: event.signal, timed_out: event.timed_out, truncated: event.truncated, oom_killed: event.oom_killed }
        : { message: "message" in event ? event.message : "" };
    push(sseEvent(event.t, JSON.stringify(payload)), true);
  };
  stream = await deps.sandboxes.execStream(project, id, request, onEvent);
  ex.onAbort(() => {
    stream?.kill();
    finish();
  });
  writer.open();
  writer.onDrain(pump);
  queue.unshift(sseEvent("start", JSON.stringify({ sandbox_id: id, argv: request.argv })));
  opened = true;
  pump();
  await over;
}
