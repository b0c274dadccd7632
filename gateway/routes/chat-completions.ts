import type { ModelSpec } from "../../modules/catalog/mod.js";
import { newId } from "../../lib/ids.js";
import { parseChatCompletionRequest, type ChatCompletionRequest, chatToGenerateRequest } from "../../modules/openai/mod.js";
import { errors, type DomainError } from "../../modules/errors/mod.js";
import type { HttpExchange } from "../http/exchange.js";
import type { Router } from "../http/router.js";
import { admitGeneration, collectChatCompletion, domainErrorFromRunner } from "../../modules/inference/mod.js";
import type { GenerationStream, GenerationSource } from "../../modules/inference/mod.js";
import { estimateRequestTokens, UsageMeter } from "../../modules/ratelimit/mod.js";
import type { RateLimiter } from "../../modules/ratelimit/mod.js";
import { SseWriter } from "../sse/sse-writer.js";
import { RequestObservation, type TraceEndpoint } from "../../modules/traces/mod.js";
import { ChatCompletionAccumulator } from "../../modules/openai/mod.js";
import { ChatChunkStream } from "../sse/chat-stream.js";
import type { PendingBudget } from "../sse/pending-budget.js";

export interface ChatRouteDeps {
  catalog: ReadonlyMap<string, ModelSpec>;
  client: GenerationSource;
  rateLimiter: RateLimiter;
  maxBodyBytes: number;
  requestTimeoutMs: number;
  /** What slow SSE clients may hold, per stream and in total. */
  streamBudget: PendingBudget;
}

/** POST /v1/chat/completions: streamed (SSE) or not, n choices, tool calls, rate limited. */
export function registerChatRoutes(router: Router, deps: ChatRouteDeps): void {
  router.post("/v1/chat/completions", async (ex) => {
    const obs = observe(ex, "/v1/chat/completions");
    const body = parseChatCompletionRequest(await ex.readJson(deps.maxBodyBytes));
    describe(obs, ex, body, body.max_completion_tokens ?? body.max_tokens);
    const spec = deps.catalog.get(body.model);
    if (!spec) throw errors.modelNotFound(body.model);
    const request = chatToGenerateRequest(body, spec, { requestId: ex.requestId, deadlineUnixMs: Date.now() + deps.requestTimeoutMs });
    request.wantRenderedPrompt = obs.log;
    const admission = await deps.rateLimiter.admit(ex.principal!, spec, estimateRequestTokens(request, spec));
    obs.rateLimitAdmitted();
    Object.assign(ex.responseHeaders, admission.headers);
    const left = new AbortController();
    ex.onAbort(() => left.abort());
    let stream: GenerationStream;
    try {
      stream = await admitGeneration(deps.client, request, left.signal);
    } catch (err) {
      admission.settle(0); // nothing was generated: the estimate goes back
      throw err;
    }
    obs.runnerAdmitted(stream.admitted!.runnerId, stream.admitted!.promptTokens, stream.admitted!.renderedPrompt);
    const meter = new UsageMeter(admission, stream.admitted!.promptTokens);
    // Settlement happens once: from the final usage, else from what was produced when the client left.
    left.signal.addEventListener("abort", () => meter.abandon(), { once: true });
    ex.responseHeaders["x-tributary-runner"] = stream.admitted!.runnerId;
    if (!body.stream) {
      const completion = await collectChatCompletion(stream, body, ex.requestId, left.signal, (l) => obs.wrap(meter.wrap(l)));
      obs.responseId = completion.id;
      const text = JSON.stringify(completion);
      // The trace holds the response as it was sent: serialized once for both.
      if (obs.log) obs.responseBody = text;
      ex.send(200, text, "application/json");
      return;
    }
    const stop = () => {
      stream.cancel();
      meter.abandon();
    };
    if (ex.aborted) return stop();
    ex.onAbort(stop);
    streamCompletion(ex, stream, meter, obs, body, { id: newId("chatcmpl-"), created: Math.floor(Date.now() / 1000), budget: deps.streamBudget, onOverflow: stop });
  });
}

function streamCompletion(
  ex: HttpExchange,
  stream: GenerationStream,
  meter: UsageMeter,
  obs: RequestObservation,
  body: ChatCompletionRequest,
  opts: { id: string; created: number; budget: PendingBudget; onOverflow: () => void },
): void {
  const writer = new SseWriter(ex, opts.budget);
  writer.open();
  const chunks = new ChatChunkStream(writer, {
    id: opts.id,
    requestId: ex.requestId,
    created: opts.created,
    model: body.model,
    choices: body.n ?? 1,
    includeUsage: body.stream_options?.include_usage === true,
    onOverflow: opts.onOverflow,
  });
  obs.responseId = opts.id;
  // A logged stream is reassembled (by the observation, from the events it sees) into the
  // completion its chunks add up to.
  if (obs.log) {
    const whole = new ChatCompletionAccumulator(body.n ?? 1, { logprobs: body.logprobs === true });
    obs.reassembly = whole;
    obs.responseOf = () => whole.toCompletionJson(opts.id, opts.created, body.model, obs.usage && { promptTokens: obs.usage.inputTokens, completionTokens: obs.usage.outputTokens, cachedPromptTokens: obs.usage.cachedInputTokens });
  }
  stream.listen(obs.wrap(meter.wrap({
    delta: (d) => {
      obs.chunks++;
      chunks.delta(d);
    },
    choiceEnd: (e) => {
      obs.chunks++;
      chunks.choiceEnd(e);
    },
    final: (f) => {
      if (f.error) return chunks.fail(domainErrorFromRunner(f.error, body.model));
      if (body.stream_options?.include_usage === true) obs.chunks++;
      chunks.complete(f.usage);
    },
    failure: (err: DomainError) => chunks.fail(err),
  })));
}

/** The request's observation (usage, metrics, and its trace when the body says log: true). */
export function observe(ex: HttpExchange, endpoint: TraceEndpoint): RequestObservation {
  const obs = new RequestObservation(endpoint, ex.requestId, Date.now() - (performance.now() - ex.startedAt), ex.startedAt);
  ex.observation = obs;
  return obs;
}

/** What a parsed body says about the request: model, stream, log, sampling; the raw body when logged. */
export function describe(
  obs: RequestObservation,
  ex: HttpExchange,
  body: { model: string; stream?: boolean | null; log?: boolean | null; temperature?: number | null; top_p?: number | null },
  maxTokens?: number | null,
): void {
  // Bounded: the model names a trace's subject and a metrics label (an unknown one is refused anyway).
  obs.model = body.model.slice(0, 256);
  obs.stream = body.stream === true;
  obs.log = body.log === true;
  obs.request = { maxTokens, temperature: body.temperature, topP: body.top_p };
  const raw = ex.takeRawBody();
  if (!obs.log) obs.requestBody = undefined;
  else if (raw) obs.requestBody = raw;
}
