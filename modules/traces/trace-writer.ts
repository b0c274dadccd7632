import type { JetStreamClient } from "@nats-io/jetstream";
import type { Logger } from "../../lib/log.js";
import { subjects } from "../../lib/nats/subjects.js";
import type { Trace } from "./trace-record.js";
import { encodeTrace, TraceMessage } from "./trace-codec.js";

export interface TraceWriterOptions {
  /** Traces waiting to be written; past it new ones are dropped and counted. */
  maxBuffered: number;
  /** Bytes (of encoded traces, as buffered) waiting to be written; past it new ones are dropped too. */
  maxBufferedBytes: number;
  flushMs: number;
  /** Publishes awaiting their JetStream ack at once. */
  maxInFlight?: number;
}

/**
 * Bytes of messages published at one go before the writer yields to the event loop: a flush of a
 * full buffer (tens of MiB) handed to the connection in one piece would stall every stream the
 * process serves for as long as it takes.
 */
const SLICE_BYTES = 512 * 1024;
/** Subjects remembered (a trace's subject escapes four tokens: worth computing once per key). */
const MAX_SUBJECTS_CACHED = 4096;

/**
 * Writes traces off the request path. `record` encodes the trace at once into the open message of
 * its subject (project, model, key, status: what readers filter on; see trace-codec.ts), a buffer
 * outside the JavaScript heap, and never blocks or throws; a timer publishes the messages to the
 * trace stream, pipelined, a slice at a time with the event loop free between slices. Several
 * traces per message: storing each as a message of its own cost nats-server a write and an ack per
 * logged request. What does not fit the bounds, or fails to be stored, is dropped and counted: a
 * trace is never worth a slower or failed request.
 */
/** A subject traces are written to, and how large its last message grew (a new one starts that large). */
interface SubjectEntry {
  subject: string;
  lastBytes: number;
}

export class TraceWriter {
  /** Messages being filled, by subject. */
  private open = new Map<SubjectEntry, TraceMessage>();
  /** Messages full before the flush, in the order they filled. */
  private sealed: TraceMessage[] = [];
  private bufferedTraces = 0;
  private bufferedBytes = 0;
  private readonly subjectCache = new Map<string, SubjectEntry>();
  /** The subject of the trace recorded last: its successor nearly always shares it. */
  private last: { projectId: string; model: string; keyId: string; status: string; entry: SubjectEntry } | undefined;
  private timer: NodeJS.Timeout | undefined;
  private flushing: Promise<void> | undefined;
  private lastWarnAt = 0;
  /** Traces dropped: buffer full, or the stream refused or did not answer. */
  dropped = 0;
  written = 0;

  constructor(private readonly js: JetStreamClient, private readonly options: TraceWriterOptions, private readonly log: Logger) {}

  get buffered(): number {
    return this.bufferedTraces;
  }

  start(): void {
    this.timer = setInterval(() => void this.flush(), this.options.flushMs);
    this.timer.unref();
  }

  record(trace: Trace): void {
    if (this.bufferedTraces >= this.options.maxBuffered) return this.drop(1, "trace buffer full");
    const encoded = encodeTrace(trace);
    const entry = this.subjectOf(trace);
    let message = this.open.get(entry);
    if (message && !message.fits(encoded.size)) {
      this.seal(entry, message);
      message = undefined;
    }
    const capacity = TraceMessage.initialCapacity(encoded.size, entry.lastBytes);
    const added = message ? message.growthFor(encoded.size) : capacity;
    if (this.bufferedBytes + added > this.options.maxBufferedBytes) return this.drop(1, "trace buffer full");
    const before = message?.capacity ?? 0;
    if (!message) this.open.set(entry, (message = new TraceMessage(entry.subject, capacity)));
    message.append(encoded);
    this.bufferedBytes += message.capacity - before;
    this.bufferedTraces++;
  }

  private seal(entry: SubjectEntry, message: TraceMessage): void {
    entry.lastBytes = message.size;
    this.sealed.push(message);
    this.open.delete(entry);
  }

  /** Writes what is buffered; resolves when it is stored (or dropped). */
  flush(): Promise<void> {
    if (this.flushing) return this.flushing;
    if (this.bufferedTraces === 0) return Promise.resolve();
    this.flushing = this.writeOut().finally(() => (this.flushing = undefined));
    return this.flushing;
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.flush();
    if (this.bufferedTraces > 0) await this.flush();
  }

  private subjectOf(trace: Trace): SubjectEntry {
    const last = this.last;
    if (last && last.projectId === trace.project_id && last.model === trace.model && last.keyId === trace.api_key_id && last.status === trace.status) return last.entry;
    const key = `${trace.project_id}\n${trace.model}\n${trace.api_key_id}\n${trace.status}`;
    let entry = this.subjectCache.get(key);
    if (entry === undefined) {
      if (this.subjectCache.size >= MAX_SUBJECTS_CACHED) this.subjectCache.clear();
      entry = { subject: subjects.trace(trace.project_id, trace.model, trace.api_key_id, trace.status), lastBytes: 0 };
      this.subjectCache.set(key, entry);
    }
    this.last = { projectId: trace.project_id, model: trace.model, keyId: trace.api_key_id, status: trace.status, entry };
    return entry;
  }

  private async writeOut(): Promise<void> {
    for (const [entry, message] of this.open) this.seal(entry, message);
    const messages = this.sealed;
    this.sealed = [];
    this.open = new Map();
    this.bufferedTraces = 0;
    this.bufferedBytes = 0;
    const inFlight = new Set<Promise<void>>();
    const limit = this.options.maxInFlight ?? 256;
    let sliceBytes = 0;
    for (const message of messages) {
      const payload = message.payload();
      if (sliceBytes > 0 && sliceBytes + payload.length > SLICE_BYTES) {
        await new Promise<void>((resolve) => setImmediate(resolve));
        sliceBytes = 0;
      }
      sliceBytes += payload.length;
      const count = message.count;
      const p: Promise<void> = this.js
        .publish(message.subject, payload, { timeout: 5_000 })
        .then(() => void (this.written += count))
        .catch((err: unknown) => this.drop(count, "traces not stored", err))
        .finally(() => inFlight.delete(p));
      inFlight.add(p);
      if (inFlight.size >= limit) await Promise.race(inFlight);
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

/**
 * Traces as the writer stores them: one message per subject, at most MAX_TRACES_PER_MESSAGE
 * traces and MAX_MESSAGE_BYTES each (a larger trace goes alone), in the order given.
 */
export function packTraces(traces: readonly Trace[]): Array<{ subject: string; payload: Uint8Array; count: number }> {
  const open = new Map<string, TraceMessage>();
  const out: TraceMessage[] = [];
  for (const trace of traces) {
    const encoded = encodeTrace(trace);
    const subject = subjects.trace(trace.project_id, trace.model, trace.api_key_id, trace.status);
    let message = open.get(subject);
    if (message && !message.fits(encoded.size)) {
      out.push(message);
      message = undefined;
    }
    if (!message) open.set(subject, (message = new TraceMessage(subject, TraceMessage.initialCapacity(encoded.size))));
    message.append(encoded);
  }
  out.push(...open.values());
  return out.map((m) => ({ subject: m.subject, payload: m.payload(), count: m.count }));
}
