import type { ModelSpec } from "../../lib/catalog/model-spec.js";
import { newId } from "../../lib/ids.js";
import { ApiError, errors } from "../http/api-error.js";
import type { HttpExchange } from "../http/exchange.js";
import type { Router } from "../http/router.js";
import { apiErrorFromRunner } from "../inference/error-mapping.js";
import type { GenerationClient } from "../inference/generation-client.js";
import type { GenerationStream } from "../inference/generation-stream.js";
import { parseChatCompletionRequest, type ChatCompletionRequest } from "../schemas/chat-completions.js";
import { SseWriter } from "../sse/sse-writer.js";
import { runChatCompletion, startChatCompletion } from "../inference/chat-completion.js";
import { ChatChunkStream } from "../translate/chat-stream.js";

export interface ChatRouteDeps {
  catalog: ReadonlyMap<string, ModelSpec>;
  client: GenerationClient;
  maxBodyBytes: number;
  requestTimeoutMs: number;
  maxPendingStreamBytes: number;
}

/** POST /v1/chat/completions: streamed (SSE) or not, n choices, tool calls. */
export function registerChatRoutes(router: Router, deps: ChatRouteDeps): void {
  router.post("/v1/chat/completions", async (ex) => {
    const body = parseChatCompletionRequest(await ex.readJson(deps.maxBodyBytes));
    const spec = deps.catalog.get(body.model);
    if (!spec) throw errors.modelNotFound(body.model);
    const left = new AbortController();
    ex.onAbort(() => left.abort());
    const ctx = { requestId: ex.requestId, deadlineUnixMs: Date.now() + deps.requestTimeoutMs, signal: left.signal };
    if (!body.stream) {
      const { completion, runnerId } = await runChatCompletion(deps.client, body, spec, ctx);
      ex.responseHeaders["x-tributary-runner"] = runnerId;
      ex.json(200, completion);
      return;
    }
    const stream = await startChatCompletion(deps.client, body, spec, ctx);
    ex.onAbort(() => stream.cancel());
    ex.responseHeaders["x-tributary-runner"] = stream.admitted!.runnerId;
    streamCompletion(ex, stream, body, { id: newId("chatcmpl-"), created: Math.floor(Date.now() / 1000), maxPendingBytes: deps.maxPendingStreamBytes });
  });
}

function streamCompletion(
  ex: HttpExchange,
  stream: GenerationStream,
  body: ChatCompletionRequest,
  opts: { id: string; created: number; maxPendingBytes: number },
): void {
  const writer = new SseWriter(ex);
  writer.open();
  const chunks = new ChatChunkStream(writer, {
    id: opts.id,
    created: opts.created,
    model: body.model,
    choices: body.n ?? 1,
    includeUsage: body.stream_options?.include_usage === true,
    maxPendingBytes: opts.maxPendingBytes,
    onOverflow: () => stream.cancel(),
  });
  stream.listen({
    delta: (d) => chunks.delta(d),
    choiceEnd: (e) => chunks.choiceEnd(e),
    final: (f) => (f.error ? chunks.fail(apiErrorFromRunner(f.error, ex.requestId)) : chunks.complete(f.usage)),
    failure: (err: ApiError) => chunks.fail(err),
  });
}
