import type { ModelSpec } from "../catalog/mod.js";
import { Priority } from "../../proto/gen/tributary/v1/inference.js";
import { asDomainError, errors, isTransient, type DomainError } from "../errors/mod.js";
import { parseChatCompletionRequest, parseResponseCreateRequest } from "../openai/mod.js";
import { runChatCompletion } from "../inference/mod.js";
import type { GenerationSource } from "../inference/mod.js";
import type { ResponseService } from "../responses/mod.js";

// What a batch line can target: one executor per endpoint, each validating a line's body with the
// schema of the HTTP route itself and running it through the same code path as that route, at
// batch priority. Another endpoint joins batches by adding its executor to LINE_EXECUTORS.

export interface LineContext {
  client: GenerationSource;
  catalog: ReadonlyMap<string, ModelSpec>;
  /** The batch's project: stored responses and conversations of a /v1/responses line are its. */
  projectId: string;
  /** The Responses core, for /v1/responses lines. */
  responses: ResponseService;
  requestId: string;
  deadlineUnixMs: number;
  /** Aborted when the batch is cancelled or expires. */
  signal: AbortSignal;
}

/** How a line ended: its response body, its error (for the error file), or "run it again later". */
export type LineOutcome =
  | { kind: "succeeded"; body: unknown }
  | { kind: "failed"; error: DomainError }
  | { kind: "retry"; error: DomainError };

export interface LineExecutor {
  readonly endpoint: string;
  /** Decodes the body with the route's schema (throws its domain error) and names the model it asks for: the coordinator's validation. */
  validate(body: unknown): { model: string };
  /** Decodes the body of a validated line (a work item, read from the work stream) and runs it. */
  run(body: unknown, ctx: LineContext): Promise<LineOutcome>;
}

/** A batch line's result is one response body: a line cannot ask for a stream. */
function refuseStream(body: { stream?: boolean | null }): void {
  if (body.stream) throw errors.invalidParam("stream", "Streaming is not supported in batch requests: remove 'stream' from the body.");
}

/** A failure a later attempt may not see (no runner, overload, a lost runner, a timeout, a cancel) is retried. */
function outcomeOf(err: unknown): LineOutcome {
  const error = asDomainError(err);
  if (isTransient(error) || error._tag === "Cancelled") return { kind: "retry", error };
  return { kind: "failed", error };
}

export const chatCompletionsExecutor: LineExecutor = {
  endpoint: "/v1/chat/completions",
  validate(body) {
    return { model: parseChatCompletionRequest(body).model };
  },
  async run(json, ctx) {
    try {
      const body = parseChatCompletionRequest(json);
      refuseStream(body);
      const spec = ctx.catalog.get(body.model);
      if (!spec) throw errors.modelNotFound(body.model);
      const { completion } = await runChatCompletion(ctx.client, body, spec, {
        requestId: ctx.requestId,
        deadlineUnixMs: ctx.deadlineUnixMs,
        priority: Priority.PRIORITY_BATCH,
        signal: ctx.signal,
      });
      return { kind: "succeeded", body: completion };
    } catch (err) {
      return outcomeOf(err);
    }
  },
};

/** /v1/responses lines: the Responses core, at batch priority (stored in the batch's project when `store`). */
export const responsesExecutor: LineExecutor = {
  endpoint: "/v1/responses",
  validate(body) {
    return { model: parseResponseCreateRequest(body).model };
  },
  async run(json, ctx) {
    try {
      const body = parseResponseCreateRequest(json);
      refuseStream(body);
      if (body.background) throw errors.invalidParam("background", "Background responses are not supported in batch requests: remove 'background' from the body.");
      const response = await ctx.responses.respond(ctx.projectId, body, {
        requestId: ctx.requestId,
        deadlineUnixMs: ctx.deadlineUnixMs,
        priority: Priority.PRIORITY_BATCH,
        signal: ctx.signal,
      });
      return { kind: "succeeded", body: response };
    } catch (err) {
      return outcomeOf(err);
    }
  },
};

/** The endpoints batches accept, by URL. */
export const LINE_EXECUTORS: ReadonlyMap<string, LineExecutor> = new Map([chatCompletionsExecutor, responsesExecutor].map((e) => [e.endpoint, e]));

/** Every endpoint OpenAI's batch API names (only those with an executor are accepted here). */
export const OPENAI_BATCH_ENDPOINTS = [
  "/v1/responses",
  "/v1/chat/completions",
  "/v1/embeddings",
  "/v1/completions",
  "/v1/moderations",
  "/v1/images/generations",
  "/v1/images/edits",
  "/v1/videos",
] as const;
