import type { NatsConnection } from "@nats-io/transport-node";
import type { Logger } from "../../lib/log.js";
import { isWellFormedTemplateName } from "../../lib/ids.js";
import type { GenerateRequest } from "../../proto/gen/tributary/v1/inference.js";
import { estimateRequestTokens } from "../../modules/ratelimit/mod.js";
import type { RateLimiter } from "../../modules/ratelimit/mod.js";
import { listObject, parsePromptRunRequest, parseResponseCreateRequest, type ResponseCreateRequest, openAIError, type ResponseObject } from "../../modules/openai/mod.js";
import { errors, isDomainError, shown } from "../../modules/errors/mod.js";
import type { HttpExchange } from "../http/exchange.js";
import type { Router } from "../http/router.js";
import type { BackgroundLifecycle, PromptStore, NumberedEvent, ResponseEventLog } from "../../modules/responses/mod.js";
import { publishCancel, checkInputs, placeholdersOf, renderBody, isTerminal, type ResponseRun, type ResponseService } from "../../modules/responses/mod.js";
import { ResponseEventStream } from "../sse/response-event-stream.js";
import { RESPONSE_TERMINAL_EVENTS, type ResponseEventSink } from "../../modules/openai/mod.js";
import type { RequestObservation } from "../../modules/traces/mod.js";
import { describe, observe } from "./chat-completions.js";
import { SseWriter } from "../sse/sse-writer.js";
import type { PendingBudget } from "../sse/pending-budget.js";
import { listQuery } from "./list-query.js";
import { pageOf } from "../../lib/page.js";

export interface ResponseRouteDeps {
  nc: NatsConnection;
  service: ResponseService;
  prompts: PromptStore;
  background: BackgroundLifecycle;
  events: ResponseEventLog;
  rateLimiter: RateLimiter;
  maxBodyBytes: number;
  /** What slow SSE clients may hold, per stream and in total. */
  streamBudget: PendingBudget;
  log: Logger;
}

const notFound = (id: string) => errors.notFound(`Response with id '${shown(id)}' not found.`);

/**
 * The Responses API: create (foreground, streamed or not, or background), retrieve, delete,
 * input items, cancel, and POST /v1/responses/{name} to run a stored prompt template.
 */
export function registerResponseRoutes(router: Router, deps: ResponseRouteDeps): void {
  const { service } = deps;

  router.post("/v1/responses", async (ex) => {
    const obs = observe(ex, "/v1/responses");
    const body = parseResponseCreateRequest(await ex.readJson(deps.maxBodyBytes));
    await create(ex, body, obs);
  });

  router.get("/v1/responses/:id", async (ex, { id }) => {
    const stored = await service.responses.get(projectOf(ex), id!);
    if (!stored) throw notFound(id!);
    const q = ex.searchParams();
    if (q.get("stream") !== "true") return ex.json(200, stored.value.response);
    if (!stored.value.request?.stream)
      throw errors.invalidParam("stream", "Only background responses created with stream: true can be streamed again.");
    const rawAfter = q.get("starting_after");
    const startingAfter = rawAfter === null ? -1 : Number(rawAfter);
    if (!Number.isInteger(startingAfter) || startingAfter < -1)
      throw errors.invalidParam("starting_after", `Invalid value for 'starting_after': expected a sequence number, got '${rawAfter}'.`);
    await followEvents(ex, projectOf(ex), id!, startingAfter);
  });

  router.delete("/v1/responses/:id", async (ex, { id }) => {
    const projectId = projectOf(ex);
    const stored = await service.responses.get(projectId, id!);
    if (!stored || !(await service.responses.delete(projectId, id!))) throw notFound(id!);
    if (stored.value.request?.stream) void deps.events.purge(id!);
    // A background run still going stops rather than write into a deleted response.
    if (!isTerminal(stored.value.response.status)) publishCancel(deps.nc, id!);
    ex.json(200, { id, object: "response", deleted: true });
  });

  router.get("/v1/responses/:id/input_items", async (ex, { id }) => {
    const query = listQuery(ex);
    const items = await service.responses.inputItems(projectOf(ex), id!);
    if (!items) throw notFound(id!);
    const page = pageOf(items, query);
    if (!page) throw errors.invalidParam("after", `No item with id '${shown(query.after ?? "")}' in this list.`);
    ex.json(200, listObject(page));
  });

  // POST /v1/responses/{id}/cancel, and POST /v1/responses/{template name} (names may hold '/').
  router.post("/v1/responses/*path", async (ex, { path }) => {
    const cancel = /^(resp_[^/]+)\/cancel$/.exec(path!);
    if (cancel) return cancelResponse(ex, cancel[1]!);
    if (!isWellFormedTemplateName(path!)) throw errors.unknownRoute(ex.method, ex.path);
    await runTemplate(ex, path!);
  });

  async function create(ex: HttpExchange, body: ResponseCreateRequest, obs: RequestObservation): Promise<void> {
    describe(obs, ex, body, body.max_output_tokens);
    if (body.background) {
      // Queued, not run here: the run happens in an actor host (its usage counts there).
      ex.observation = undefined;
      return createBackground(ex, body);
    }
    const abort = new AbortController();
    ex.onAbort(() => abort.abort());
    let sink: ResponseEventSink | undefined;
    let events: ResponseEventStream | undefined;
    const onStart = (run: ResponseRun) => {
      ex.responseHeaders["x-tributary-runner"] = run.runnerId;
      obs.runnerAdmitted(run.runnerId, run.admitted?.promptTokens ?? 0, run.admitted?.renderedPrompt);
      obs.responseId = run.response.id;
      run.observer = obs;
      if (!body.stream || ex.aborted) return undefined;
      const writer = new SseWriter(ex, deps.streamBudget);
      writer.open();
      events = new ResponseEventStream(writer, { onOverflow: () => abort.abort() });
      const out = events;
      sink = {
        event: (e) => {
          obs.chunks++;
          // The terminal event carries the whole response: what a logged stream adds up to.
          if (obs.log && RESPONSE_TERMINAL_EVENTS.has(e.type)) obs.responseBody = e.response;
          out.event(e);
        },
      };
      return sink;
    };
    const charge = rateLimit(ex, body);
    let final: ResponseObject;
    try {
      final = await service.respond(projectOf(ex), body, {
        requestId: ex.requestId,
        signal: abort.signal,
        onStart,
        charge: async (request) => {
          request.wantRenderedPrompt = obs.log;
          const admission = await charge(request);
          obs.rateLimitAdmitted();
          return admission;
        },
      });
    } catch (err) {
      if (isDomainError(err)) obs.fail(err);
      if (!events) throw err; // nothing was sent yet: an ordinary error response
      // A failed run already ended its stream with response.failed; anything else is told here.
      if (!isDomainError(err)) streamFailed(events, ex, err);
      return (events as ResponseEventStream).close();
    }
    if (final.status === "cancelled") obs.cancelled = true;
    if (obs.log && obs.responseBody === undefined) obs.responseBody = final;
    if (events) (events as ResponseEventStream).close();
    else if (final.status !== "cancelled") ex.json(200, final);
  }

  /** The model's rate limits: the budget is taken before the runner request goes out (429 beyond it). */
  function rateLimit(ex: HttpExchange, body: ResponseCreateRequest) {
    const spec = service.spec(body.model);
    return async (request: GenerateRequest) => {
      const admission = await deps.rateLimiter.admit(ex.principal!, spec, estimateRequestTokens(request, spec));
      Object.assign(ex.responseHeaders, admission.headers);
      return admission;
    };
  }

  async function createBackground(ex: HttpExchange, body: ResponseCreateRequest): Promise<void> {
    const projectId = projectOf(ex);
    // Checked and resolved now, so a bad request fails here rather than in the worker.
    const prepared = await service.prepare(projectId, body);
    // Charged its estimate now; the run settles it with what it used, wherever it runs.
    const admission = await rateLimit(ex, body)(service.generateRequestOf(prepared));
    // The key's id rides with the queued response: its runs' traces and usage name it.
    const response = await deps.background.queue(prepared, admission.hold(), { organization_id: ex.principal!.organizationId, api_key_id: ex.principal!.keyId });
    if (body.stream) await followEvents(ex, projectId, response.id, -1);
    else ex.json(200, response);
  }

  /**
   * Streams a background response's events with sequence_number > startingAfter, as stored by
   * the gateway that queued it and the worker that runs it, until its terminal event.
   */
  async function followEvents(ex: HttpExchange, projectId: string, id: string, startingAfter: number): Promise<void> {
    const writer = new SseWriter(ex, deps.streamBudget);
    writer.open();
    const abort = new AbortController();
    ex.onAbort(() => abort.abort());
    const sink = new ResponseEventStream(writer, {
      onOverflow: () => abort.abort(),
      numbered: true,
    });
    let last = startingAfter;
    const onEvent = (event: NumberedEvent) => {
      last = event.sequence_number;
      if (event.sequence_number > startingAfter) sink.event(event);
    };
    // Cancelled (or deleted) before a worker wrote its end: say so and stop.
    const onIdle = async () => {
      const stored = await service.responses.get(projectId, id);
      if (stored && stored.value.response.status !== "cancelled") return false;
      const code = stored ? "response_cancelled" : "response_deleted";
      sink.event({ type: "error", code, message: stored ? "The response was cancelled." : "The response was deleted.", param: null, sequence_number: last + 1 });
      return true;
    };
    try {
      await deps.events.follow(id, onEvent, { signal: abort.signal, onIdle });
    } catch (err) {
      streamFailed(sink, ex, err, last + 1);
    }
    sink.close();
  }

  /** After the 200 went out, a failure can only be told in the stream. */
  function streamFailed(sink: ResponseEventStream, ex: HttpExchange, err: unknown, sequenceNumber?: number): void {
    deps.log.error("response stream failed", { requestId: ex.requestId, err });
    const event = { type: "error", code: "server_error", message: openAIError(errors.internal(err), ex.requestId).body.error.message, param: null };
    sink.event(sequenceNumber === undefined ? event : { ...event, sequence_number: sequenceNumber });
  }

  async function cancelResponse(ex: HttpExchange, id: string): Promise<void> {
    ex.json(200, await deps.background.cancel(projectOf(ex), id));
  }

  async function runTemplate(ex: HttpExchange, name: string): Promise<void> {
    const obs = observe(ex, "/v1/responses/{name}");
    const run = parsePromptRunRequest(await ex.readJson(deps.maxBodyBytes));
    // The raw body is the call (inputs), taken now: the rendered template is parsed below.
    const raw = ex.takeRawBody();
    const template = await deps.prompts.get(projectOf(ex), name);
    if (!template) throw errors.notFound(`Prompt template '${name}' not found.`);
    let body = template.body;
    if (run.template != null) body = { ...body, input: run.template };
    const values = checkInputs(name, placeholdersOf(body), run.inputs ?? {});
    const rendered = renderBody(body, values);
    if (run.stream != null) rendered.stream = run.stream;
    if (run.log != null) rendered.log = run.log;
    obs.requestBody = raw; // kept only if the run says log: true (describe)
    await create(ex, parseResponseCreateRequest(rendered), obs);
  }
}

function projectOf(ex: HttpExchange): string {
  return ex.principal!.projectId;
}
