import { AckPolicy, jetstream, jetstreamManager, type Consumer, type JsMsg } from "@nats-io/jetstream";
import type { Subscription } from "@nats-io/transport-node";
import type { ModelSpec } from "../../lib/catalog/model-spec.js";
import { randomToken } from "../../lib/ids.js";
import type { Logger } from "../../lib/log.js";
import { streams, subjects } from "../../lib/nats/subjects.js";
import { ApiError } from "../../gateway/http/api-error.js";
import { GenerationClient } from "../../gateway/inference/generation-client.js";
import { RunnerDirectory } from "../../gateway/inference/runner-directory.js";
import { ensureBackgroundStream, type BackgroundJob } from "../../gateway/responses/background-queue.js";
import { ConversationStore } from "../../gateway/responses/conversation-store.js";
import { ResponseEventLog } from "../../gateway/responses/response-event-log.js";
import { isTerminal, responseErrorOf, ResponseService, type ResponseRun } from "../../gateway/responses/response-service.js";
import { ResponseStore, type StoredResponse, type Versioned } from "../../gateway/responses/response-store.js";
import type { ResponseCreateRequest } from "../../gateway/schemas/responses.js";
import type { ResponseObject } from "../../gateway/translate/responses-object.js";
import type { Actor, ActorContext } from "../runtime/actor.js";

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

const CONSUMER = "responses-background";

/** A run in this worker: cancels address it by response id. */
interface Running {
  run: ResponseRun | undefined;
  cancelled: boolean;
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
    const config = {
      durable_name: CONSUMER,
      ack_policy: AckPolicy.Explicit,
      ack_wait: this.settings.ackWaitMs * 1_000_000,
      max_deliver: -1,
      max_ack_pending: -1,
    };
    try {
      await jsm.consumers.add(streams.responsesBackground, config);
    } catch {
      await jsm.consumers.update(streams.responsesBackground, CONSUMER, { ack_wait: config.ack_wait, max_deliver: -1, max_ack_pending: -1 });
    }
    this.consumer = await jetstream(nc).consumers.get(streams.responsesBackground, CONSUMER);

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
    if (!drained) for (const r of this.running.values()) r.run?.cancel();
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
      job = msg.json<BackgroundJob>();
    } catch {
      this.log.warn("malformed background job dropped", { seq: msg.seq });
      return msg.term();
    }
    const keepAlive = setInterval(() => msg.working(), Math.max(1_000, this.settings.ackWaitMs / 3));
    const running: Running = { run: undefined, cancelled: false };
    this.running.set(job.responseId, running);
    try {
      const outcome = await this.execute(job, msg, running);
      if (outcome === "retry") msg.nak(Math.min(30_000, 1_000 * 2 ** Math.min(5, msg.info.deliveryCount - 1)));
      else if (outcome === "requeue") msg.nak();
      else msg.ack();
    } catch (err) {
      this.log.error("background response failed to run; it will be retried", { response: job.responseId, err });
      msg.nak(2_000);
    } finally {
      clearInterval(keepAlive);
      this.running.delete(job.responseId);
    }
  }

  /** Runs one job to a stored final state ("done"), or asks for it to be delivered again. */
  private async execute(job: BackgroundJob, msg: JsMsg, running: Running): Promise<"done" | "retry" | "requeue"> {
    const { projectId, responseId } = job;
    const responses = this.service.responses;
    let stored = await responses.get(projectId, responseId);
    if (!stored || isTerminal(stored.value.response.status)) return "done"; // deleted, cancelled while queued, or already finished
    const body = stored.value.request as ResponseCreateRequest;
    const streamed = body.stream === true;
    if (stored.value.response.status === "in_progress" && msg.info.deliveryCount > this.settings.maxAttempts) {
      await this.finishWith(projectId, stored, (r) => fail(r, "server_error", `The background run was interrupted ${this.settings.maxAttempts} times; giving up.`));
      return "done";
    }
    if (streamed && stored.value.response.status === "in_progress") {
      // Its stream already carried events of the interrupted attempt: a new run could not continue it.
      await this.finishWith(projectId, stored, (r) => fail(r, "server_error", "The worker running this response stopped; the response could not be completed."));
      return "done";
    }

    const input = (await responses.inputItems(projectId, responseId)) ?? [];
    let run: ResponseRun;
    try {
      const prepared = await this.service.prepare(projectId, body, { id: responseId, createdAt: stored.value.response.created_at, input });
      run = await this.service.start(prepared);
    } catch (err) {
      if (!(err instanceof ApiError)) throw err;
      const deadline = stored.value.response.created_at * 1000 + this.settings.requestTimeoutMs;
      if ((err.status === 503 || err.status === 504) && Date.now() < deadline) return "retry"; // no runner free or ready yet
      await this.finishWith(projectId, stored, (r) => fail(r, responseErrorOf(err).code, err.message));
      return "done";
    }
    running.run = run;
    if (running.cancelled) run.cancel();

    // queued -> in_progress, unless a cancel got there first.
    for (;;) {
      const next = { ...stored.value, response: { ...stored.value.response, status: "in_progress" as const } };
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
    let current: Versioned<StoredResponse> = stored;
    await run.run({
      sink,
      announce: false,
      beforeEnd: async (final) => {
        await this.service.appendToConversation(run.prepared, final);
        await this.store(projectId, current, final);
      },
    });
    if (run.response.status === "cancelled") sink?.event({ type: "error", code: "response_cancelled", message: "The response was cancelled.", param: null });
    await sink?.flush();
    void current;
    return "done";
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

  private async finishWith(projectId: string, stored: Versioned<StoredResponse>, change: (r: ResponseObject) => ResponseObject): Promise<void> {
    let current: Versioned<StoredResponse> | undefined = stored;
    while (current && !isTerminal(current.value.response.status)) {
      const next = { ...current.value, response: change({ ...current.value.response }) };
      if ((await this.service.responses.update(projectId, next, current.revision)) !== undefined) {
        if (current.value.request && (current.value.request as ResponseCreateRequest).stream) {
          const sink = this.events.writer(next.response.id, await this.events.nextSequence(next.response.id));
          sink.event({ type: "response.failed", response: next.response });
          await sink.flush();
        }
        return;
      }
      current = await this.service.responses.get(projectId, stored.value.response.id);
    }
  }
}

function fail(response: ResponseObject, code: string, message: string): ResponseObject {
  return { ...response, status: "failed", error: { code, message }, completed_at: null };
}
