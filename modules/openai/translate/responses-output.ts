import { newId } from "../../../lib/ids.js";
import { FinishReason, type ToolCallDelta, type TokenDelta } from "../../../proto/gen/tributary/v1/inference.js";
import type { FunctionCallItem, ItemStatus, MessageItem, OutputItem, OutputTextPart, ReasoningItem, ReasoningTextPart, ResponseObject } from "./responses-object.js";
import { openAILogprobs, type OpenAILogprob } from "./logprobs.js";

/** A Responses stream event before a sink numbers it (`sequence_number` is the sink's). */
export interface ResponseEvent {
  type: string;
  [field: string]: unknown;
}

/** Events after which a Responses stream is over. */
export const RESPONSE_TERMINAL_EVENTS: ReadonlySet<string> = new Set(["response.completed", "response.incomplete", "response.failed", "error"]);

/** Events carrying a piece of text (`delta`) that the next piece of the same part continues. */
export const RESPONSE_DELTA_EVENTS: ReadonlySet<string> = new Set(["response.output_text.delta", "response.function_call_arguments.delta", "response.reasoning_text.delta"]);

/** True when `next` continues `previous` (deltas of one part): the two may travel as one event. */
export function continuesDelta(previous: ResponseEvent, next: ResponseEvent): boolean {
  return (
    RESPONSE_DELTA_EVENTS.has(next.type) &&
    previous.type === next.type &&
    previous.item_id === next.item_id &&
    previous.content_index === next.content_index
  );
}

/** Shared by every delta without logprobs (frozen). */
const NO_LOGPROBS: readonly OpenAILogprob[] = Object.freeze([]);

/**
 * A `response.output_text.delta` event: the one event of nearly every token. A class, so that an
 * SSE stream can tell it apart and frame it around its JSON-escaped delta instead of stringifying
 * the whole object (gateway/sse/response-event-stream.ts). Its own properties are assigned in
 * OpenAI's order, so JSON.stringify (and a spread) of it give what the object literal gave.
 */
export class OutputTextDelta implements ResponseEvent {
  [field: string]: unknown;
  readonly type: string;
  readonly item_id: string;
  readonly output_index: number;
  readonly content_index: number;
  readonly delta: string;
  /** The logprobs of the delta's tokens, when the request asked for them. */
  readonly logprobs: readonly OpenAILogprob[];

  constructor(itemId: string, outputIndex: number, contentIndex: number, delta: string, logprobs: readonly OpenAILogprob[] = NO_LOGPROBS) {
    this.type = "response.output_text.delta";
    this.item_id = itemId;
    this.output_index = outputIndex;
    this.content_index = contentIndex;
    this.delta = delta;
    this.logprobs = logprobs;
  }
}

/**
 * A `response.function_call_arguments.delta` event (a piece of a tool call's arguments per
 * token): a class for the same reason as OutputTextDelta, fields in OpenAI's order.
 */
export class FunctionCallArgumentsDelta implements ResponseEvent {
  [field: string]: unknown;
  readonly type: string;
  readonly item_id: string;
  readonly output_index: number;
  readonly delta: string;

  constructor(itemId: string, outputIndex: number, delta: string) {
    this.type = "response.function_call_arguments.delta";
    this.item_id = itemId;
    this.output_index = outputIndex;
    this.delta = delta;
  }
}

/** Where a response's events go: an SSE stream, a stored event log, or nowhere. */
export interface ResponseEventSink {
  event(event: ResponseEvent): void;
}

type Open =
  | { kind: "message"; item: MessageItem; index: number; part: OutputTextPart }
  | { kind: "reasoning"; item: ReasoningItem; index: number; part: ReasoningTextPart }
  | { kind: "call"; item: FunctionCallItem; index: number; callIndex: number };

/** A part's copy; an output_text part's logprobs keep growing in the live part, so they are copied too. */
const copyPart = <P extends MessageItem["content"][number]>(p: P): P => (p.type === "output_text" && Array.isArray(p.logprobs) ? { ...p, logprobs: [...p.logprobs] } : { ...p });
const copyMessage = (m: MessageItem): MessageItem => ({ ...m, content: m.content.map(copyPart) });
const copyReasoning = (r: ReasoningItem): ReasoningItem => ({ ...r, summary: [...r.summary], content: Array.isArray(r.content) ? r.content.map((p: object) => ({ ...p })) : r.content });
const copyItem = (item: OutputItem): OutputItem => (item.type === "message" ? copyMessage(item) : item.type === "reasoning" ? copyReasoning(item) : { ...item });

/** A deep copy of a response, for events: the live object keeps changing after they are queued. */
export function snapshot(response: ResponseObject): ResponseObject {
  return { ...response, output: response.output.map(copyItem), metadata: { ...response.metadata } };
}

/**
 * Turns the runner's events of one choice into the response's output items and the events that
 * describe them, in OpenAI's order (../shared/openai-reference.md §2.4): reasoning opens a
 * reasoning item with one reasoning_text part, text a message item with one output_text part,
 * each tool call a function_call item; an item is closed (its .done events) when the next one
 * starts or the choice ends. Events carry copies, never the live items.
 */
export class ResponseOutputBuilder {
  readonly output: OutputItem[] = [];
  private open: Open | undefined;

  constructor(private readonly emit: (event: ResponseEvent) => void) {}

  delta(d: TokenDelta): void {
    if (d.reasoning) this.reasoning(d.reasoning);
    if (d.text || d.logprobs?.tokens.length) this.text(d.text, d.logprobs ? openAILogprobs(d.logprobs.tokens) : NO_LOGPROBS);
    for (const call of d.toolCalls) this.toolCall(call);
  }

  /** The choice finished: closes the open item (incomplete when the output budget ran out). */
  end(finishReason: FinishReason): void {
    this.close(finishReason === FinishReason.FINISH_REASON_LENGTH ? "incomplete" : "completed");
  }

  /**
   * The choice starts over (a runner preempted a batch-priority choice): what it produced so far
   * is dropped. Only non-streamed runs are preempted, so no event went out for it.
   */
  reset(): void {
    this.output.length = 0;
    this.open = undefined;
  }

  /** Generation stopped early (failure, cancel): the open item ends incomplete. */
  abort(): void {
    this.close("incomplete");
  }

  private text(text: string, logprobs: readonly OpenAILogprob[]): void {
    let open = this.open;
    if (open?.kind !== "message") {
      this.close("completed");
      const item: MessageItem = { type: "message", id: newId("msg_"), role: "assistant", status: "in_progress", content: [] };
      const index = this.output.push(item) - 1;
      this.emit({ type: "response.output_item.added", output_index: index, item: copyMessage(item) });
      const part: OutputTextPart = { type: "output_text", text: "", annotations: [], logprobs: [] };
      this.emit({ type: "response.content_part.added", item_id: item.id, output_index: index, content_index: 0, part: copyPart(part) });
      item.content.push(part);
      open = this.open = { kind: "message", item, index, part };
    }
    open.part.text += text;
    for (const l of logprobs) open.part.logprobs.push(l);
    this.emit(new OutputTextDelta(open.item.id, open.index, 0, text, logprobs));
  }

  private reasoning(text: string): void {
    let open = this.open;
    if (open?.kind !== "reasoning") {
      this.close("completed");
      const item: ReasoningItem = { type: "reasoning", id: newId("rs_"), summary: [], content: [], status: "in_progress" };
      const index = this.output.push(item) - 1;
      this.emit({ type: "response.output_item.added", output_index: index, item: copyReasoning(item) });
      const part: ReasoningTextPart = { type: "reasoning_text", text: "" };
      this.emit({ type: "response.content_part.added", item_id: item.id, output_index: index, content_index: 0, part: { ...part } });
      (item.content as ReasoningTextPart[]).push(part);
      open = this.open = { kind: "reasoning", item, index, part };
    }
    open.part.text += text;
    this.emit({ type: "response.reasoning_text.delta", item_id: open.item.id, output_index: open.index, content_index: 0, delta: text });
  }

  private toolCall(d: ToolCallDelta): void {
    let open = this.open;
    if (open?.kind !== "call" || open.callIndex !== d.index) {
      this.close("completed");
      const item: FunctionCallItem = { type: "function_call", id: newId("fc_"), call_id: d.id || newId("call_"), name: d.name, arguments: "", status: "in_progress" };
      const index = this.output.push(item) - 1;
      this.emit({ type: "response.output_item.added", output_index: index, item: { ...item } });
      open = this.open = { kind: "call", item, index, callIndex: d.index };
    }
    if (!d.arguments) return;
    open.item.arguments += d.arguments;
    this.emit(new FunctionCallArgumentsDelta(open.item.id, open.index, d.arguments));
  }

  private close(status: ItemStatus): void {
    const open = this.open;
    if (!open) return;
    this.open = undefined;
    const { item, index } = open;
    if (open.kind === "message") {
      const part = open.part;
      this.emit({ type: "response.output_text.done", item_id: item.id, output_index: index, content_index: 0, text: part.text, logprobs: [...part.logprobs] });
      this.emit({ type: "response.content_part.done", item_id: item.id, output_index: index, content_index: 0, part: copyPart(part) });
    } else if (open.kind === "reasoning") {
      const part = open.part;
      this.emit({ type: "response.reasoning_text.done", item_id: item.id, output_index: index, content_index: 0, text: part.text });
      this.emit({ type: "response.content_part.done", item_id: item.id, output_index: index, content_index: 0, part: { ...part } });
    } else {
      const call = open.item;
      this.emit({ type: "response.function_call_arguments.done", item_id: call.id, output_index: index, name: call.name, arguments: call.arguments });
    }
    item.status = status;
    this.emit({ type: "response.output_item.done", output_index: index, item: copyItem(item) });
  }
}
