import { readVarint, varintEnd } from "../../lib/bytes.js";
import { RunnerEvent, type TokenDelta, type ToolCallDelta } from "../../proto/gen/tributary/v1/inference.js";

/** Where the events of a RunnerEventBatch go, in order. */
export interface RunnerEventSink {
  /** A text delta (no tool calls): nearly every event, handed over without a RunnerEvent around it. */
  delta(requestId: string, seq: number, runnerId: string, delta: TokenDelta): void;
  /** Any other event, decoded by the generated code. */
  event(event: RunnerEvent): void;
}

/**
 * Reads a RunnerEventBatch (the gateway's one message per runner step) and hands each event to
 * `sink` as it is read. Text deltas, the event of every token, are read by hand: ts-proto's
 * decoder builds a reader, a RunnerEvent, a oneof wrapper and a TokenDelta per event and decodes
 * each string through TextDecoder; here the strings are sliced from the bytes at once, and the
 * runner id, the same in every event of a batch, is decoded once. An event with anything else
 * (another kind, tool calls, a field this reader does not know) goes through the generated
 * decoder, so the two agree on every input. Throws MalformedBatch on bytes that are not a
 * RunnerEventBatch; events before the bad part have been handed over by then.
 */
export function readRunnerEventBatch(data: Uint8Array, sink: RunnerEventSink): void {
  const bytes = Buffer.isBuffer(data) ? data : Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  const reader = new FrameReader(bytes, sink);
  const end = bytes.length;
  let at = 0;
  while (at < end) {
    const tag = bytes[at++]!;
    const length = readVarint(bytes, at, end);
    at = varintEnd;
    // Field 1 (events), length-delimited, is all a batch holds: anything else is not one.
    if (tag !== 0x0a || length < 0 || at + length > end) throw new MalformedBatch();
    if (!reader.textDelta(at, at + length)) sink.event(decodeEvent(bytes.subarray(at, at + length)));
    at += length;
  }
}

/** Thrown for bytes that are not a RunnerEventBatch (what a sink throws passes through as it is). */
export class MalformedBatch extends Error {
  constructor(cause?: unknown) {
    super("malformed RunnerEventBatch", { cause });
  }
}

function decodeEvent(frame: Uint8Array): RunnerEvent {
  try {
    return RunnerEvent.decode(frame);
  } catch (err) {
    throw new MalformedBatch(err);
  }
}

/** The tool calls of every text delta: one empty array for all, not one per token (frozen: nobody adds to it). */
const NO_TOOL_CALLS = Object.freeze([]) as unknown as ToolCallDelta[];

class FrameReader {
  private runnerIdStart = -1;
  private runnerIdEnd = -1;
  private runnerId = "";

  constructor(private readonly bytes: Buffer, private readonly sink: RunnerEventSink) {}

  /** Hands over the event in bytes[start, end) if it is a plain text delta; false if it is anything else. */
  textDelta(start: number, end: number): boolean {
    const bytes = this.bytes;
    let requestId = "";
    let seq = 0;
    let runnerId = "";
    let deltaStart = -1;
    let deltaEnd = -1;
    let at = start;
    while (at < end) {
      const tag = bytes[at++]!;
      const value = readVarint(bytes, at, end);
      if (value < 0) return false;
      at = varintEnd;
      switch (tag) {
        case 0x0a: // request_id
          if (at + value > end) return false;
          requestId = bytes.toString("utf8", at, (at += value));
          break;
        case 0x10: // seq (uint64; past 2^53 the generated decoder decides)
          if (value > Number.MAX_SAFE_INTEGER) return false;
          seq = value;
          break;
        case 0x1a: // runner_id
          if (at + value > end) return false;
          runnerId = this.runnerIdAt(at, (at += value));
          break;
        case 0x22: // delta (a second one would be merged into the first: the generated decoder does that)
          if (at + value > end || deltaStart >= 0) return false;
          deltaStart = at;
          deltaEnd = at += value;
          break;
        default:
          return false;
      }
    }
    if (deltaStart < 0) return false;
    let choiceIndex = 0;
    let text = "";
    let tokens = 0;
    for (at = deltaStart; at < deltaEnd; ) {
      const tag = bytes[at++]!;
      const value = readVarint(bytes, at, deltaEnd);
      if (value < 0) return false;
      at = varintEnd;
      switch (tag) {
        case 0x08: // choice_index (uint32)
          if (value > 0xffffffff) return false;
          choiceIndex = value;
          break;
        case 0x12: // text
          if (at + value > deltaEnd) return false;
          text = bytes.toString("utf8", at, (at += value));
          break;
        case 0x20: // tokens (uint32)
          if (value > 0xffffffff) return false;
          tokens = value;
          break;
        default:
          return false; // tool calls, or a field added later
      }
    }
    this.sink.delta(requestId, seq, runnerId, { choiceIndex, text, toolCalls: NO_TOOL_CALLS, tokens, logprobs: undefined, reasoning: undefined });
    return true;
  }

  /** The runner id in bytes[start, end): decoded once while it repeats, as it does within a batch. */
  private runnerIdAt(start: number, end: number): string {
    const bytes = this.bytes;
    const length = end - start;
    if (length === this.runnerIdEnd - this.runnerIdStart) {
      let same = true;
      for (let i = 0; i < length; i++)
        if (bytes[start + i] !== bytes[this.runnerIdStart + i]) {
          same = false;
          break;
        }
      if (same) return this.runnerId;
    }
    this.runnerIdStart = start;
    this.runnerIdEnd = end;
    return (this.runnerId = bytes.toString("utf8", start, end));
  }
}
