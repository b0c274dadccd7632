import type { ChoiceEnd, ToolCallDelta, TokenDelta, Usage } from "../../../proto/gen/tributary/v1/inference.js";
import { finishReasonName, type OpenAIFinishReason } from "./finish-reason.js";
import { jsonString } from "../../../lib/json-text.js";
import { openAILogprobs, type OpenAILogprob } from "./logprobs.js";

interface ToolCallState {
  id: string;
  name: string;
  arguments: string;
}

interface ChoiceState {
  text: string;
  toolCalls: ToolCallState[];
  finishReason: OpenAIFinishReason | null;
  /** The answer tokens' logprobs (when asked for). */
  logprobs: OpenAILogprob[];
  reasoning: string;
}

export function usageObject(usage: Usage | undefined) {
  const prompt = usage?.promptTokens ?? 0;
  const completion = usage?.completionTokens ?? 0;
  return {
    prompt_tokens: prompt,
    completion_tokens: completion,
    total_tokens: prompt + completion,
    prompt_tokens_details: { cached_tokens: usage?.cachedPromptTokens ?? 0, audio_tokens: 0 },
    completion_tokens_details: { reasoning_tokens: usage?.reasoningTokens ?? 0, audio_tokens: 0, accepted_prediction_tokens: 0, rejected_prediction_tokens: 0 },
  };
}

/**
 * A reply's reasoning in a chat message or delta: under both names clients read it by,
 * `reasoning_content` (DeepSeek, llama-server, the Vercel AI SDK) and `reasoning` (vLLM,
 * OpenRouter, OpenAI's gpt-oss guidance). Empty: no keys.
 */
export function reasoningFields(text: string): { reasoning_content?: string; reasoning?: string } {
  return text ? { reasoning_content: text, reasoning: text } : {};
}

/** JSON.stringify(reasoningFields(text)) without its braces: "" for none, else `,"reasoning_content":...`. */
export function reasoningFieldsJson(text: string): string {
  if (!text) return "";
  const quoted = jsonString(text);
  return `,"reasoning_content":${quoted},"reasoning":${quoted}`;
}

/** JSON.stringify(usageObject(usage)), written without building the object (a logged stream's trace writes it). */
export function usageJson(usage: Usage | undefined): string {
  const prompt = usage?.promptTokens ?? 0;
  const completion = usage?.completionTokens ?? 0;
  return (
    `{"prompt_tokens":${prompt},"completion_tokens":${completion},"total_tokens":${prompt + completion},` +
    `"prompt_tokens_details":{"cached_tokens":${usage?.cachedPromptTokens ?? 0},"audio_tokens":0},` +
    `"completion_tokens_details":{"reasoning_tokens":${usage?.reasoningTokens ?? 0},"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}`
  );
}

export function applyToolCallDelta(calls: ToolCallState[], d: ToolCallDelta): void {
  const call = (calls[d.index] ??= { id: "", name: "", arguments: "" });
  if (d.id) call.id = d.id;
  if (d.name) call.name = d.name;
  call.arguments += d.arguments;
}

/** Builds a non-streamed `chat.completion` from runner events. */
export class ChatCompletionAccumulator {
  private readonly choices: ChoiceState[];
  /** Whether the request asked for logprobs: each choice then has a `logprobs` object, else null. */
  private readonly withLogprobs: boolean;

  constructor(choices: number, options: { logprobs?: boolean } = {}) {
    this.withLogprobs = options.logprobs === true;
    // A loop, not Array.from({ length }): that took longer than the rest of a small request's bookkeeping.
    this.choices = [];
    for (let i = 0; i < choices; i++) this.choices.push({ text: "", toolCalls: [], finishReason: null, logprobs: [], reasoning: "" });
  }

  delta(d: TokenDelta): void {
    const c = this.choices[d.choiceIndex];
    if (!c) return;
    c.text += d.text;
    if (d.reasoning) c.reasoning += d.reasoning;
    if (d.toolCalls.length > 0) for (const t of d.toolCalls) applyToolCallDelta(c.toolCalls, t);
    if (d.logprobs) for (const l of openAILogprobs(d.logprobs.tokens)) c.logprobs.push(l);
  }

  /** Forgets a choice's output (it was preempted and runs again). */
  reset(choiceIndex: number): void {
    const c = this.choices[choiceIndex];
    if (c) Object.assign(c, { text: "", toolCalls: [], finishReason: null, logprobs: [], reasoning: "" });
  }

  /** A choice's `logprobs`: null unless asked for; `content` null when the message's content is. */
  private logprobsOf(c: ChoiceState) {
    if (!this.withLogprobs) return null;
    return { content: c.toolCalls.length > 0 && c.text === "" ? null : c.logprobs, refusal: null };
  }

  choiceEnd(e: ChoiceEnd): void {
    const c = this.choices[e.choiceIndex];
    if (c) c.finishReason = finishReasonName(e.finishReason);
  }

  /**
   * JSON.stringify(this.toCompletion(...)), written directly: a logged stream's trace holds it,
   * and the generic walk over the object took most of the time a trace cost to build.
   */
  toCompletionJson(id: string, created: number, model: string, usage: Usage | undefined): string {
    let choices = "";
    for (let index = 0; index < this.choices.length; index++) {
      const c = this.choices[index]!;
      const hasCalls = c.toolCalls.length > 0;
      const calls = hasCalls
        ? `,"tool_calls":${JSON.stringify(c.toolCalls.map((t) => ({ id: t.id, type: "function", function: { name: t.name, arguments: t.arguments } })))}`
        : "";
      choices +=
        `${index > 0 ? "," : ""}{"index":${index},"message":{"role":"assistant","content":${hasCalls && c.text === "" ? "null" : jsonString(c.text)},"refusal":null${calls},"annotations":[]${reasoningFieldsJson(c.reasoning)}}` +
        `,"logprobs":${this.withLogprobs ? JSON.stringify(this.logprobsOf(c)) : "null"},"finish_reason":"${c.finishReason ?? "stop"}"}`;
    }
    return `{"id":${jsonString(id)},"object":"chat.completion","created":${created},"model":${jsonString(model)},"choices":[${choices}],"usage":${usageJson(usage)},"service_tier":"default"}`;
  }

  toCompletion(id: string, created: number, model: string, usage: Usage | undefined) {
    return {
      id,
      object: "chat.completion",
      created,
      model,
      choices: this.choices.map((c, index) => {
        const hasCalls = c.toolCalls.length > 0;
        return {
          index,
          message: {
            role: "assistant",
            content: hasCalls && c.text === "" ? null : c.text,
            refusal: null,
            ...(hasCalls
              ? { tool_calls: c.toolCalls.map((t) => ({ id: t.id, type: "function", function: { name: t.name, arguments: t.arguments } })) }
              : {}),
            annotations: [],
            ...reasoningFields(c.reasoning),
          },
          logprobs: this.logprobsOf(c),
          finish_reason: c.finishReason ?? "stop",
        };
      }),
      usage: usageObject(usage),
      service_tier: "default",
    };
  }
}
