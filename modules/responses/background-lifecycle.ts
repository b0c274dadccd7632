import type { NatsConnection } from "@nats-io/transport-node";
import type { Modified } from "../../lib/nats/kv-records.js";
import type { Logger } from "../../lib/log.js";
import { errors, isDomainError, type DomainError } from "../errors/mod.js";
import { newResponseObject, type ResponseCreateRequest, type ResponseError, type ResponseEvent, type ResponseObject } from "../openai/mod.js";
import { settleHeldCharge, type HeldCharge } from "../ratelimit/mod.js";
import { publishCancel, type BackgroundJob, type BackgroundQueue } from "./background-queue.js";
import { cancel, claim, fail, finish, NO_REQUEST, requeue, STREAM_CUT, usedTokens, type Claim, type Settlement, type Transition } from "./background-states.js";
import type { ResponseEventLog } from "./response-event-log.js";
import { responseErrorOf, type PreparedResponse, type ResponseRun, type ResponseService } from "./response-service.js";
import type { ResponseOwner, StoredResponse } from "./response-store.js";

/** The events a gateway writes when it queues a streamed background response; the run's follow. */
const QUEUED_EVENT_TYPES = ["response.created", "response.queued"] as const;
/** The sequence number of a background run's first event (response.in_progress). */
export const RUN_FIRST_SEQUENCE = QUEUED_EVENT_TYPES.length;

/** How a cancelled background stream ends (OpenAI's error event: there is no response.cancelled). */
export const cancelledEvent = (): ResponseEvent => ({ type: "error", code: "response_cancelled", message: "The response was cancelled.", param: null });

/** What a finished background run was: its request, when it started, where it ran, how it failed. */
export interface RunRecord {
  request: ResponseCreateRequest;
  /** Unix ms and performance.now() when the run started. */
  startedAt: { unixMs: number; perf: number };
  runnerId: string;
  promptTokens: number;
  renderedPrompt: string | undefined;
  failure: DomainError | undefined;
  /** Milliseconds from `startedAt` to the first token, when there was one. */
  firstTokenMs: number | null;
  /** Who queued it: the key's id for its trace and usage ("" for responses queued before it was kept). */
  owner: { organizationId: string; keyId: string };
}

/** Failures of a run that another runner may not have: a run nobody has seen yet starts over. */
const RUNNER_LOST: ReadonlySet<DomainError["_tag"]> = new Set(["RunnerLost", "StreamInterrupted"]);
/** Refusals that mean "no room yet": the job waits in the queue until the request's deadline. */
const NO_ROOM_YET: ReadonlySet<DomainError["_tag"]> = new Set(["NoRunner", "QueueFull", "DeadlineExceeded", "Unavailable"]);

export interface BackgroundLifecycleDeps {
  /** Cancel signals to the worker running a response, and rate-limit settlements. */
  nc: NatsConnection;
  service: ResponseService;
  events: ResponseEventLog;
  queue: BackgroundQueue;
  /** Runs of one response (hosts that died mid-run, runners lost) before it is marked failed. */
  maxAttempts: number;
  requestTimeoutMs: number;
  log: Logger;
  /** Sees every run that ended (usage rollups count each run: a run started over spent tokens too; traces). */
  onRunEnded?: (projectId: string, response: ResponseObject, run: RunRecord) => void;
}

/**
 * How the worker reaches the run of one job: the user's cancel (a signal on the cancel subject)
 * and the host's shutdown (the run is handed back to the queue) both stop it; either may come
 * before the run exists.
 */
export class RunControl {
  private run: ResponseRun | undefined;
  private stop: "cancelled" | "handed_back" | undefined;

  get handedBack(): boolean {
    return this.stop === "handed_back";
  }

  cancel(): void {
    this.stop ??= "cancelled";
    this.run?.cancel();
  }

  handBack(): void {
    this.stop ??= "handed_back";
    this.run?.cancel();
  }

  attach(run: ResponseRun): void {
    this.run = run;
    if (this.stop) run.cancel();
  }
}

/**
 * What became of a job: the response is final ("done"); it waits for room or for the store
 * ("later": try again after a pause); or it is queued again and can run at once elsewhere
 * ("again": its runner was lost, or its host handed it back).
 */
export type RunOutcome = "done" | "later" | "again";

/**
 * The whole life of a background response in one place: queued by a gateway (queue), run by a
 * worker of an actor host (run), cancelled by the user in any state (cancel). Every move is one
 * of background-states.ts, applied with a compare-and-set on the stored record, and each move
 * that ends a run settles the rate-limit charge taken when the response was queued with the
 * tokens its runs used, with the budget's owner, from whichever process makes the move.
 */
export class BackgroundLifecycle {
  constructor(private readonly deps: BackgroundLifecycleDeps) {}

  private get responses() {
    return this.deps.service.responses;
  }

  /**
   * Stores a prepared response as queued with the charge its gateway took (`held`), writes the
   * first events of its stream (when it streams) and queues its job. On failure nothing stays
   * behind and the charge goes back.
   */
  async queue(prepared: PreparedResponse, held: HeldCharge | undefined, owner: ResponseOwner): Promise<ResponseObject> {
    const { projectId, body } = prepared;
    const response = newResponseObject(body, { id: prepared.id, createdAt: prepared.createdAt, conversationId: prepared.conversationId }, "queued");
    const record: StoredResponse = { response, ancestors: prepared.ancestors, request: { ...body, input: [] }, owner };
    if (held) record.charge = { held, spentTokens: 0, unmetered: false };
    try {
      await this.responses.create(projectId, record, prepared.input);
      if (body.stream) {
        const log = this.deps.events.writer(response.id, 0);
        for (const type of QUEUED_EVENT_TYPES) log.event({ type, response });
        await log.flush();
      }
      await this.deps.queue.enqueue({ projectId, responseId: response.id });
    } catch (err) {
      await this.responses.delete(projectId, response.id).catch(() => {});
      if (held) this.settle({ held, usedTokens: 0 });
      throw err;
    }
    return response;
  }

  /**
   * Cancels a background response (NotFound, or InvalidParam for a foreground one); returns it
   * as it is afterwards. A queued one never runs (its stream ends here); a running one is
   * signalled and its worker stops it at once, keeping what it produced; a finished one is
   * left as it is.
   */
  async cancel(projectId: string, id: string): Promise<ResponseObject> {
    let from: ResponseObject["status"] | undefined;
    const stored = await this.move(projectId, id, (current) => {
      if (!current.response.background) throw errors.invalidParam("response_id", "Only responses created with background: true can be cancelled.");
      from = current.response.status;
      return cancel(current);
    });
    if (!stored) throw errors.notFound(`Response with id '${id}' not found.`);
    if (stored.changed) {
      publishCancel(this.deps.nc, id);
      // Nobody runs a queued one: its stream's end is written here.
      if (from === "queued" && stored.value.request?.stream) await this.writeEvents(id, [cancelledEvent()]);
    }
    return stored.value.response;
  }

  /**
   * Runs one job: the response goes in_progress, runs, and ends stored with its result ("done");
   * or it waits in the queue ("later": no runner has room yet, its result could not be stored);
   * or it is queued again ("again": its runner was lost, or `control` handed it back because
   * the host stops). Throws when the stores fail.
   */
  async run(job: BackgroundJob, control: RunControl): Promise<RunOutcome> {
    const { projectId, responseId: id } = job;
    const { service, maxAttempts } = this.deps;
    const found = await this.responses.get(projectId, id);
    if (!found) return "done"; // deleted
    const plan = claim(found.value, maxAttempts);
    const request = found.value.request;
    if (plan.kind === "over") return "done";
    if (plan.kind === "fail") return this.failed(projectId, id, plan.error);
    if (!request) return this.failed(projectId, id, { code: "server_error", message: NO_REQUEST }); // claim says so first

    // A runner admits it first, so a response with no runner yet stays queued.
    const input = (await this.responses.inputItems(projectId, id)) ?? [];
    let runTokens = 0;
    let run: ResponseRun;
    const startedAt = { unixMs: Date.now(), perf: performance.now() };
    try {
      const prepared = await service.prepare(projectId, request, { id, createdAt: found.value.response.created_at, input });
      run = await service.start(prepared, {
        charge: async (generate) => {
          generate.wantRenderedPrompt = request.log === true;
          return { settle: (used) => (runTokens = used) };
        },
      });
    } catch (err) {
      if (!isDomainError(err)) throw err;
      const deadline = found.value.response.created_at * 1000 + this.deps.requestTimeoutMs;
      if (NO_ROOM_YET.has(err._tag) && Date.now() < deadline) {
        this.deps.log.debug("background response waits for a runner", { response: id, reason: err.message });
        return "later";
      }
      return this.failed(projectId, id, responseErrorOf(err));
    }
    control.attach(run);
    let firstTokenAt: number | undefined;
    run.observer = { delta: () => void (firstTokenAt ??= performance.now()), choiceEnd: () => {}, final: () => {} };

    // queued -> in_progress, unless a cancel, a delete or another worker got there first.
    const seen: { decision?: Claim } = {};
    const claimed = await this.responses.modify(projectId, id, (current) => {
      const decision = (seen.decision = claim(current, maxAttempts));
      return decision.kind === "run" ? decision.next : undefined;
    });
    if (!claimed?.changed) {
      run.cancel();
      await run.run();
      return seen.decision?.kind === "fail" ? this.failed(projectId, id, seen.decision.error) : "done";
    }

    const attempts = claimed.value.attempts ?? 1;
    const streamed = request.stream === true;
    const sink = streamed ? this.deps.events.writer(id, RUN_FIRST_SEQUENCE) : undefined;
    // What to settle when the response is deleted while it runs (no record to carry the charge).
    const orphan = (tokens: number): Settlement | undefined => claimed.value.charge && { held: claimed.value.charge.held, usedTokens: usedTokens(claimed.value.charge, tokens) };
    let rerun = false;
    // Stopped by its host's shutdown (a run that finished first is stored as usual).
    const handedBack = (result: ResponseObject) => control.handedBack && result.status === "cancelled";
    const final = await run.run({
      sink,
      announce: false,
      beforeEnd: async (result) => {
        if (handedBack(result)) return; // stored below
        // Its runner died: a run nobody has seen yet starts over on another one.
        rerun = !streamed && attempts < maxAttempts && RUNNER_LOST.has(run.failure()?._tag ?? "Internal");
        if (rerun) return;
        await service.appendToConversation(run.prepared, result);
        await this.move(projectId, id, (current) => finish(current, result, runTokens), orphan(runTokens));
      },
    });

    try {
      this.deps.onRunEnded?.(projectId, final, {
        request,
        startedAt,
        runnerId: run.runnerId,
        promptTokens: run.admitted?.promptTokens ?? 0,
        renderedPrompt: run.admitted?.renderedPrompt,
        failure: run.failure(),
        firstTokenMs: firstTokenAt === undefined ? null : firstTokenAt - startedAt.perf,
        owner: { organizationId: claimed.value.owner?.organization_id ?? "", keyId: claimed.value.owner?.api_key_id ?? "" },
      });
    } catch (err) {
      this.deps.log.warn("recording a background run failed", { response: id, err });
    }
    if (handedBack(final)) {
      if (streamed) {
        // Its events are out: it cannot start over elsewhere.
        const cut: ResponseObject = { ...final, status: "failed", error: { code: "server_error", message: STREAM_CUT }, completed_at: null };
        const stored = await this.move(projectId, id, (current) => finish(current, cut, runTokens), orphan(runTokens));
        if (stored?.changed && stored.value.response.status === "failed") sink?.event({ type: "response.failed", response: stored.value.response });
      } else await this.move(projectId, id, (current) => requeue(current, final, runTokens, false), orphan(runTokens));
      await sink?.flush();
      return "again";
    }
    if (rerun) {
      await this.move(projectId, id, (current) => requeue(current, final, runTokens, true), orphan(runTokens));
      return "again";
    }
    if (final.status === "cancelled") sink?.event(cancelledEvent());
    await sink?.flush();
    // The result could not be stored: the job runs again once the store is back.
    return run.storeFailed ? "later" : "done";
  }

  /** The worker gives up on a job (the stores kept failing): the response ends failed. */
  async giveUp(job: BackgroundJob, message: string): Promise<void> {
    await this.failed(job.projectId, job.responseId, { code: "server_error", message });
  }

  /** Marks a response failed (unless it ended first) and ends its stream. */
  private async failed(projectId: string, id: string, error: ResponseError): Promise<"done"> {
    const stored = await this.move(projectId, id, (current) => fail(current, error));
    if (stored?.changed && stored.value.request?.stream) await this.writeEvents(id, [{ type: "response.failed", response: stored.value.response }]);
    return "done";
  }

  /**
   * Applies one move with compare-and-set, and settles what it settles once it is stored.
   * `orphan`: the settlement due when the response no longer exists (deleted while it ran).
   */
  private async move(projectId: string, id: string, step: (current: StoredResponse) => Transition | undefined, orphan?: Settlement): Promise<Modified<StoredResponse> | undefined> {
    let transition: Transition | undefined;
    const stored = await this.responses.modify(projectId, id, (current) => (transition = step(current))?.next);
    if (stored?.changed && transition?.settle) this.settle(transition.settle);
    if (!stored && orphan) this.settle(orphan);
    return stored;
  }

  private settle(settlement: Settlement): void {
    settleHeldCharge(this.deps.nc, settlement.held, settlement.usedTokens);
    this.deps.log.debug("background response settled", { model: settlement.held.model, charged: settlement.held.tokens, used: settlement.usedTokens });
  }

  /** Appends events to a response's stored stream after whatever is there. */
  private async writeEvents(id: string, events: ResponseEvent[]): Promise<void> {
    const log = this.deps.events.writer(id, await this.deps.events.nextSequence(id));
    for (const event of events) log.event(event);
    await log.flush();
  }
}
