import { jetstream, type Consumer, type JsMsg } from "@nats-io/jetstream";
import { nanos, type Subscription } from "@nats-io/transport-node";
import { ensureDurableConsumer, openJetStreamManager } from "../../lib/nats/jetstream.js";
import { BoundedPuller } from "../../lib/nats/bounded-puller.js";
import { consumers, streams, subjects } from "../../lib/nats/subjects.js";
import type { Logger } from "../../lib/log.js";
import { JobControl, JobRunner, JobStore, jobMessage, type JobMessage } from "../../modules/jobs/mod.js";
import { FileStore } from "../../modules/files/mod.js";
import { SandboxHostClient, SandboxHostDirectory, SandboxService, SandboxStore } from "../../modules/sandboxes/mod.js";
import type { Actor, ActorContext } from "../../modules/actor-runtime/mod.js";

export interface JobWorkerSettings {
  concurrency: number;
  ackWaitMs: number;
  hostTimeoutMs: number;
  maxPerProject: number;
  streamOutputBytes: number;
  maxFileBytes: number;
}

/** Pause before a job that must wait (no sandbox host with room, a failed attempt) is delivered again. */
const retryDelayMs = (deliveries: number) => Math.min(30_000, 1_000 * 2 ** Math.min(5, deliveries - 1));

/**
 * Runs jobs from the durable work queue (shared by every actor host): a job is fetched when a run
 * slot is free, kept alive with working() while it runs, acked once it is final, and redelivered
 * to another worker if this one dies (the next delivery counts as a new attempt).
 */
export class JobWorker implements Actor {
  readonly name = "jobs:worker";
  private log!: Logger;
  private consumer!: Consumer;
  private runner!: JobRunner;
  private directory: SandboxHostDirectory | undefined;
  private cancelSubscription: Subscription | undefined;
  private readonly running = new Map<string, JobControl>();
  private puller: BoundedPuller | undefined;

  constructor(private readonly settings: JobWorkerSettings) {}

  async start(ctx: ActorContext): Promise<void> {
    this.log = ctx.log;
    const nc = ctx.nc;
    const jobs = await JobStore.open(nc);
    const jsm = await openJetStreamManager(nc);
    const config = { ack_wait: nanos(this.settings.ackWaitMs), max_deliver: -1, max_ack_pending: -1 };
    try {
      await ensureDurableConsumer(jsm, streams.jobs, { durable_name: consumers.jobWorkers, ...config });
    } catch {
      await jsm.consumers.update(streams.jobs, consumers.jobWorkers, config);
    }
    this.consumer = await jetstream(nc).consumers.get(streams.jobs, consumers.jobWorkers);
    this.directory = new SandboxHostDirectory(nc, this.settings.hostTimeoutMs);
    this.directory.start();
    const sandboxes = new SandboxService(await SandboxStore.open(nc), this.directory, new SandboxHostClient(nc), {
      maxPerProject: this.settings.maxPerProject,
      execOutputBytes: 0,
      streamOutputBytes: this.settings.streamOutputBytes,
    }, this.log);
    this.runner = new JobRunner(nc, jobs, sandboxes, await FileStore.open(nc), { maxOutputFiles: 100, maxFileBytes: this.settings.maxFileBytes }, this.log);
    this.cancelSubscription = nc.subscribe(subjects.jobCancelAll, {
      callback: (err, msg) => {
        if (!err) this.running.get(msg.subject.slice(msg.subject.lastIndexOf(".") + 1))?.cancel();
      },
    });
    this.puller = new BoundedPuller(this.consumer, this.settings.concurrency, (msg) => this.handle(msg));
    this.puller.start((err) => ctx.fail(err));
  }

  async stop(): Promise<void> {
    await this.puller?.stop();
    // Running jobs end with this host: their messages are redelivered to another worker.
    await Promise.race([this.puller?.idle(), new Promise((r) => setTimeout(r, 1_000).unref())]);
    this.cancelSubscription?.unsubscribe();
    this.directory?.stop();
  }

  private async handle(msg: JsMsg): Promise<void> {
    let job: JobMessage;
    try {
      job = jobMessage.parseBytes(`${msg.subject} #${msg.seq}`, msg.data);
    } catch (err) {
      this.log.error("malformed job message dropped", { err });
      return msg.term();
    }
    const keepAlive = setInterval(() => msg.working(), Math.max(1_000, this.settings.ackWaitMs / 3));
    const control = new JobControl();
    this.running.set(job.job_id, control);
    try {
      const outcome = await this.runner.run(job.project, job.job_id, control);
      if (outcome === "final") msg.ack();
      else msg.nak(retryDelayMs(msg.info.deliveryCount));
    } catch (err) {
      this.log.error("job could not be run; retrying", { jobId: job.job_id, err });
      msg.nak(retryDelayMs(msg.info.deliveryCount));
    } finally {
      clearInterval(keepAlive);
      this.running.delete(job.job_id);
    }
  }
}
