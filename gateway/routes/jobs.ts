import type { NatsConnection } from "@nats-io/transport-node";
import { newSortableId } from "../../lib/ids.js";
import { subjects } from "../../lib/nats/subjects.js";
import { errors, shown } from "../../modules/errors/mod.js";
import { listObject } from "../../modules/openai/mod.js";
import { JOB_ID, JOB_STATUSES, jobStates, parseJobCreate, type JobObject, type JobStore } from "../../modules/jobs/mod.js";
import type { FileStore } from "../../modules/files/mod.js";
import type { HttpExchange } from "../http/exchange.js";
import type { Router } from "../http/router.js";
import { streamBody } from "../http/stream-body.js";
import type { PendingBudget } from "../sse/pending-budget.js";
import { sseEvent, SseWriter } from "../sse/sse-writer.js";
import { listQuery } from "./list-query.js";

export interface JobRouteDeps {
  nc: NatsConnection;
  jobs: JobStore;
  files: FileStore;
  maxBodyBytes: number;
  maxCpuMhz: number;
  maxMemoryMb: number;
  maxDiskMb: number;
  /** Job records a project may hold (kept 7 days). */
  maxPerProject: number;
  streamBudget: PendingBudget;
  /** Whether a live sandbox host offers network egress (undefined: none heard from yet). */
  offersEgress: () => boolean | undefined;
}

/**
 * /v1/jobs: a command run to completion in a fresh sandbox, durably. Create (queued), list, get,
 * cancel (idempotent; a queued job is cancelled at once, a running one is stopped by its worker),
 * and logs (the output so far as text, or followed as SSE while it runs).
 */
export function registerJobRoutes(router: Router, deps: JobRouteDeps): void {
  const project = (ex: HttpExchange) => ex.principal!.projectId;
  const find = async (ex: HttpExchange, id: string) => {
    const found = JOB_ID.test(id) ? await deps.jobs.get(project(ex), id) : undefined;
    if (!found) throw errors.notFound(`No such job: ${id.slice(0, 64)}`, "job_id");
    return found;
  };

  router.post("/v1/jobs", async (ex) => {
    const request = parseJobCreate(await ex.readJson(deps.maxBodyBytes), { maxCpuMhz: deps.maxCpuMhz, maxMemoryMb: deps.maxMemoryMb, maxDiskMb: deps.maxDiskMb });
    // Refused now rather than failing later on the worker: no host here could run it.
    if (request.network === "egress" && deps.offersEgress() === false)
      throw errors.invalidParam("network", "Invalid value for 'network': no sandbox host here offers network egress (TRIBUTARY_SANDBOX_EGRESS on the hosts, see docs/platform.md).");
    for (const [i, fileId] of request.input_files.entries())
      if (!(await deps.files.get(project(ex), fileId))) throw errors.invalidParam(`input_files[${i}]`, `No such file: ${fileId}.`, "file_not_found");
    const job: JobObject = {
      id: newSortableId("job_"),
      object: "job",
      status: "queued",
      command: request.command,
      cwd: request.cwd,
      env_names: Object.keys(request.env).sort(),
      secrets: request.secrets,
      timeout_seconds: request.timeout_seconds,
      max_retries: request.max_retries,
      resources: { cpu_mhz: request.cpu_mhz, memory_mb: request.memory_mb, disk_mb: request.disk_mb },
      network: request.network,
      metadata: request.metadata,
      attempt: 0,
      exit_code: null,
      error: null,
      sandbox_id: null,
      waiting_reason: null,
      input_files: request.input_files,
      output_files: [],
      created_at: Math.floor(Date.now() / 1000),
      started_at: null,
      finished_at: null,
    };
    const created = await deps.jobs.create({ job, project: project(ex), env: request.env }, deps.maxPerProject);
    if (!created.created)
      throw errors.invalidParam(null, `This project has ${created.held} jobs from the last 7 days; the most is ${deps.maxPerProject}. Please retry once older ones expire.`, "too_many_jobs");
    ex.json(200, job);
  });

  router.get("/v1/jobs", async (ex) => {
    const query = listQuery(ex);
    const status = ex.searchParams().get("status") ?? undefined;
    if (status !== undefined && !(JOB_STATUSES as readonly string[]).includes(status))
      throw errors.invalidParam("status", `Invalid value for 'status': expected one of ${JOB_STATUSES.join(", ")}.`);
    const page = await deps.jobs.list(project(ex), { ...query, ...(status !== undefined ? { status } : {}) });
    if (!page) throw errors.invalidParam("after", `No item with id '${shown(query.after ?? "")}' in this list.`);
    ex.json(200, listObject(page));
  });

  router.get("/v1/jobs/:id", async (ex, { id }) => ex.json(200, (await find(ex, id!)).job));

  router.post("/v1/jobs/:id/cancel", async (ex, { id }) => {
    await find(ex, id!);
    const now = Math.floor(Date.now() / 1000);
    const updated = await deps.jobs.transition(project(ex), id!, (job) => jobStates.cancel(job, now));
    if (updated?.job.status === "cancelling") deps.nc.publish(subjects.jobCancel(id!), "");
    ex.json(200, (await find(ex, id!)).job);
  });

  router.get("/v1/jobs/:id/logs", async (ex, { id }) => {
    await find(ex, id!);
    const params = ex.searchParams();
    const only = params.get("stream");
    if (only !== null && only !== "stdout" && only !== "stderr") throw errors.invalidParam("stream", "Invalid value for 'stream': expected 'stdout' or 'stderr'.");
    if (params.get("follow") !== "true") {
      const jobs = deps.jobs;
      async function* text(): AsyncGenerator<Buffer> {
        for await (const chunk of jobs.logs(id!)) if (only === null || chunk.stream === only) yield Buffer.from(chunk.data, "base64");
      }
      return streamBody(ex, "text/plain; charset=utf-8", text());
    }
    const writer = new SseWriter(ex, deps.streamBudget);
    const aborted = new AbortController();
    ex.onAbort(() => aborted.abort());
    writer.open();
    let held = "";
    writer.onDrain(() => {
      if (held && writer.write(held)) held = "";
    });
    const done = async () => jobStates.isFinal((await deps.jobs.get(project(ex), id!))?.job.status ?? "cancelled");
    await deps.jobs.followLogs(
      id!,
      (chunk) => {
        if (only !== null && chunk.stream !== only) return;
        const frame = sseEvent(chunk.stream, JSON.stringify({ attempt: chunk.attempt, data: Buffer.from(chunk.data, "base64").toString("utf8") }));
        if (held || !writer.writable) {
          held += frame;
          writer.hold(held.length);
          if (writer.overLimit) {
            writer.drop();
            aborted.abort();
          }
        } else writer.write(frame);
      },
      { signal: aborted.signal, done },
    );
    const final = (await deps.jobs.get(project(ex), id!))?.job;
    writer.end(held + sseEvent("end", JSON.stringify({ status: final?.status ?? null, exit_code: final?.exit_code ?? null })));
  });
}
