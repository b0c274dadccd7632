import type { NatsConnection } from "@nats-io/transport-node";
import type { Logger } from "../../lib/log.js";
import { errors } from "../http/api-error.js";
import type { HttpExchange } from "../http/exchange.js";
import type { Router } from "../http/router.js";
import type { BackgroundQueue } from "../responses/background-queue.js";
import { publishCancel } from "../responses/background-queue.js";
import type { PromptStore } from "../responses/prompt-store.js";
import { checkInputs, placeholdersOf, renderBody } from "../responses/prompt-template.js";
import { isTerminal, type ResponseService } from "../responses/response-service.js";
import { parsePromptRunRequest, TEMPLATE_NAME } from "../schemas/prompts.js";
import { parseResponseCreateRequest, type ResponseCreateRequest } from "../schemas/responses.js";
import { ResponseEventStream } from "../sse/response-event-stream.js";
import { SseWriter } from "../sse/sse-writer.js";
import { newResponseObject, type ResponseObject } from "../translate/responses-object.js";
import { listQuery, listObject, pageOf } from "./list-query.js";

export interface ResponseRouteDeps {
  nc: NatsConnection;
  service: ResponseService;
  prompts: PromptStore;
  background: BackgroundQueue;
  maxBodyBytes: number;
  maxPendingStreamBytes: number;
  log: Logger;
}

const notFound = (id: string) => errors.notFound(`Response with id '${id}' not found.`);

/**
 * The Responses API: create (foreground, streamed or not, or background), retrieve, delete,
 * input items, cancel, and POST /v1/responses/{name} to run a stored prompt template.
 */
export function registerResponseRoutes(router: Router, deps: ResponseRouteDeps): void {
  const { service } = deps;

  router.post("/v1/responses", async (ex) => {
    const body = parseResponseCreateRequest(await ex.readJson(deps.maxBodyBytes));
    await create(ex, body);
  });

  router.get("/v1/responses/:id", async (ex, { id }) => {
    const stored = await service.responses.get(projectOf(ex), id!);
    if (!stored) throw notFound(id!);
    const q = ex.searchParams();
    if (q.get("stream") === "true")
      throw errors.invalidParam("stream", "Streaming a stored response is only possible for background responses created with stream: true.");
    ex.json(200, stored.value.response);
  });

  router.delete("/v1/responses/:id", async (ex, { id }) => {
    const projectId = projectOf(ex);
    const stored = await service.responses.get(projectId, id!);
    if (!stored || !(await service.responses.delete(projectId, id!))) throw notFound(id!);
    // A background run still going stops rather than write into a deleted response.
    if (!isTerminal(stored.value.response.status)) publishCancel(deps.nc, id!);
    ex.json(200, { id, object: "response", deleted: true });
  });

  router.get("/v1/responses/:id/input_items", async (ex, { id }) => {
    const query = listQuery(ex);
    const items = await service.responses.inputItems(projectOf(ex), id!);
    if (!items) throw notFound(id!);
    const page = pageOf(items, query);
    ex.json(200, listObject(page.data, page.has_more));
  });

  // POST /v1/responses/{id}/cancel, and POST /v1/responses/{template name} (names may hold '/').
  router.post("/v1/responses/*path", async (ex, { path }) => {
    const cancel = /^(resp_[^/]+)\/cancel$/.exec(path!);
    if (cancel) return cancelResponse(ex, cancel[1]!);
    if (!TEMPLATE_NAME.test(path!)) throw errors.unknownRoute(ex.method, ex.path);
    await runTemplate(ex, path!);
  });

  async function create(ex: HttpExchange, body: ResponseCreateRequest): Promise<void> {
    if (body.background) return createBackground(ex, body);
    const prepared = await service.prepare(projectOf(ex), body);
    const run = await service.start(prepared, { requestId: ex.requestId });
    if (ex.aborted) return run.cancel();
    ex.onAbort(() => run.cancel());
    ex.responseHeaders["x-tributary-runner"] = run.runnerId;
    // A client that left gets nothing stored: it never saw the result.
    const beforeEnd = (r: ResponseObject) => (r.status === "cancelled" ? Promise.resolve() : service.save(prepared, r));
    if (body.stream) {
      const writer = new SseWriter(ex);
      writer.open();
      const sink = new ResponseEventStream(writer, { maxPendingBytes: deps.maxPendingStreamBytes, onOverflow: () => run.cancel() });
      await run.run({ sink, beforeEnd });
      sink.close();
      return;
    }
    const final = await run.run({ beforeEnd });
    const failure = run.failure();
    if (failure) throw failure;
    if (final.status !== "cancelled") ex.json(200, final);
  }

  async function createBackground(ex: HttpExchange, body: ResponseCreateRequest): Promise<void> {
    if (body.stream)
      throw errors.invalidParam("stream", "Streaming a background response is not supported: create it without stream and poll GET /v1/responses/{id}.");
    const projectId = projectOf(ex);
    // Checked and resolved now, so a bad request fails here rather than in the worker.
    const prepared = await service.prepare(projectId, body);
    const response = newResponseObject(body, { id: prepared.id, createdAt: prepared.createdAt, conversationId: prepared.conversationId }, "queued");
    const request = { ...body, input: [] };
    await service.responses.create(projectId, { response, ancestors: prepared.ancestors, request }, prepared.input);
    try {
      await deps.background.enqueue({ projectId, responseId: response.id });
    } catch (err) {
      await service.responses.delete(projectId, response.id).catch(() => {});
      throw err;
    }
    ex.json(200, response);
  }

  async function cancelResponse(ex: HttpExchange, id: string): Promise<void> {
    const projectId = projectOf(ex);
    for (;;) {
      const stored = await service.responses.get(projectId, id);
      if (!stored) throw notFound(id);
      const response = stored.value.response;
      if (!response.background) throw errors.invalidParam("response_id", "Only responses created with background: true can be cancelled.");
      if (isTerminal(response.status)) return ex.json(200, response);
      response.status = "cancelled";
      if ((await service.responses.update(projectId, stored.value, stored.revision)) === undefined) continue; // the worker moved it on: look again
      publishCancel(deps.nc, id);
      return ex.json(200, response);
    }
  }

  async function runTemplate(ex: HttpExchange, name: string): Promise<void> {
    const run = parsePromptRunRequest(await ex.readJson(deps.maxBodyBytes));
    const template = await deps.prompts.get(projectOf(ex), name);
    if (!template) throw errors.notFound(`Prompt template '${name}' not found.`);
    let body = template.body;
    if (run.template != null) body = { ...body, input: run.template };
    const values = checkInputs(name, placeholdersOf(body), run.inputs ?? {});
    const rendered = renderBody(body, values);
    if (run.stream != null) rendered.stream = run.stream;
    if (run.log != null) rendered.log = run.log;
    await create(ex, parseResponseCreateRequest(rendered));
  }
}

function projectOf(ex: HttpExchange): string {
  return ex.principal!.projectId;
}
