import type { NatsConnection } from "@nats-io/transport-node";
import type { Logger } from "../../lib/log.js";
import { subjects } from "../../lib/nats/subjects.js";
import { isDomainError } from "../errors/mod.js";
import type { ExecEvent, SandboxService } from "../sandboxes/mod.js";
import type { FileStore } from "../files/mod.js";
import * as states from "./job-states.js";
import type { JobObject, JobStore, StoredJob } from "./job-store.js";

const nowSeconds = () => Math.floor(Date.now() / 1000);

/** Why a job's sandbox could not start, as its waiting_reason says it. */
function waitingReason(err: unknown): string {
  if (!isDomainError(err) || err._tag === "Internal") return "its sandbox could not be started (an internal error)";
  if (err._tag === "NoSandboxHost") return err.situation;
  return `its sandbox could not be started: ${err.message}`;
}

/** What became of one delivery of a job: final (ack), or to be tried again later (nak). */
export type JobOutcome = "final" | "retry";

/** Cancels the job running here, if any. */
export class JobControl {
  cancelled = false;
  private onCancel: (() => void) | undefined;

  cancel(): void {
    this.cancelled = true;
    this.onCancel?.();
  }

  whenCancelled(handler: () => void): void {
    this.onCancel = handler;
    if (this.cancelled) handler();
  }
}

/**
 * Runs one delivery of a job: a fresh sandbox, the command in it (its output to the job's log
 * stream), the sandbox stopped after. Every change of the record is a move of job-states.ts
 * applied with a compare-and-set, so a job ends in exactly one final state whatever the races
 * (a cancel, a redelivery to another worker after this one died).
 */
export class JobRunner {
  constructor(
    private readonly nc: NatsConnection,
    private readonly jobs: JobStore,
    private readonly sandboxes: SandboxService,
    private readonly files: FileStore,
    private readonly limits: { maxOutputFiles: number; maxFileBytes: number },
    private readonly log: Logger,
  ) {}

  async run(project: string, jobId: string, control: JobControl): Promise<JobOutcome> {
    const stored = await this.jobs.get(project, jobId);
    if (!stored) return "final";
    const delivery = states.deliver(stored.job, control.cancelled);
    if (delivery.kind === "over") return "final";
    if (delivery.kind === "cancel") return this.endCancelled(project, jobId);
    if (delivery.kind === "fail") return this.fail(project, jobId, delivery.error);
    const { attempt } = delivery;
    let sandboxId: string;
    try {
      const sandbox = await this.sandboxes.create(project, {
        timeout_seconds: stored.job.timeout_seconds + 60,
        idle_timeout_seconds: null,
        metadata: { job_id: jobId },
        env: stored.env,
        secrets: stored.job.secrets,
        cpu_mhz: stored.job.resources.cpu_mhz,
        memory_mb: stored.job.resources.memory_mb,
        disk_mb: stored.job.resources.disk_mb,
        network: stored.job.network ?? "none",
        input_dir: stored.job.input_files.length > 0,
      });
      if (sandbox.status !== "running") throw new Error(sandbox.error ?? "the sandbox did not start");
      sandboxId = sandbox.id;
    } catch (err) {
      if (isDomainError(err) && err._tag === "InvalidParam" && err.code !== "sandbox_limit_reached") {
        // A secret named by the job is gone, or no host could ever hold it: no attempt will do better.
        return this.fail(project, jobId, { code: "invalid_job", message: err.message });
      }
      this.log.warn("job sandbox could not be started; retrying later", { jobId, err: err instanceof Error ? err.message : String(err) });
      // The record says why it waits, so a client need not guess from a job that stays queued.
      await this.jobs.transition(project, jobId, (job) => states.waiting(job, waitingReason(err))).catch(() => undefined);
      return "retry";
    }
    const started = await this.jobs.transition(project, jobId, (job) => states.start(job, attempt, sandboxId, nowSeconds()));
    if (!started || started.job.status !== "running" || started.job.attempt !== attempt) {
      await this.sandboxes.stop(project, sandboxId).catch(() => {});
      const now = await this.jobs.get(project, jobId);
      if (now && now.job.status === "cancelling") await this.endCancelled(project, jobId);
      return "final";
    }
    try {
      return await this.attempt(project, started, sandboxId, attempt, control);
    } finally {
      await this.sandboxes.stop(project, sandboxId).catch(() => {});
    }
  }

  private async attempt(project: string, stored: StoredJob, sandboxId: string, attempt: number, control: JobControl): Promise<JobOutcome> {
    const job = stored.job;
    let settle!: (event: ExecEvent) => void;
    const ended = new Promise<ExecEvent>((resolve) => (settle = resolve));
    const logSubject = subjects.jobLogs(job.id);
    for (const fileId of job.input_files) {
      const file = await this.files.get(project, fileId);
      if (!file) return this.fail(project, job.id, { code: "invalid_job", message: `The input file ${fileId} no longer exists.` });
      const contents = this.files.content(fileId);
      let name = file.filename.replace(/[/\u0000]/g, "_").slice(0, 255);
      if (name === "" || name === "." || name === "..") name = fileId;
      // Read-only for the command: the host writes the file into a directory bound read-only.
      await this.sandboxes.stageInput(project, sandboxId, name, (async function* () {
        for await (const chunk of contents) yield Buffer.from(chunk);
      })());
    }
    let stream;
    try {
      stream = await this.sandboxes.execStream(
        project,
        sandboxId,
        { argv: job.command, cwd: job.cwd, env: {}, stdin: "", timeout_seconds: job.timeout_seconds, stream: true },
        (event) => {
          if (event.t === "stdout" || event.t === "stderr") this.nc.publish(logSubject, new TextEncoder().encode(JSON.stringify({ attempt, stream: event.t, data: event.d })));
          else settle(event);
        },
      );
    } catch (err) {
      this.log.warn("job command could not be started", { jobId: job.id, err: err instanceof Error ? err.message : String(err) });
      return this.ended(project, job, attempt, states.hostLost("The sandbox ended before the command started."));
    }
    control.whenCancelled(() => stream.kill());
    const end = states.runEnd(await ended, job.timeout_seconds);
    stream.close();
    if (!control.cancelled && end && states.keepsOutputs(job, attempt, end)) await this.collectOutputs(project, job.id, sandboxId);
    // The sandbox is gone before the job says it is over.
    await this.sandboxes.stop(project, sandboxId).catch(() => {});
    if (control.cancelled) return this.endCancelled(project, job.id);
    if (!end) return "retry";
    return this.ended(project, job, attempt, end);
  }

  /** Files in /workspace/output become project files listed on the job (at most maxOutputFiles, each at most maxFileBytes). */
  private async collectOutputs(project: string, jobId: string, sandboxId: string): Promise<void> {
    let entries;
    try {
      entries = await this.sandboxes.listFiles(project, sandboxId, "/workspace/output", this.limits.maxOutputFiles);
    } catch {
      return; // no output directory
    }
    const ids: string[] = [];
    for (const entry of entries) {
      if (entry.type !== "file" || entry.size > this.limits.maxFileBytes) continue;
      const { chunks } = await this.sandboxes.readFile(project, sandboxId, `/workspace/output/${entry.name}`);
      const file = await this.files.upload(
        { project, maxBytes: this.limits.maxFileBytes, describe: () => ({ filename: entry.name, purpose: "user_data", expiresAt: null }) },
        chunks,
      );
      ids.push(file.id);
    }
    if (ids.length > 0) await this.jobs.transition(project, jobId, (job) => states.withOutputs(job, ids));
  }

  /** The attempt ended: the job is final, or (a failure with retries left) queued for another attempt. */
  private async ended(project: string, job: JobObject, attempt: number, end: states.RunEnd): Promise<JobOutcome> {
    await this.jobs.transition(project, job.id, (current) => states.runEnded(current, attempt, end, nowSeconds()));
    return states.triesAgain(job, attempt, end) ? "retry" : "final";
  }

  private async fail(project: string, jobId: string, error: states.JobError): Promise<JobOutcome> {
    await this.jobs.transition(project, jobId, (job) => states.fail(job, error, nowSeconds()));
    return "final";
  }

  /** The job was cancelled: it ends so (its sandbox, if any, is stopped by the caller). */
  private async endCancelled(project: string, jobId: string): Promise<JobOutcome> {
    await this.jobs.transition(project, jobId, (job) => states.stopped(job, nowSeconds()));
    return "final";
  }
}
