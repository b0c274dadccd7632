import type { ModelSpec } from "../catalog/mod.js";
import { newId } from "../../lib/ids.js";
import type { GenerateRequest, Priority, Usage } from "../../proto/gen/tributary/v1/inference.js";
import { chatToGenerateRequest, ChatCompletionAccumulator } from "../openai/mod.js";
import { Cancelled } from "../errors/mod.js";
import type { ChatCompletionRequest } from "../openai/mod.js";
import { domainErrorFromRunner } from "./runner-errors.js";

import type { GenerationListener, GenerationSource, GenerationStream } from "./generation-stream.js";

// Running one chat completion, independent of HTTP: the route uses it, and so does anything that
// runs chat completions off the request path (batch lines).

export interface ChatRunContext {
  requestId: string;
  deadlineUnixMs: number;
  priority?: Priority;
  /** Aborting cancels the generation (the client left, the batch was cancelled). */
  signal?: AbortSignal;
}

export type ChatCompletion = ReturnType<ChatCompletionAccumulator["toCompletion"]>;

const cancelled = () => new Cancelled({ reason: "cancelled" });

/** Hands a built request to a runner; resolves once a runner admitted it. */
export async function admitGeneration(client: GenerationSource, request: GenerateRequest, signal?: AbortSignal): Promise<GenerationStream> {
  if (signal?.aborted) throw cancelled();
  const stream = await client.generate(request);
  if (signal?.aborted) {
    stream.cancel();
    throw cancelled();
  }
  return stream;
}

/** Checks the body against the model and hands it to a runner; resolves once a runner admitted it. */
export function startChatCompletion(client: GenerationSource, body: ChatCompletionRequest, spec: ModelSpec, ctx: ChatRunContext): Promise<GenerationStream> {
  const request = chatToGenerateRequest(body, spec, { requestId: ctx.requestId, deadlineUnixMs: ctx.deadlineUnixMs, priority: ctx.priority });
  return admitGeneration(client, request, ctx.signal);
}

/**
 * Collects an admitted generation into the `chat.completion` object. `observe` may wrap the
 * listener (the rate limiter's usage meter does).
 */
export function collectChatCompletion(
  stream: GenerationStream,
  body: ChatCompletionRequest,
  requestId: string,
  signal?: AbortSignal,
  observe: (listener: GenerationListener) => GenerationListener = (l) => l,
): Promise<ChatCompletion> {
  const id = newId("chatcmpl-");
  const created = Math.floor(Date.now() / 1000);
  const acc = new ChatCompletionAccumulator(body.n ?? 1, { logprobs: body.logprobs === true });
  return new Promise<Usage | undefined>((resolve, reject) => {
    const onAbort = () => {
      stream.cancel();
      reject(cancelled());
    };
    signal?.addEventListener("abort", onAbort, { once: true });
    const settle = <T>(f: (v: T) => void) => (v: T) => {
      signal?.removeEventListener("abort", onAbort);
      f(v);
    };
    stream.listen(observe({
      delta: (d) => acc.delta(d),
      choiceEnd: (e) => acc.choiceEnd(e),
      choiceReset: (index) => acc.reset(index),
      final: settle((f) => (f.error ? reject(domainErrorFromRunner(f.error, body.model)) : resolve(f.usage))),
      failure: settle(reject),
    }));
  }).then((usage) => acc.toCompletion(id, created, body.model, usage));
}

/** Runs one chat completion to its final object. Throws the domain error of a refusal or failure. */
export async function runChatCompletion(
  client: GenerationSource,
  body: ChatCompletionRequest,
  spec: ModelSpec,
  ctx: ChatRunContext,
): Promise<{ completion: ChatCompletion; runnerId: string }> {
  const stream = await startChatCompletion(client, body, spec, ctx);
  const completion = await collectChatCompletion(stream, body, ctx.requestId, ctx.signal);
  return { completion, runnerId: stream.admitted!.runnerId };
}
