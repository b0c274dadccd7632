import type { ChoiceEnd, TokenDelta, Usage } from "../../proto/gen/tributary/v1/inference.js";
import type { DomainError } from "../../modules/errors/mod.js";
import { SSE_DONE, sseData, type SseOutput } from "./sse-writer.js";
import { asciiContentFrame } from "./content-frame.js";
import { applyToolCallDelta, usageObject, finishReasonName, openAIError, openAILogprobs, reasoningFieldsJson, type OpenAIFinishReason, type OpenAILogprob } from "../../modules/openai/mod.js";

const NO_CALLS: ReadonlyArray<{ index: number; c: { id: string; name: string; arguments: string } }> = [];

interface PendingChoice {
  roleSent: boolean;
  /** Reasoning not yet written (it comes before the answer: written first). */
  reasoning: string;
  text: string;
  /** Tool-call fragments not yet written, by call index. */
  toolCalls: Array<{ id: string; name: string; arguments: string } | undefined>;
  finish: OpenAIFinishReason | null;
  finishWritten: boolean;
  /** Logprobs of the pending text's tokens (requests that asked for them). */
  logprobs: OpenAILogprob[] | undefined;
}

export interface ChatStreamOptions {
  id: string;
  /** Quoted in the message of an internal error. */
  requestId: string;
  created: number;
  model: string;
  choices: number;
  includeUsage: boolean;
  /** Called when the client is too slow to keep up (the caller cancels the generation). */
  onOverflow: () => void;
}

/**
 * Writes runner events as `chat.completion.chunk` SSE events. While the client is behind, deltas
 * of a choice merge into one pending chunk (text appended, tool-call fragments joined per call),
 * which goes out when the socket drains: coalesced, never reordered or dropped. A client so slow
 * that the stream's share of the gateway's PendingBudget runs out is disconnected instead.
 */
export class ChatChunkStream {
  private readonly pending: PendingChoice[];
  /** The chunk object's fixed fields, without the closing brace. */
  private readonly base: string;
  private readonly tail: string;
  /** The frame of a content chunk around its JSON-escaped text (the one chunk of nearly every token), per choice. */
  private readonly contentPrefix: string[] = [];
  private readonly contentSuffix: string;
  /** The same, as UTF-8 bytes (encoded on first use). */
  private readonly contentPrefixBytes: Uint8Array[] = [];
  private contentSuffixBytes: Uint8Array | undefined;
  private pendingBytes = 0;
  private usage: Usage | undefined;
  private finished = false;

  constructor(private readonly writer: SseOutput, private readonly options: ChatStreamOptions) {
    this.pending = Array.from({ length: options.choices }, () => ({ roleSent: false, reasoning: "", text: "", toolCalls: [], finish: null, finishWritten: false, logprobs: undefined }));
    this.base = `{"id":${JSON.stringify(options.id)},"object":"chat.completion.chunk","created":${options.created},"model":${JSON.stringify(options.model)},"service_tier":"default"`;
    this.tail = options.includeUsage ? `],"usage":null}` : `]}`;
    this.contentSuffix = `},"logprobs":null,"finish_reason":null}${this.tail}\n\n`;
    writer.onDrain(() => this.flush());
  }

  delta(d: TokenDelta): void {
    const p = this.pending[d.choiceIndex];
    if (!p || this.writer.closed) return;
    // The chunk of nearly every token: text for a choice that has its role out and nothing
    // pending, to a client that keeps up. It goes out at once, as flush() would write it.
    if (p.roleSent && d.toolCalls.length === 0 && d.text !== "" && !d.logprobs && !d.reasoning && p.text === "" && p.toolCalls.length === 0 && !p.finish && this.pendingBytes === 0 && this.writer.writable) {
      const i = d.choiceIndex;
      const prefix = (this.contentPrefix[i] ??= `data: ${this.base},"choices":[{"index":${i},"delta":{"content":`);
      const bytes = asciiContentFrame((this.contentPrefixBytes[i] ??= Buffer.from(prefix)), d.text, (this.contentSuffixBytes ??= Buffer.from(this.contentSuffix)));
      this.writer.write(bytes ?? prefix + JSON.stringify(d.text) + this.contentSuffix);
      return;
    }
    p.text += d.text;
    this.pendingBytes += d.text.length;
    if (d.reasoning) {
      p.reasoning += d.reasoning;
      // Written under both of its names.
      this.pendingBytes += 2 * d.reasoning.length;
    }
    if (d.logprobs) {
      const logprobs = (p.logprobs ??= []);
      for (const l of openAILogprobs(d.logprobs.tokens)) {
        logprobs.push(l);
        // Roughly what a token's logprobs take as JSON.
        this.pendingBytes += 64 + 64 * l.top_logprobs.length;
      }
    }
    for (const t of d.toolCalls) {
      const calls = p.toolCalls as Array<{ id: string; name: string; arguments: string }>;
      applyToolCallDelta(calls, t);
      this.pendingBytes += t.arguments.length;
    }
    this.afterEvent();
  }

  choiceEnd(e: ChoiceEnd): void {
    const p = this.pending[e.choiceIndex];
    if (!p) return;
    p.finish = finishReasonName(e.finishReason);
    this.afterEvent();
  }

  /** The generation finished: write what is left, the usage chunk and [DONE]. */
  complete(usage: Usage | undefined): void {
    this.usage = usage;
    this.finished = true;
    this.flush();
  }

  /** Ends the stream with an error event (after the 200 went out, errors travel in the stream). */
  fail(error: DomainError): void {
    if (this.writer.closed) return;
    this.flush();
    this.writer.end(sseData(JSON.stringify(openAIError(error, this.options.requestId).body)));
  }

  private afterEvent(): void {
    // Events still in flight after the end (a dropped client's generation stopping) change nothing.
    if (this.writer.closed) return;
    if (this.writer.writable) return this.flush();
    this.writer.hold(this.pendingBytes);
    if (this.writer.overLimit) {
      this.options.onOverflow();
      this.writer.drop();
    }
  }

  private flush(): void {
    if (this.writer.closed) return;
    let frames = "";
    for (let i = 0; i < this.pending.length; i++) {
      const p = this.pending[i]!;
      let calls = p.toolCalls.length === 0 ? NO_CALLS : p.toolCalls.flatMap((c, index) => (c ? [{ index, c }] : []));
      if (!p.roleSent && (p.reasoning || p.text || p.logprobs || calls.length > 0 || p.finish)) {
        // The first chunk of a choice carries the role (and, for a tool call, content null).
        const callsFirst = calls.length > 0 && !p.text && !p.reasoning;
        const first = callsFirst
          ? `{"role":"assistant","content":null,"tool_calls":${this.toolCallsJson(calls)}}`
          : `{"role":"assistant","content":"","refusal":null}`;
        frames += this.chunk(i, first, null);
        p.roleSent = true;
        if (callsFirst) {
          p.toolCalls = [];
          calls = NO_CALLS;
        }
      }
      if (p.reasoning) {
        frames += this.chunk(i, `{${reasoningFieldsJson(p.reasoning).slice(1)}}`, null);
        p.reasoning = "";
      }
      if (p.logprobs) {
        // The chunk of this text carries its tokens' logprobs.
        frames += this.chunk(i, `{"content":${JSON.stringify(p.text)}}`, null, `{"content":${JSON.stringify(p.logprobs)},"refusal":null}`);
        p.text = "";
        p.logprobs = undefined;
      } else if (p.text) {
        frames += (this.contentPrefix[i] ??= `data: ${this.base},"choices":[{"index":${i},"delta":{"content":`) + JSON.stringify(p.text) + this.contentSuffix;
        p.text = "";
      }
      if (calls.length > 0) {
        frames += this.chunk(i, `{"tool_calls":${this.toolCallsJson(calls)}}`, null);
        p.toolCalls = [];
      }
      if (p.finish && !p.finishWritten) {
        frames += this.chunk(i, "{}", p.finish);
        p.finishWritten = true;
      }
    }
    this.pendingBytes = 0;
    this.writer.hold(0);
    if (this.finished) {
      if (this.options.includeUsage)
        frames += sseData(`${this.base},"choices":[],"usage":${JSON.stringify(usageObject(this.usage))}}`);
      this.writer.end(frames + SSE_DONE);
      return;
    }
    if (frames) this.writer.write(frames);
  }

  /** Calls new in this chunk carry id, type and name; later fragments only index and arguments. */
  private toolCallsJson(calls: ReadonlyArray<{ index: number; c: { id: string; name: string; arguments: string } }>): string {
    return JSON.stringify(
      calls.map(({ index, c }) =>
        c.id
          ? { index, id: c.id, type: "function", function: { name: c.name, arguments: c.arguments } }
          : { index, function: { arguments: c.arguments } },
      ),
    );
  }

  private chunk(index: number, delta: string, finish: OpenAIFinishReason | null, logprobs = "null"): string {
    return sseData(`${this.base},"choices":[{"index":${index},"delta":${delta},"logprobs":${logprobs},"finish_reason":${finish ? `"${finish}"` : "null"}}${this.tail}`);
  }
}
