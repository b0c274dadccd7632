import {
  GeneralChatWrapper,
  LlamaText,
  resolveChatWrapper,
  type ChatHistoryItem,
  type ChatModelFunctionCall,
  type ChatModelFunctions,
  type ChatWrapper,
  type LlamaModel,
} from "node-llama-cpp";
import type { ChatMessage } from "../../../proto/gen/tributary/v1/inference.js";

/**
 * Picks the chat template of a model:
 *   "auto"      the GGUF's own template (node-llama-cpp recognises the common families and
 *               runs any other Jinja template), or the fallback when the GGUF has none;
 *   "fallback"  node-llama-cpp's General template:
 *                 <system text>\n\n### Human\n<user text>\n\n### Assistant\n<reply>
 *               with tool calls written as `||call: name({json})` and results as `||result: ...`;
 *   any other   a node-llama-cpp wrapper name (chatML, llama3.1, qwen, mistral, gemma, ...).
 */
export function chooseChatWrapper(model: LlamaModel, setting: string): ChatWrapper {
  if (setting === "fallback") return new GeneralChatWrapper();
  if (setting === "auto") {
    const template = (model.fileInfo.metadata as { tokenizer?: { chat_template?: unknown } }).tokenizer?.chat_template;
    if (typeof template !== "string" || template.length === 0) return new GeneralChatWrapper();
    return resolveChatWrapper(model);
  }
  return resolveChatWrapper(model, { type: setting as never });
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
        const response: Array<string | ChatModelFunctionCall> = [];
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
