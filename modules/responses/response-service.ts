import type { ModelSpec } from "../catalog/mod.js";
import { newId } from "../../lib/ids.js";
import type { Logger } from "../../lib/log.js";
import { FinishReason, Priority, type ChatMessage, type ChoiceEnd, type Final, type GenerateRequest, type TokenDelta } from "../../proto/gen/tributary/v1/inference.js";
import { normalizeInputItems, toChatMessages, newResponseObject, responseUsage, type Item, type ResponseError, type ResponseObject, ResponseOutputBuilder, snapshot, type ResponseEvent, type ResponseEventSink, checkResponseRequest, responseToGenerateRequest, type GenerationOptions } from "../openai/mod.js";
import { domainErrorFromRunner } from "../inference/mod.js";
import { errors, isClientError, isDomainError, type DomainError } from "../errors/mod.js";
import type { GenerationStream, GenerationSource } from "../inference/mod.js";
import type { ResponseCreateRequest } from "../openai/mod.js";
import type { ConversationStore } from "./conversation-store.js";
import type { ResponseStore } from "./response-store.js";

export interface ResponseServiceDeps {
  catalog: ReadonlyMap<string, ModelSpec>;
  client: GenerationSource;
  responses: ResponseStore;
  conversations: ConversationStore;
  requestTimeoutMs: number;
  log: Logger;
}

/** A checked request with its state resolved: everything needed to run it, nothing written yet. */
export interface PreparedResponse {
  projectId: string;
  id: string;
  createdAt: number;
  body: ResponseCreateRequest;
  spec: ModelSpec;
  options: GenerationOptions;
  /** Items before this turn: the previous response's chain, or the conversation. */
  history: Item[];
  /** This turn's input items, with ids. */
  input: Item[];
  /** The previous_response_id chain this response continues, oldest first. */
  ancestors: string[];
  conversationId: string | null;
  messages: ChatMessage[];
}

export interface PrepareOptions {
  /** The id to use (a background response has one from its creation). */
  id?: string;
  createdAt?: number;
  /** Input items already normalized (a background run reads them back from the store). */
  input?: Item[];
}

export interface RunOptions {
  requestId?: string;
  /** PRIORITY_BATCH for batch lines. */
  priority?: Priority;
  /** Defaults to now + the request timeout. */
  deadlineUnixMs?: number;
  /**
   * Runs with the runner request before it is sent (rate limits take their budget here, or throw
   * RateLimited). The charge is settled once with the tokens really used: the final usage, or the
   * prompt plus what was generated when the run stopped early; 0 when no runner admitted it.
   */
  charge?: (request: GenerateRequest) => Promise<TokenCharge>;
}

/** What a run needs of its generation (a GenerationStream): the runner's events, and a way to stop it. */
export type RunSource = Pick<GenerationStream, "admitted" | "model" | "listen" | "cancel">;

/** A hold on a token budget, settled once with the tokens used. */
export interface TokenCharge {
  settle(tokensUsed: number): void;
}

const conversationIdOf = (c: ResponseCreateRequest["conversation"]) => (c == null ? null : typeof c === "string" ? c : c.id);

/** `error` on a failed response, from the error the client would have received. */
export function responseErrorOf(err: DomainError): ResponseError {
  if (err._tag === "RateLimited") return { code: "rate_limit_exceeded", message: err.message };
  if (isClientError(err)) return { code: "invalid_prompt", message: err.message };
  // Internal failures say nothing about the internals.
  return { code: "server_error", message: err._tag === "Internal" ? "The response failed because of an internal error." : err.message };
}

/**
 * The core of the Responses API, shared by the HTTP route, the background worker and batch
 * lines: check a request and resolve its state (prepare), get a runner to admit it (start),
 * then run it to the end while its events go to a sink (ResponseRun.run). Storing the result
 * is the caller's (a foreground response is created once finished; a background one is updated
 * in place), through `save`/`appendToConversation` here.
 */
export class ResponseService {
  constructor(private readonly deps: ResponseServiceDeps) {}

  get responses(): ResponseStore {
    return this.deps.responses;
  }

  get conversations(): ConversationStore {
    return this.deps.conversations;
  }

  spec(model: string): ModelSpec {
    const spec = this.deps.catalog.get(model);
    if (!spec) throw errors.modelNotFound(model);
    return spec;
  }

  /** Checks `body` and reads the state it refers to. Throws the domain error of a bad request. */
  async prepare(projectId: string, body: ResponseCreateRequest, options: PrepareOptions = {}): Promise<PreparedResponse> {
    const spec = this.spec(body.model);
    const generation = checkResponseRequest(body, spec);
    let history: Item[] = [];
    let ancestors: string[] = [];
    const conversationId = conversationIdOf(body.conversation);
    if (body.previous_response_id != null) {
      const previous = await this.deps.responses.context(projectId, body.previous_response_id);
      if (!previous)
        throw errors.invalidParam("previous_response_id", `Previous response with id '${body.previous_response_id}' not found.`, "previous_response_not_found");
      const status = previous.response.status;
      if (status === "queued" || status === "in_progress")
        throw errors.invalidParam("previous_response_id", `Previous response with id '${body.previous_response_id}' is still ${status}: wait until it finishes.`);
      history = previous.items;
      ancestors = [...previous.ancestors, body.previous_response_id];
    } else if (conversationId !== null) {
      if (!(await this.deps.conversations.get(projectId, conversationId)))
        throw errors.notFound(`Conversation with id '${conversationId}' not found.`, "conversation");
      history = await this.deps.conversations.items(projectId, conversationId);
    }
    let input = options.input;
    if (!input) {
      const known = new Map(history.map((item) => [item.id, item]));
      input = normalizeInputItems(body.input, (id) => known.get(id));
    }
    if (input.length === 0 && history.length === 0) throw errors.missingParam("input");
    const messages = toChatMessages(body.instructions, history, input);
    return {
      projectId,
      id: options.id ?? newId("resp_"),
      createdAt: options.createdAt ?? Math.floor(Date.now() / 1000),
      body,
      spec,
      options: generation,
      history,
      input,
      ancestors,
      conversationId,
      messages,
    };
  }

  /** Sends the request to a runner; resolves once admitted. Throws the domain error of a refusal. */
  /** The runner request of a prepared response. */
  generateRequestOf(prepared: PreparedResponse, options: RunOptions = {}): GenerateRequest {
    return responseToGenerateRequest(prepared.body, prepared.spec, prepared.options, prepared.messages, {
      requestId: options.requestId ?? newId("req_"),
      deadlineUnixMs: options.deadlineUnixMs ?? Date.now() + this.deps.requestTimeoutMs,
      priority: options.priority,
    });
  }

  async start(prepared: PreparedResponse, options: RunOptions = {}): Promise<ResponseRun> {
    const request = this.generateRequestOf(prepared, options);
    const charge = options.charge ? await options.charge(request) : undefined;
    try {
      const stream = await this.deps.client.generate(request);
      const run = new ResponseRun(prepared, stream, charge);
      run.onStoreError = (err) => this.deps.log.error("response could not be stored", { response: prepared.id, err });
      return run;
    } catch (err) {
      charge?.settle(0); // nothing was generated: the hold goes back
      // The runner names its messages; the client sent input.
      if (isDomainError(err) && err._tag === "ContextLengthExceeded") throw errors.contextLength(err.message, "input");
      throw err;
    }
  }

  /**
   * Runs one foreground response to its end: prepare, start, run, store. This is the whole of
   * POST /v1/responses without background, for the HTTP route and for batch lines alike.
   * `onStart` runs once a runner admitted it and may return the sink for its events (the route
   * opens its SSE stream there); `signal` stops it (nothing is stored then). Throws the domain error
   * the caller answers with: a refusal before anything ran, or the failure of a failed run.
   */
  async respond(
    projectId: string,
    body: ResponseCreateRequest,
    options: RunOptions & { signal?: AbortSignal; onStart?: (run: ResponseRun) => ResponseEventSink | undefined } = {},
  ): Promise<ResponseObject> {
    const prepared = await this.prepare(projectId, body);
    const run = await this.start(prepared, options);
    if (options.signal?.aborted) run.cancel();
    else options.signal?.addEventListener("abort", () => run.cancel(), { once: true });
    const sink = options.onStart?.(run);
    // A caller that left gets nothing stored: it never saw the result.
    const final = await run.run({ sink, beforeEnd: (r) => (r.status === "cancelled" ? Promise.resolve() : this.save(prepared, r)) });
    const failure = run.failure();
    if (failure) throw failure;
    return final;
  }

  /** Stores a finished foreground response (when `store`) and appends the turn to its conversation. */
  async save(prepared: PreparedResponse, response: ResponseObject): Promise<void> {
    await this.appendToConversation(prepared, response);
    if (response.store) await this.deps.responses.create(prepared.projectId, { response, ancestors: prepared.ancestors }, prepared.input);
  }

  /** A conversation gets the turn's input and output once the response finished well. */
  async appendToConversation(prepared: PreparedResponse, response: ResponseObject): Promise<void> {
    if (!prepared.conversationId || (response.status !== "completed" && response.status !== "incomplete")) return;
    const appended = await this.deps.conversations.append(prepared.projectId, prepared.conversationId, [...prepared.input, ...response.output]);
    if (!appended) this.deps.log.warn("conversation deleted while a response ran", { conversation: prepared.conversationId, response: response.id });
  }
}

/**
 * One admitted response running to its end. Events go to the sink in OpenAI's order; `run`
 * resolves with the final object (completed, incomplete, failed or cancelled), after
 * `beforeEnd` (the caller's persistence) and before the terminal event, so a client that reads
 * response.completed can chain on it at once.
 */
export class ResponseRun {
  readonly response: ResponseObject;
  private readonly builder: ResponseOutputBuilder;
  private sink: ResponseEventSink | undefined;
  private settle: ((final: Final | DomainError | "cancelled") => void) | undefined;
  private outcome: Final | DomainError | "cancelled" | undefined;
  private finishReason = FinishReason.FINISH_REASON_UNSPECIFIED;
  /** Usage the runner reported with a failure (tokens were spent all the same). */
  private failureUsage: Final["usage"];
  private storeFailure: DomainError | undefined;
  /** Reports a failure to persist the result (the run still ends, as failed). */
  onStoreError: ((err: unknown) => void) | undefined;

  /** Tokens generated so far (settles a charge when the run ends without final usage). */
  private generatedTokens = 0;
  /** Sees the runner's events as they arrive (the gateway's request observation: timings, usage). */
  observer: { delta(d: TokenDelta): void; choiceEnd(e: ChoiceEnd): void; final(f: Final): void } | undefined;

  constructor(readonly prepared: PreparedResponse, private readonly stream: RunSource, private readonly charge?: TokenCharge) {
    this.response = newResponseObject(prepared.body, { id: prepared.id, createdAt: prepared.createdAt, conversationId: prepared.conversationId }, "in_progress");
    this.builder = new ResponseOutputBuilder((e) => this.sink?.event(e));
    this.response.output = this.builder.output;
  }

  get runnerId(): string {
    return this.stream.admitted?.runnerId ?? "";
  }

  /** What the runner said when it admitted the request (prompt tokens, the rendered prompt when asked for). */
  get admitted() {
    return this.stream.admitted;
  }

  /** Stops generation; `run` resolves with status cancelled. */
  cancel(): void {
    this.stream.cancel();
    this.finish("cancelled");
  }

  async run(options: {
    sink?: ResponseEventSink;
    /** Emit response.created first (a background run's was emitted when it was queued). */
    announce?: boolean;
    beforeEnd?: (response: ResponseObject) => Promise<void>;
  } = {}): Promise<ResponseObject> {
    this.sink = options.sink;
    const emit = (e: ResponseEvent) => this.sink?.event(e);
    if (options.announce !== false) emit({ type: "response.created", response: snapshot(this.response) });
    emit({ type: "response.in_progress", response: snapshot(this.response) });
    const outcome = await new Promise<Final | DomainError | "cancelled">((resolve) => {
      this.settle = resolve;
      if (this.outcome) return resolve(this.outcome);
      // Once the outcome is known (a cancel, say), events still on their way change nothing.
      const listener = {
        delta: (d: TokenDelta) => {
          if (this.outcome) return;
          this.observer?.delta(d);
          this.generatedTokens += d.tokens;
          this.builder.delta(d);
        },
        choiceEnd: (e: ChoiceEnd) => {
          if (this.outcome) return;
          this.observer?.choiceEnd(e);
          this.finishReason = e.finishReason;
          this.builder.end(e.finishReason);
        },
        // A runner that preempts batch-priority work restarts the choice: its output so far goes.
        choiceReset: () => {
          if (this.outcome) return;
          this.finishReason = FinishReason.FINISH_REASON_UNSPECIFIED;
          this.builder.reset();
        },
        final: (f: Final) => {
          this.observer?.final(f);
          if (f.error) this.failureUsage = f.usage;
          this.finish(f.error ? domainErrorFromRunner(f.error, this.stream.model) : f);
        },
        failure: (err: DomainError) => this.finish(err),
      };
      this.stream.listen(listener);
    });
    const response = this.response;
    const usage = isDomainError(outcome) || outcome === "cancelled" ? this.failureUsage : outcome.usage;
    this.charge?.settle(usage ? usage.promptTokens + usage.completionTokens : (this.stream.admitted?.promptTokens ?? 0) + this.generatedTokens);
    if (outcome === "cancelled") {
      this.builder.abort();
      response.status = "cancelled";
    } else if (isDomainError(outcome)) {
      this.builder.abort();
      response.status = "failed";
      response.error = responseErrorOf(outcome);
      if (this.failureUsage) response.usage = responseUsage(this.failureUsage);
    } else {
      response.usage = responseUsage(outcome.usage);
      const incomplete = this.finishReason === FinishReason.FINISH_REASON_LENGTH;
      response.status = incomplete ? "incomplete" : "completed";
      if (incomplete) response.incomplete_details = { reason: "max_output_tokens" };
      else response.completed_at = Math.floor(Date.now() / 1000);
    }
    if (options.beforeEnd) {
      try {
        await options.beforeEnd(response);
      } catch (err) {
        // The result could not be kept (JetStream unavailable): the client must not believe it was.
        this.storeFailure = errors.internal(err);
        response.status = "failed";
        response.error = { code: "server_error", message: "The response could not be stored. Please retry." };
        response.completed_at = null;
        this.onStoreError?.(err);
      }
    }
    if (response.status !== "cancelled") emit({ type: `response.${response.status}`, response: snapshot(response) });
    return response;
  }

  /** True when the final state could not be stored (beforeEnd failed). */
  get storeFailed(): boolean {
    return this.storeFailure !== undefined;
  }

  /** The error of a failed run (a non-streamed request answers with it). */
  failure(): DomainError | undefined {
    return this.storeFailure ?? (isDomainError(this.outcome) ? this.outcome : undefined);
  }

  private finish(outcome: Final | DomainError | "cancelled"): void {
    if (this.outcome) return;
    this.outcome = outcome;
    this.settle?.(outcome);
  }
}

