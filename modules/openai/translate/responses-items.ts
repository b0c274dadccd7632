import { newId } from "../../../lib/ids.js";
import type { ChatMessage } from "../../../proto/gen/tributary/v1/inference.js";
import { errors } from "../../errors/mod.js";
import type { ContentPart, InputItem } from "../schemas/responses.js";
import type { Item, MessageItem } from "./responses-object.js";

// Responses items <-> the contract's chat messages. Input items get ids when they are stored (so
// input_items and conversations can list them); a turn's history is items, the runner's input is
// messages with tool calls joined to the assistant turn that made them.

/**
 * Gives every input item its stored form: an id, a status, message content as parts. An
 * item_reference is replaced by the item it names, looked up with `lookup` (items of the
 * previous response's chain or of the conversation).
 */
export function normalizeInputItems(items: readonly InputItem[], lookup: (id: string) => Item | undefined, param = "input"): Item[] {
  return items.map((item, i): Item => {
    switch (item.type) {
      case "message": {
        const content: MessageItem["content"] =
          typeof item.content === "string"
            ? [item.role === "assistant" ? { type: "output_text", text: item.content, annotations: [], logprobs: [] } : { type: "input_text", text: item.content }]
            : item.content.map((p) => (p.type === "output_text" ? { type: "output_text", text: p.text, annotations: [], logprobs: [] } : p));
        return { type: "message", id: item.id ?? newId("msg_"), role: item.role, status: "completed", content };
      }
      case "function_call":
        return { type: "function_call", id: item.id ?? newId("fc_"), call_id: item.call_id, name: item.name, arguments: item.arguments, status: "completed" };
      case "function_call_output":
        return { type: "function_call_output", id: item.id ?? newId("fco_"), call_id: item.call_id, output: item.output, status: "completed" };
      case "reasoning":
        return { type: "reasoning", id: item.id ?? newId("rs_"), summary: [...item.summary], content: item.content, encrypted_content: item.encrypted_content ?? null };
      case "item_reference": {
        const found = lookup(item.id);
        if (!found) throw errors.invalidParam(`${param}[${i}].id`, `Item with id '${item.id}' not found in the previous response or the conversation.`);
        return found;
      }
    }
  });
}

function partsText(parts: readonly ContentPart[], param: string): string {
  return parts
    .map((p, i) => {
      switch (p.type) {
        case "input_text":
        case "output_text":
          return p.text;
        case "refusal":
          return p.refusal;
        default:
          throw errors.invalidParam(`${param}[${i}].type`, `Invalid content part type '${p.type}': this model accepts text only.`, "unsupported_value");
      }
    })
    .join("\n");
}

/**
 * The runner's messages for `instructions` + `history` + `input`. Function calls join the
 * assistant message before them; a function_call_output must answer a call made earlier, in the
 * history or in this input (InvalidParam naming the input item otherwise). Outputs in the history whose
 * call is gone (a deleted response of the chain) are left out. A reasoning item's text goes with the
 * assistant turn after it (the template renders it or leaves it out, as for chat's reasoning_content).
 */
export function toChatMessages(instructions: string | null | undefined, history: readonly Item[], input: readonly Item[]): ChatMessage[] {
  const messages: ChatMessage[] = [];
  if (instructions) messages.push({ role: "system", content: instructions, name: "", toolCalls: [], toolCallId: "" });
  const calls = new Set<string>();
  /** Reasoning waiting for the assistant turn it belongs to. */
  let reasoning: string | undefined;
  const assistant = (content: string, toolCalls: ChatMessage["toolCalls"]): ChatMessage => {
    const m: ChatMessage = { role: "assistant", content, name: "", toolCalls, toolCallId: "", reasoning };
    reasoning = undefined;
    return m;
  };
  const all = [...history, ...input];
  all.forEach((item, index) => {
    const fromInput = index >= history.length;
    const param = fromInput ? `input[${index - history.length}]` : `history item ${item.id}`;
    switch (item.type) {
      case "message": {
        const content = partsText(item.content, `${param}.content`);
        if (item.role === "assistant") messages.push(assistant(content, []));
        else {
          messages.push({ role: item.role, content, name: "", toolCalls: [], toolCallId: "" });
          reasoning = undefined; // it belonged to no reply
        }
        break;
      }
      case "function_call": {
        calls.add(item.call_id);
        const last = messages.at(-1);
        const call = { id: item.call_id, name: item.name, arguments: item.arguments };
        if (last?.role === "assistant" && reasoning === undefined) last.toolCalls.push(call);
        else messages.push(assistant("", [call]));
        break;
      }
      case "function_call_output": {
        if (!calls.has(item.call_id)) {
          if (!fromInput) break;
          throw errors.invalidParam(`${param}.call_id`, `No tool call found for function call output with call_id ${item.call_id}.`);
        }
        const content = typeof item.output === "string" ? item.output : partsText(item.output, `${param}.output`);
        messages.push({ role: "tool", content, name: "", toolCalls: [], toolCallId: item.call_id });
        break;
      }
      case "reasoning": {
        const parts = Array.isArray(item.content) && item.content.length > 0 ? item.content : item.summary;
        const text = (parts as Array<{ text?: unknown }>).map((p) => (typeof p?.text === "string" ? p.text : "")).filter(Boolean).join("\n");
        if (text) reasoning = reasoning ? `${reasoning}\n${text}` : text;
        break;
      }
    }
  });
  return messages;
}
