import type { NatsConnection } from "@nats-io/transport-node";
import { nanos } from "@nats-io/transport-node";
import { DiscardPolicy, RetentionPolicy, StorageType } from "@nats-io/jetstream";
import { ensureStream, jetStreamHandles, readStored, type JetStreamHandles } from "../../lib/nats/jetstream.js";
import { streams, subjects } from "../../lib/nats/subjects.js";
import { InvalidValue } from "../../lib/nats/kv-records.js";
import { firstPage, type Page } from "../../lib/page.js";
import type { Logger } from "../../lib/log.js";
import { errors } from "../errors/mod.js";
import { traceIdTime, traceSchema, type Trace } from "./trace-record.js";
import { readTraceMessage } from "./trace-codec.js";
import type { TraceStatus } from "./observation.js";

export interface TraceRetention {
  /** Traces older than this expire. */
  maxAgeSeconds: number;
  /** Past this many bytes the oldest traces expire (-1: no limit). */
  maxBytes: number;
}

export interface TraceQuery {
  model?: string;
  keyId?: string;
  status?: TraceStatus;
  /** Unix seconds: traces created at or after it. */
  startTime?: number;
  /** Unix seconds: traces created before it. */
  endTime?: number;
  limit: number;
  /** A trace id: the page continues with the traces older than it. */
  after?: string;
}

/** Messages one list or lookup may read before it stops: a request's work is bounded however large the stream. */
const MAX_SCANNED = 200_000;
/** How far before a trace id's time its lookup starts (clocks of gateways and the NATS server differ). */
const LOOKUP_SLACK_MS = 60_000;

/**
 * The trace stream: messages of traces (several each, see trace-codec.ts) under `tributary.v1.traces.<project>.<model>.<key>.<status>`,
 * expiring by age and bytes (whole messages, the stream's own limits: nothing deletes rows).
 * Listing reads newest first, backwards over growing ranges of the stream, with the project and
 * the subject filters applied by the server.
 */
export class TraceStore {
  private constructor(private readonly handles: JetStreamHandles, private readonly log: Logger) {}

  static async open(nc: NatsConnection, retention: TraceRetention, log: Logger): Promise<TraceStore> {
    const handles = await jetStreamHandles(nc);
    await ensureStream(handles.jsm, {
      name: streams.traces,
      subjects: [subjects.tracesAll],
      retention: RetentionPolicy.Limits,
      storage: StorageType.File,
      discard: DiscardPolicy.Old,
      max_age: nanos(retention.maxAgeSeconds * 1000),
      max_bytes: retention.maxBytes,
      // A trace is at most three capped bodies and its fields.
      max_msg_size: 1024 * 1024,
    });
    return new TraceStore(handles, log);
  }

  get js() {
    return this.handles.js;
  }

  async list(projectId: string, query: TraceQuery): Promise<Page<Trace>> {
    const info = await this.handles.jsm.streams.info(streams.traces);
    const first = info.state.first_seq;
    let hi = info.state.last_seq + 1;
    // The cursor's message holds traces before it too (one message holds several traces).
    let cursor: { seq: number; index: number } | undefined;
    if (query.after !== undefined) {
      cursor = await this.locate(projectId, query.after);
      if (!cursor) throw errors.invalidParam("after", `No trace with id '${query.after}' in this project: 'after' takes the id of a listed trace.`);
      hi = cursor.seq + 1;
    }
    const filter = subjects.traceFilter(projectId, { model: query.model, keyId: query.keyId, status: query.status });
    const out: Trace[] = [];
    let step = 64;
    let scanned = 0;
    let older = false;
    while (out.length <= query.limit && hi > first && scanned < MAX_SCANNED && !older) {
      const lo = Math.max(first, hi - step);
      const batch: Array<{ seq: number; data: Uint8Array; subject: string }> = [];
      for await (const m of readStored(this.handles, streams.traces, filter, { startSeq: lo, prefetch: 256 })) {
        if (m.seq >= hi) break;
        batch.push({ seq: m.seq, data: m.data, subject: m.subject });
      }
      scanned += hi - lo;
      for (let i = batch.length - 1; i >= 0 && out.length <= query.limit && !older; i--) {
        const traces = this.decode(batch[i]!);
        const from = batch[i]!.seq === cursor?.seq ? cursor.index - 1 : traces.length - 1;
        for (let j = from; j >= 0 && out.length <= query.limit; j--) {
          const trace = traces[j]!;
          if (trace.project_id !== projectId) continue;
          if (query.endTime !== undefined && trace.created_at >= query.endTime) continue;
          if (query.startTime !== undefined && trace.created_at < query.startTime) {
            older = true;
            break;
          }
          out.push(trace);
        }
      }
      hi = lo;
      step = Math.min(step * 4, 1 << 20);
    }
    // Read one past the limit (out.length <= limit kept it going): that one says has_more.
    return firstPage(out, query.limit);
  }

  async get(projectId: string, id: string): Promise<Trace | undefined> {
    return (await this.locate(projectId, id))?.trace;
  }

  /** Finds a trace of the project by id, reading forward from a little before the time in its id. */
  private async locate(projectId: string, id: string): Promise<{ seq: number; index: number; trace: Trace } | undefined> {
    const at = traceIdTime(id);
    if (at === undefined) return undefined;
    let scanned = 0;
    for await (const m of readStored(this.handles, streams.traces, subjects.traceFilter(projectId), { startTime: new Date(at - LOOKUP_SLACK_MS), prefetch: 256 })) {
      // Written within seconds of its id's time (the writer's flush period, a publish): past that, it is not there.
      if (m.info.timestampNanos / 1_000_000 > at + 10 * LOOKUP_SLACK_MS || ++scanned > MAX_SCANNED) return undefined;
      const traces = this.decode(m);
      const index = traces.findIndex((trace) => trace.id === id && trace.project_id === projectId);
      if (index >= 0) return { seq: m.seq, index, trace: traces[index]! };
    }
    return undefined;
  }

  /**
   * The traces of one stream message, in the order they were recorded: records in the writer's
   * layout (trace-codec.ts), or, written before it, a JSON array of traces or one trace alone.
   */
  private decode(m: { seq: number; data: Uint8Array; subject: string }): Trace[] {
    const where = `${streams.traces} seq ${m.seq}`;
    let items: unknown[];
    const framed = readTraceMessage(m.data);
    if (framed) {
      if (framed.error) this.log.warn("undecodable trace records skipped", { where, issue: framed.error });
      items = framed.records;
    } else {
      let input: unknown;
      try {
        input = JSON.parse(new TextDecoder().decode(m.data));
      } catch (err) {
        this.log.warn("undecodable trace message skipped", { where, issue: (err as Error).message });
        return [];
      }
      items = Array.isArray(input) ? input : [input];
    }
    const traces: Trace[] = [];
    for (let i = 0; i < items.length; i++) {
      try {
        traces.push(traceSchema.decode(`${where} [${i}]`, items[i]));
      } catch (err) {
        if (!(err instanceof InvalidValue)) throw err;
        this.log.warn("undecodable trace skipped", { where: err.where, issue: err.message });
      }
    }
    return traces;
  }
}
