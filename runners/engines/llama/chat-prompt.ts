import {
  GeneralChatWrapper,
  isLlamaText,
  LlamaText,
  QwenChatWrapper,
  resolveChatWrapper,
  type ChatHistoryItem,
  type ChatModelFunctionCall,
  type ChatModelFunctions,
  type ChatModelSegment,
  type ChatWrapper,
  type LlamaModel,
  type ResolveChatWrapperWithModelOptions,
} from "node-llama-cpp";
import type { ChatMessage } from "../../../proto/gen/tributary/v1/inference.js";
import type { ThoughtMarkers } from "../../text/thought-splitter.js";

type WrapperSettings = ResolveChatWrapperWithModelOptions["customWrapperSettings"];

/**
 * Picks the chat template of a model:
 *   "auto"      the GGUF's own template (node-llama-cpp recognises the common families and
 *               runs any other Jinja template), or the fallback when the GGUF has none;
 *   "fallback"  node-llama-cpp's General template:
 *                 <system text>\n\n### Human\n<user text>\n\n### Assistant\n<reply>
 *               with tool calls written as `||call: name({json})` and results as `||result: ...`;
 *   any other   a node-llama-cpp wrapper name (chatML, llama3.1, qwen, mistral, gemma, ...).
 */
export function chooseChatWrapper(model: LlamaModel, setting: string, customWrapperSettings?: WrapperSettings): ChatWrapper {
  if (setting === "fallback") return new GeneralChatWrapper();
  if (setting === "auto") {
    const template = (model.fileInfo.metadata as { tokenizer?: { chat_template?: unknown } }).tokenizer?.chat_template;
    if (typeof template !== "string" || template.length === 0) return new GeneralChatWrapper();
    return resolveChatWrapper(model, { customWrapperSettings });
  }
  return resolveChatWrapper(model, { type: setting as never, customWrapperSettings });
}

/**
 * What OpenAI's reasoning_effort asks of a template family that has a switch for it, as
 * node-llama-cpp's settings of that family's wrapper; undefined: the template's own default
 * (effort "" or one the family has no switch for). Qwen3: thinking off for `none` and `minimal`
 * (its template's enable_thinking=false: an empty thought in the prompt).
 */
export function effortSettings(wrapper: ChatWrapper, effort: string): { key: string; settings: WrapperSettings } | undefined {
  if (wrapper instanceof QwenChatWrapper && (effort === "none" || effort === "minimal")) return { key: "qwen-thinking-off", settings: { qwen: { thoughts: "discourage" } } };
  return undefined;
}

/**
 * A model's chat wrappers: the template's own, and the variants reasoning efforts ask for
 * (effortSettings), resolved once each on first use.
 */
export class ChatWrappers {
  readonly base: ChatWrapper;
  private readonly variants = new Map<string, ChatWrapper>();

  constructor(private readonly model: LlamaModel, private readonly setting: string) {
    this.base = chooseChatWrapper(model, setting);
  }

  /** The wrapper for a request's reasoning effort ("": the template's default). */
  forEffort(effort: string): ChatWrapper {
    const variant = effortSettings(this.base, effort);
    if (!variant) return this.base;
    let wrapper = this.variants.get(variant.key);
    if (!wrapper) this.variants.set(variant.key, (wrapper = chooseChatWrapper(this.model, this.setting, variant.settings)));
    return wrapper;
  }
}

/**
 * The thought segment of a wrapper's template (its segment definitions), as the text markers a
 * reply is split on; undefined when it has none, or when its markers do not show in the text the
 * engine decodes (control tokens, which the detokenizer leaves out: then nothing can be split).
 */
export function thoughtMarkers(wrapper: ChatWrapper, model: LlamaModel): ThoughtMarkers | undefined {
  const thought = wrapper.settings.segments?.thought;
  if (!thought?.suffix) return undefined;
  const visible = (marker: string | LlamaText) => {
    const text = LlamaText(marker);
    const shown = model.detokenize(text.tokenize(model.tokenizer), false).trim();
    return shown === text.toString().trim() ? shown : undefined;
  };
  const openedOnStart = !isLlamaText(thought.prefix) && typeof thought.prefix === "object";
  const open = openedOnStart ? "" : visible(thought.prefix as string | LlamaText);
  const close = visible(thought.suffix);
  if (open === undefined || !close) return undefined;
  return { open, close, openAtStart: openedOnStart || thought.openOnResponseStart === true };
}

/**
 * Whether the reply to a rendered prompt is free to open the thought itself: the template neither
 * opened it (openAtStart) nor closed an empty one to turn thinking off (Qwen3's
 * enable_thinking=false ends the prompt with `<think>\n\n</think>\n\n`).
 */
export function replyMayOpenThought(prompt: LlamaText, thought: ThoughtMarkers): boolean {
  return !thought.openAtStart && !prompt.toString().trimEnd().endsWith(thought.close);
}

function parseArguments(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

function parseResult(text: string): unknown {
  const trimmed = text.trim();
  if (trimmed.startsWith("{") || trimmed.startsWith("[")) return parseArguments(trimmed);
  return text;
}

/**
 * OpenAI chat messages to node-llama-cpp's history. Assistant tool calls are joined with the
 * tool messages that answer them (by tool_call_id), which is how the templates render them.
 * Ends with an empty model turn: the reply the engine generates.
 */
export function toChatHistory(messages: readonly ChatMessage[]): ChatHistoryItem[] {
  const results = new Map<string, string>();
  for (const m of messages) if (m.role === "tool") results.set(m.toolCallId, m.content);

  const history: ChatHistoryItem[] = [];
  for (const m of messages) {
    switch (m.role) {
      case "system":
      case "developer":
        history.push({ type: "system", text: m.content });
        break;
      case "user":
        history.push({ type: "user", text: m.content });
        break;
      case "assistant": {
        const response: Array<string | ChatModelFunctionCall | ChatModelSegment> = [];
        // Given back reasoning: a thought segment, which the template renders or leaves out.
        if (m.reasoning) response.push({ type: "segment", segmentType: "thought", text: m.reasoning, ended: true });
        if (m.content) response.push(m.content);
        for (const call of m.toolCalls)
          response.push({ type: "functionCall", name: call.name, params: parseArguments(call.arguments), result: parseResult(results.get(call.id) ?? "") });
        history.push({ type: "model", response });
        break;
      }
      case "tool":
        break; // rendered with the call it answers
      default:
        history.push({ type: "user", text: m.content });
    }
  }
  history.push({ type: "model", response: [] });
  return history;
}

export interface RenderedPrompt {
  text: LlamaText;
  /** Strings and special tokens after which the template says the reply is over. */
  stopTriggers: readonly LlamaText[];
}

export function renderPrompt(wrapper: ChatWrapper, messages: readonly ChatMessage[], functions: ChatModelFunctions | undefined): RenderedPrompt {
  const state = wrapper.generateContextState({
    chatHistory: toChatHistory(messages),
    availableFunctions: functions,
    documentFunctionParams: functions ? true : undefined,
  });
  return { text: state.contextText, stopTriggers: state.stopGenerationTriggers };
}

/** The model's syntax for calling a function, as the template teaches it. */
export interface CallSyntax {
  prefixes: string[];
  /** The canonical prefix, written into the context to force a call. */
  prefix: LlamaText;
  paramsPrefix: LlamaText;
  suffix: LlamaText;
  /** Text that starts a function result: after a call the model would wait for it. */
  resultPrefix: string;
}

export function callSyntaxOf(wrapper: ChatWrapper): CallSyntax {
  const call = wrapper.settings.functions.call;
  const prefix = LlamaText(call.prefix);
  const prefixes = [prefix.toString(), ...(call.prefixAlternateMatches ?? []).map((p) => LlamaText(p).toString())]
    .filter((p, i, all) => p.trim().length > 0 && all.indexOf(p) === i);
  return {
    prefixes,
    prefix,
    paramsPrefix: LlamaText(call.paramsPrefix),
    suffix: LlamaText(call.suffix),
    resultPrefix: LlamaText(wrapper.settings.functions.result.prefix).toString().trim(),
  };
}
