import { jetstream, jetstreamManager, type Consumer, type JsMsg } from "@nats-io/jetstream";
import { nanos, type Subscription } from "@nats-io/transport-node";
import type { ModelSpec } from "../../modules/catalog/mod.js";
import { randomToken } from "../../lib/ids.js";
import type { Logger } from "../../lib/log.js";
import { ensureDurableConsumer } from "../../lib/nats/jetstream.js";
import { consumers, streams, subjects } from "../../lib/nats/subjects.js";
import { isDomainError } from "../../modules/errors/mod.js";
import { GenerationClient, RunnerDirectory } from "../../modules/inference/mod.js";
import { backgroundJobSchema, ensureBackgroundStream, type BackgroundJob, ConversationStore, ResponseEventLog, isTerminal, responseErrorOf, ResponseService, type ResponseRun, ResponseStore, type StoredResponse, type Versioned } from "../../modules/responses/mod.js";
import type { ResponseCreateRequest, ResponseObject } from "../../modules/openai/mod.js";
import type { Actor, ActorContext } from "../../modules/actor-runtime/mod.js";

export interface BackgroundWorkerSettings {
  catalog: readonly ModelSpec[];
  ttlSeconds: number;
  concurrency: number;
  ackWaitMs: number;
  maxAttempts: number;
  requestTimeoutMs: number;
  admissionTimeoutMs: number;
  runnerTimeoutMs: number;
  drainTimeoutMs: number;
}

/** Failures of a run that another runner may not have: the run is tried again. */
const RUNNER_LOST: ReadonlySet<string> = new Set(["RunnerLost", "StreamInterrupted"]);
/** Deliveries of a job whose handling keeps throwing (stores unavailable) before it is given up. */
const MAX_DELIVERIES = 20;

/** A run in this worker: cancels address it by response id. */
interface Running {
  run: ResponseRun | undefined;
  cancelled: boolean;
  /** Stopped because this host shuts down: the job goes back to the queue, nothing is stored. */
  handedBack: boolean;
}

/**
 * Runs background responses. Jobs come from the durable work queue (a JetStream work-queue
 * stream with one durable pull consumer shared by every actor host): a job is fetched only when
 * a run slot is free, kept alive with working() while it runs, acked once the final state is
 * stored, and redelivered to another worker if this one dies (the run then starts over, up to
 * maxAttempts). State moves queued -> in_progress -> completed | incomplete | failed in the
 * responses bucket with compare-and-set, so a cancel that lands in between always wins: the
 * cancel route marks the response cancelled and signals on the cancel subject, and the run
 * stops at once.
 */
export class BackgroundResponseWorker implements Actor {
  readonly name = "responses:background";
  private ctx!: ActorContext;
  private log!: Logger;
  private directory!: RunnerDirectory;
  private client!: GenerationClient;
  private service!: ResponseService;
  private events!: ResponseEventLog;
  private consumer!: Consumer;
  private cancelSubscription: Subscription | undefined;
  private readonly running = new Map<string, Running>();
  private readonly inFlight = new Set<Promise<void>>();
  private slotFreed: (() => void) | undefined;
  private stopping = false;
  private loop: Promise<void> | undefined;

  constructor(private readonly settings: BackgroundWorkerSettings) {}

  async start(ctx: ActorContext): Promise<void> {
    this.ctx = ctx;
    this.log = ctx.log;
    const nc = ctx.nc;
    const [responses, conversations] = await Promise.all([ResponseStore.open(nc, this.settings.ttlSeconds * 1000), ConversationStore.open(nc)]);
    this.events = await ResponseEventLog.open(nc);
    await ensureBackgroundStream(nc);
    const jsm = await jetstreamManager(nc);
    const durable = consumers.responsesBackground;
    const config = { ack_wait: nanos(this.settings.ackWaitMs), max_deliver: -1, max_ack_pending: -1 };
    try {
      await ensureDurableConsumer(jsm, streams.responsesBackground, { durable_name: durable, ...config });
    } catch {
      // It exists with another ack wait (configuration changed): take the new one.
      await jsm.consumers.update(streams.responsesBackground, durable, config);
    }
    this.consumer = await jetstream(nc).consumers.get(streams.responsesBackground, durable);

    // Reply subjects of this worker's generations: a gateway id of its own.
    this.directory = new RunnerDirectory(nc, Math.max(this.settings.runnerTimeoutMs * 4, 10_000));
    this.directory.start();
    this.client = new GenerationClient(nc, this.directory, {
      gatewayId: `w${randomToken(10)}`,
      admissionTimeoutMs: this.settings.admissionTimeoutMs,
      runnerTimeoutMs: this.settings.runnerTimeoutMs,
    }, this.log);
    this.client.start();
    this.service = new ResponseService({
      catalog: new Map(this.settings.catalog.map((m) => [m.id, m])),
      client: this.client,
      responses,
      conversations,
      requestTimeoutMs: this.settings.requestTimeoutMs,
      log: this.log,
    });

    this.cancelSubscription = nc.subscribe(subjects.responseCancelAll, {
      callback: (err, msg) => {
        if (err) return;
        const id = msg.subject.slice(msg.subject.lastIndexOf(".") + 1);
        const running = this.running.get(id);
        if (!running) return;
        running.cancelled = true;
        running.run?.cancel();
      },
    });
    this.loop = this.fetchLoop().catch((err: unknown) => ctx.fail(err));
  }

  async stop(): Promise<void> {
    this.stopping = true;
    this.slotFreed?.();
    await this.loop;
    // Let running responses finish for a while; the rest go back to the queue for another worker.
    const drained = await Promise.race([
      Promise.all(this.inFlight).then(() => true),
      new Promise<boolean>((r) => setTimeout(() => r(false), this.settings.drainTimeoutMs).unref()),
    ]);
    if (!drained)
      for (const r of this.running.values()) {
        r.handedBack = true;
        r.run?.cancel();
      }
    await Promise.all(this.inFlight);
    this.cancelSubscription?.unsubscribe();
    this.client?.stop();
    this.directory?.stop();
  }

  /** Fetches as many jobs as there are free run slots, and runs them. */
  private async fetchLoop(): Promise<void> {
    while (!this.stopping) {
      const free = this.settings.concurrency - this.inFlight.size;
      if (free <= 0) {
        await new Promise<void>((resolve) => (this.slotFreed = resolve));
        continue;
      }
      const batch = await this.consumer.fetch({ max_messages: free, expires: 2_000 });
      for await (const msg of batch) {
        if (this.stopping) {
          msg.nak();
          continue;
        }
        const job = this.handle(msg).finally(() => {
          this.inFlight.delete(job);
          this.slotFreed?.();
        });
        this.inFlight.add(job);
      }
    }
  }

  private async handle(msg: JsMsg): Promise<void> {
    let job: BackgroundJob;
    try {
      job = backgroundJobSchema.parseBytes(`${msg.subject} #${msg.seq}`, msg.data);
    } catch (err) {
      this.log.error("malformed background job dropped", { err });
      return msg.term();
    }
    const keepAlive = setInterval(() => msg.working(), Math.max(1_000, this.settings.ackWaitMs / 3));
    const running: Running = { run: undefined, cancelled: false, handedBack: false };
    this.running.set(job.responseId, running);
    try {
      const outcome = await this.execute(job, running);
      if (outcome === "done") msg.ack();
      else msg.nak(Math.min(30_000, 1_000 * 2 ** Math.min(5, msg.info.deliveryCount - 1)));
    } catch (err) {
      // JetStream or the stores failed: try again later; a job failing for good ends up failed.
      this.log.error("background response could not be run; retrying", { response: job.responseId, deliveries: msg.info.deliveryCount, err });
      if (msg.info.deliveryCount >= MAX_DELIVERIES) {
        await this.markFailed(job, "The response could not be run.").catch(() => {});
        msg.term();
      } else msg.nak(Math.min(30_000, 1_000 * 2 ** Math.min(5, msg.info.deliveryCount - 1)));
    } finally {
      clearInterval(keepAlive);
      this.running.delete(job.responseId);
    }
  }

  /** Runs one job to a stored final state ("done"), or asks for it to be delivered again later. */
  private async execute(job: BackgroundJob, running: Running): Promise<"done" | "later"> {
    const { projectId, responseId } = job;
    const responses = this.service.responses;
    let stored = await responses.get(projectId, responseId);
    if (!stored || isTerminal(stored.value.response.status)) return "done"; // deleted, cancelled while queued, or already finished
    const body = stored.value.request;
    if (!body) return this.finish(projectId, stored, "The background request is missing.");
    const streamed = body.stream === true;
    const attempts = stored.value.attempts ?? 0;
    if (stored.value.response.status === "in_progress") {
      // A worker died running it. A stream already carried that attempt's events: it cannot be continued.
      if (streamed) return this.finish(projectId, stored, "The worker running this response stopped; the response could not be completed.");
      if (attempts >= this.settings.maxAttempts) return this.finish(projectId, stored, `The background run was interrupted ${attempts} times; giving up.`);
    }

    const input = (await responses.inputItems(projectId, responseId)) ?? [];
    let run: ResponseRun;
    try {
      const prepared = await this.service.prepare(projectId, body, { id: responseId, createdAt: stored.value.response.created_at, input });
      run = await this.service.start(prepared);
    } catch (err) {
      if (!isDomainError(err)) throw err;
      const deadline = stored.value.response.created_at * 1000 + this.settings.requestTimeoutMs;
      const noRoomYet = err._tag === "NoRunner" || err._tag === "QueueFull" || err._tag === "DeadlineExceeded" || err._tag === "Unavailable";
      if (noRoomYet && Date.now() < deadline) return "later"; // no runner free or ready yet
      return this.finish(projectId, stored, err.message, responseErrorOf(err).code);
    }
    running.run = run;
    if (running.cancelled) run.cancel();

    // queued -> in_progress (one more attempt), unless a cancel or a delete got there first.
    for (;;) {
      const next: StoredResponse = { ...stored.value, attempts: attempts + 1, response: { ...stored.value.response, status: "in_progress" } };
      const revision = await responses.update(projectId, next, stored.revision);
      if (revision !== undefined) {
        stored = { value: next, revision };
        break;
      }
      const fresh = await responses.get(projectId, responseId);
      if (!fresh || isTerminal(fresh.value.response.status)) {
        run.cancel();
        await run.run();
        return "done";
      }
      stored = fresh;
    }

    const sink = streamed ? this.events.writer(responseId, 2) : undefined;
    const inProgress = stored;
    let again = false;
    await run.run({
      sink,
      announce: false,
      beforeEnd: async (final) => {
        if (running.handedBack) return;
        // Its runner died: a run nobody has seen yet starts over on another one.
        again = !streamed && attempts + 1 < this.settings.maxAttempts && RUNNER_LOST.has(run.failure()?._tag ?? "");
        if (again) return;
        await this.service.appendToConversation(run.prepared, final);
        await this.store(projectId, inProgress, final);
      },
    });
    if (running.handedBack || again) return "later";
    if (run.response.status === "cancelled") sink?.event({ type: "error", code: "response_cancelled", message: "The response was cancelled.", param: null });
    await sink?.flush();
    // The result could not be stored: run it again once the store is back.
    return run.storeFailed ? "later" : "done";
  }

  /**
   * Writes the final object over the stored one. If it changed meanwhile (cancelled, deleted),
   * a cancel keeps its status and gets the output produced until then; a deleted one stays deleted.
   */
  private async store(projectId: string, stored: Versioned<StoredResponse>, final: ResponseObject): Promise<void> {
    let current = stored;
    for (;;) {
      const response = current.value.response.status === "cancelled" ? { ...final, status: "cancelled" as const, completed_at: null } : final;
      if ((await this.service.responses.update(projectId, { ...current.value, response }, current.revision)) !== undefined) return;
      const fresh = await this.service.responses.get(projectId, final.id);
      if (!fresh) return;
      current = fresh;
    }
  }

  /** Marks a response failed (unless something else ended it first) and ends its stream. */
  private async finish(projectId: string, stored: Versioned<StoredResponse>, message: string, code = "server_error"): Promise<"done"> {
    const id = stored.value.response.id;
    let current: Versioned<StoredResponse> | undefined = stored;
    while (current && !isTerminal(current.value.response.status)) {
      const response: ResponseObject = { ...current.value.response, status: "failed", error: { code, message }, completed_at: null };
      if ((await this.service.responses.update(projectId, { ...current.value, response }, current.revision)) !== undefined) {
        if (current.value.request?.stream) {
          const sink = this.events.writer(id, await this.events.nextSequence(id));
          sink.event({ type: "response.failed", response });
          await sink.flush();
        }
        break;
      }
      current = await this.service.responses.get(projectId, id);
    }
    return "done";
  }

  private async markFailed(job: BackgroundJob, message: string): Promise<void> {
    const stored = await this.service.responses.get(job.projectId, job.responseId);
    if (stored) await this.finish(job.projectId, stored, message);
  }
}
