import type { JetStreamClient } from "@nats-io/jetstream";
import type { Logger } from "../../lib/log.js";
import { subjects } from "../../lib/nats/subjects.js";
import type { Trace } from "./trace-record.js";

export interface TraceWriterOptions {
  /** Traces waiting to be written; past it new ones are dropped and counted. */
  maxBuffered: number;
  /** Bytes (of recorded bodies) waiting to be written; past it new ones are dropped too. */
  maxBufferedBytes: number;
  flushMs: number;
  /** Publishes awaiting their JetStream ack at once. */
  maxInFlight?: number;
}

/**
 * Bytes of traces (as `record` estimates them) serialized at one go before the writer yields to
 * the event loop: a flush of a full buffer (thousands of traces, bodies up to the cap) serialized
 * in one piece would stall every stream the process serves for as long as it takes.
 */
const SLICE_BYTES = 512 * 1024;

/**
 * Writes traces off the request path: `record` only appends to a bounded buffer (never blocks,
 * never throws); a timer serializes and publishes the buffer to the trace stream in batches,
 * pipelined, a slice at a time with the event loop free between slices. What does not fit the
 * buffer, or fails to be stored, is dropped and counted: a trace is never worth a slower or failed
 * request.
 */
export class TraceWriter {
  private buffer: Trace[] = [];
  /** `record`'s size estimate of each buffered trace, by position. */
  private sizes: number[] = [];
  private bufferedBytes = 0;
  private timer: NodeJS.Timeout | undefined;
  private flushing: Promise<void> | undefined;
  private lastWarnAt = 0;
  /** Traces dropped: buffer full, or the stream refused or did not answer. */
  dropped = 0;
  written = 0;

  constructor(private readonly js: JetStreamClient, private readonly options: TraceWriterOptions, private readonly log: Logger) {}

  get buffered(): number {
    return this.buffer.length;
  }

  start(): void {
    this.timer = setInterval(() => void this.flush(), this.options.flushMs);
    this.timer.unref();
  }

  record(trace: Trace): void {
    const bytes = trace.request.text.length + trace.response.text.length + (trace.prompt?.text.length ?? 0) + 1024;
    if (this.buffer.length >= this.options.maxBuffered || this.bufferedBytes + bytes > this.options.maxBufferedBytes) {
      this.drop(1, "trace buffer full");
      return;
    }
    this.buffer.push(trace);
    this.sizes.push(bytes);
    this.bufferedBytes += bytes;
  }

  /** Writes what is buffered; resolves when it is stored (or dropped). */
  flush(): Promise<void> {
    if (this.flushing) return this.flushing;
    if (this.buffer.length === 0) return Promise.resolve();
    this.flushing = this.writeOut().finally(() => (this.flushing = undefined));
    return this.flushing;
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.flush();
    if (this.buffer.length > 0) await this.flush();
  }

  private async writeOut(): Promise<void> {
    const batch = this.buffer;
    const sizes = this.sizes;
    this.buffer = [];
    this.sizes = [];
    this.bufferedBytes = 0;
    const inFlight = new Set<Promise<void>>();
    const limit = this.options.maxInFlight ?? 256;
    for (let start = 0; start < batch.length; ) {
      let end = start;
      for (let bytes = 0; end < batch.length && (end === start || bytes + sizes[end]! <= SLICE_BYTES); end++) bytes += sizes[end]!;
      if (start > 0) await new Promise<void>((resolve) => setImmediate(resolve));
      for (const message of packTraces(batch.slice(start, end))) {
        const p: Promise<void> = this.js
          .publish(message.subject, message.payload, { timeout: 5_000 })
          .then(() => void (this.written += message.count))
          .catch((err: unknown) => this.drop(message.count, "traces not stored", err))
          .finally(() => inFlight.delete(p));
        inFlight.add(p);
        if (inFlight.size >= limit) await Promise.race(inFlight);
      }
      start = end;
    }
    await Promise.all(inFlight);
  }

  private drop(n: number, why: string, err?: unknown): void {
    this.dropped += n;
    const now = Date.now();
    // One warning a minute at most: under overload every request would say the same.
    if (now - this.lastWarnAt > 60_000) {
      this.lastWarnAt = now;
      this.log.warn("traces dropped", { why, droppedSoFar: this.dropped, err });
    }
  }
}

/** Traces one stream message holds at most, and its size (the stream's max_msg_size is 1 MiB). */
const MAX_TRACES_PER_MESSAGE = 64;
const MAX_MESSAGE_BYTES = 512 * 1024;

/**
 * Packs traces into stream messages: a JSON array of the traces of one subject (project, model,
 * key, status: what readers filter on), in the order they were recorded. Storing each trace as a
 * message of its own cost nats-server a write and an ack per logged request, which at hundreds
 * of requests a second was most of what `log: true` cost the machine. A trace larger than the
 * size bound goes alone.
 */
export function packTraces(traces: readonly Trace[]): Array<{ subject: string; payload: string; count: number }> {
  const bySubject = new Map<string, string[]>();
  for (const trace of traces) {
    const subject = subjects.trace(trace.project_id, trace.model, trace.api_key_id, trace.status);
    let list = bySubject.get(subject);
    if (!list) bySubject.set(subject, (list = []));
    list.push(JSON.stringify(trace));
  }
  const out: Array<{ subject: string; payload: string; count: number }> = [];
  for (const [subject, serialized] of bySubject) {
    let parts: string[] = [];
    let bytes = 2;
    const emit = () => {
      if (parts.length > 0) out.push({ subject, payload: `[${parts.join(",")}]`, count: parts.length });
      parts = [];
      bytes = 2;
    };
    for (const text of serialized) {
      const size = Buffer.byteLength(text) + 1;
      if (parts.length >= MAX_TRACES_PER_MESSAGE || (parts.length > 0 && bytes + size > MAX_MESSAGE_BYTES)) emit();
      parts.push(text);
      bytes += size;
    }
    emit();
  }
  return out;
}
