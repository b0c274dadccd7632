import type { ModelSpec } from "../../modules/catalog/mod.js";
import { newId } from "../../lib/ids.js";
import { parseChatCompletionRequest, type ChatCompletionRequest, chatToGenerateRequest } from "../../modules/openai/mod.js";
import { errors, type DomainError } from "../../modules/errors/mod.js";
import type { HttpExchange } from "../http/exchange.js";
import type { Router } from "../http/router.js";
import { admitGeneration, collectChatCompletion, domainErrorFromRunner } from "../../modules/inference/mod.js";
import type { GenerationClient, GenerationStream } from "../../modules/inference/mod.js";
import { estimateRequestTokens, UsageMeter } from "../../modules/ratelimit/mod.js";
import type { RateLimiter } from "../../modules/ratelimit/mod.js";
import { SseWriter } from "../sse/sse-writer.js";
import { ChatChunkStream } from "../sse/chat-stream.js";
import type { PendingBudget } from "../sse/pending-budget.js";

export interface ChatRouteDeps {
  catalog: ReadonlyMap<string, ModelSpec>;
  client: GenerationClient;
  rateLimiter: RateLimiter;
  maxBodyBytes: number;
  requestTimeoutMs: number;
  /** What slow SSE clients may hold, per stream and in total. */
  streamBudget: PendingBudget;
}

/** POST /v1/chat/completions: streamed (SSE) or not, n choices, tool calls, rate limited. */
export function registerChatRoutes(router: Router, deps: ChatRouteDeps): void {
  router.post("/v1/chat/completions", async (ex) => {
    const body = parseChatCompletionRequest(await ex.readJson(deps.maxBodyBytes));
    const spec = deps.catalog.get(body.model);
    if (!spec) throw errors.modelNotFound(body.model);
    const request = chatToGenerateRequest(body, spec, { requestId: ex.requestId, deadlineUnixMs: Date.now() + deps.requestTimeoutMs });
    const admission = await deps.rateLimiter.admit(ex.principal!, spec, estimateRequestTokens(request, spec));
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
    const meter = new UsageMeter(admission, stream.admitted!.promptTokens);
    // Settlement happens once: from the final usage, else from what was produced when the client left.
    left.signal.addEventListener("abort", () => meter.abandon(), { once: true });
    ex.responseHeaders["x-tributary-runner"] = stream.admitted!.runnerId;
    if (!body.stream) {
      ex.json(200, await collectChatCompletion(stream, body, ex.requestId, left.signal, (l) => meter.wrap(l)));
      return;
    }
    const stop = () => {
      stream.cancel();
      meter.abandon();
    };
    if (ex.aborted) return stop();
    ex.onAbort(stop);
    streamCompletion(ex, stream, meter, body, { id: newId("chatcmpl-"), created: Math.floor(Date.now() / 1000), budget: deps.streamBudget, onOverflow: stop });
  });
}

function streamCompletion(
  ex: HttpExchange,
  stream: GenerationStream,
  meter: UsageMeter,
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
  stream.listen(meter.wrap({
    delta: (d) => chunks.delta(d),
    choiceEnd: (e) => chunks.choiceEnd(e),
    final: (f) => (f.error ? chunks.fail(domainErrorFromRunner(f.error, body.model)) : chunks.complete(f.usage)),
    failure: (err: DomainError) => chunks.fail(err),
  }));
}
