import {
  GeneralChatWrapper,
  HarmonyChatWrapper,
  isLlamaText,
  LlamaText,
  QwenChatWrapper,
  resolveChatWrapper,
  SpecialTokensText,
  type ChatHistoryItem,
  type ChatModelFunctionCall,
  type ChatModelFunctions,
  type ChatModelSegment,
  type ChatWrapper,
  type LlamaModel,
  type ResolveChatWrapperWithModelOptions,
  type Token,
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
 * (its template's enable_thinking=false: an empty thought in the prompt). gpt-oss (harmony): the
 * system message's `Reasoning: low|medium|high`; it cannot turn reasoning off, so `none` and
 * `minimal` ask for `low`, `xhigh` and `max` for `high`.
 */
export function effortSettings(wrapper: ChatWrapper, effort: string): { key: string; settings: WrapperSettings } | undefined {
  if (wrapper instanceof QwenChatWrapper && (effort === "none" || effort === "minimal")) return { key: "qwen-thinking-off", settings: { qwen: { thoughts: "discourage" } } };
  if (wrapper instanceof HarmonyChatWrapper) {
    const level = HARMONY_REASONING_LEVELS[effort];
    if (!level || level === wrapper.reasoningEffort) return undefined;
    return { key: `harmony-reasoning-${level}`, settings: { harmony: { reasoningEffort: level } } };
  }
  return undefined;
}

const HARMONY_REASONING_LEVELS: Readonly<Record<string, "low" | "medium" | "high">> = {
  none: "low",
  minimal: "low",
  low: "low",
  medium: "medium",
  high: "high",
  xhigh: "high",
  max: "high",
};

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

/** A wrapper's thought segment, as the engine splits replies on it. */
export interface ThoughtSegment {
  /** Its markers as text. */
  markers: ThoughtMarkers;
  /** Control tokens of the markers, which the decoder detokenizes with their text (see thoughtSegment). */
  shownTokens: ReadonlySet<Token>;
  /** Every token of the markers: none of them ends a reply (see LlamaEngine's isEogToken). */
  markerTokens: ReadonlySet<Token>;
}

/** gpt-oss's answer: the final channel's message (the reply's first, or one after the analysis). */
const HARMONY_FINAL = "<|channel|>final<|message|>";
const HARMONY_NEXT_MESSAGE = "<|start|>assistant";

/**
 * The thought segment of a wrapper's template (its segment definitions), as the text markers a
 * reply is split on; undefined when it has none, or when its markers cannot show in the text.
 *
 * Markers made of control tokens (gpt-oss's `<|channel|>`, `<|message|>`, `<|end|>`) are left out
 * of the text by the detokenizer (llama.cpp renders some of gpt-oss's, by name, in some builds
 * only). Rather than split on token ids, with a second splitter beside the text one, the decoder
 * detokenizes exactly the markers' control tokens with their text (`shownTokens`): the markers
 * then show where the model wrote them, whatever the build, and other control tokens stay hidden.
 */
export function thoughtSegment(wrapper: ChatWrapper, model: LlamaModel): ThoughtSegment | undefined {
  const thought = wrapper.settings.segments?.thought;
  if (!thought?.suffix) return undefined;
  const shownTokens = new Set<Token>();
  const markerTokens = new Set<Token>();
  const shown = (marker: string | LlamaText) => {
    const text = LlamaText(marker);
    const tokens = text.tokenize(model.tokenizer);
    for (const t of tokens) markerTokens.add(t);
    const hidden = tokens.filter((t) => model.detokenize([t], false) === "" && model.detokenize([t], true) !== "");
    for (const t of hidden) shownTokens.add(t);
    const rendered = (hidden.length === 0 ? model.detokenize(tokens, false) : tokens.map((t) => model.detokenize([t], hidden.includes(t))).join("")).trim();
    return rendered === text.toString().trim() ? rendered : undefined;
  };
  const openedOnStart = !isLlamaText(thought.prefix) && typeof thought.prefix === "object";
  const open = openedOnStart ? "" : shown(thought.prefix as string | LlamaText);
  const close = shown(thought.suffix);
  if (open === undefined || !close) return undefined;
  const markers: ThoughtMarkers = { open, close, openAtStart: openedOnStart || thought.openOnResponseStart === true };
  if (wrapper instanceof HarmonyChatWrapper) {
    // A harmony reply is a sequence of messages (the prompt ends with the first one's
    // `<|start|>assistant`): the analysis channel's is the thought, the final channel's the answer.
    const headers = [HARMONY_FINAL, HARMONY_NEXT_MESSAGE + HARMONY_FINAL].map((h) => shown(LlamaText(new SpecialTokensText(h))));
    if (headers.some((h) => h === undefined)) return undefined;
    markers.answerOpen = headers as string[];
    markers.answerAfterThought = headers[1];
  }
  return { markers, shownTokens, markerTokens };
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
  /** Texts that start a call in a reply. */
  prefixes: string[];
  /** The canonical prefix, written into the context to force a call (at the reply's start). */
  prefix: LlamaText;
  /** What is written into the context for a prefix found in the reply, when not `prefix`. */
  writtenFor: ReadonlyMap<string, LlamaText>;
  paramsPrefix: LlamaText;
  suffix: LlamaText;
  /** Text that starts a function result: after a call the model would wait for it. */
  resultPrefix: string;
}

export function callSyntaxOf(wrapper: ChatWrapper): CallSyntax {
  const call = wrapper.settings.functions.call;
  let prefix = LlamaText(call.prefix);
  const writtenFor = new Map<string, LlamaText>();
  if (wrapper instanceof HarmonyChatWrapper) {
    // gpt-oss calls in a message of its own, in the commentary channel: the wrapper's prefix
    // (" to=functions.") follows that message's header, which is matched with it (none of it is
    // answer text) and written with it. The recipient may come before the channel too (OpenAI's
    // own template writes `<|start|>assistant to=functions.NAME<|channel|>commentary json`).
    const atStart = LlamaText(new SpecialTokensText("<|channel|>commentary"), prefix);
    const afterMessage = LlamaText(new SpecialTokensText(HARMONY_NEXT_MESSAGE), atStart);
    writtenFor.set(afterMessage.toString(), afterMessage);
    writtenFor.set(LlamaText(new SpecialTokensText(HARMONY_NEXT_MESSAGE), prefix).toString(), afterMessage);
    writtenFor.set(atStart.toString(), atStart);
    writtenFor.set(prefix.toString(), atStart);
    prefix = atStart;
  }
  const prefixes = [...writtenFor.keys(), prefix.toString(), ...(call.prefixAlternateMatches ?? []).map((p) => LlamaText(p).toString())]
    .filter((p, i, all) => p.trim().length > 0 && all.indexOf(p) === i);
  return {
    prefixes,
    prefix,
    writtenFor,
    paramsPrefix: LlamaText(call.paramsPrefix),
    suffix: LlamaText(call.suffix),
    resultPrefix: LlamaText(wrapper.settings.functions.result.prefix).toString().trim(),
  };
}
