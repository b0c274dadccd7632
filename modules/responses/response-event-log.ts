import * as Schema from "effect/Schema";
import type { NatsConnection } from "@nats-io/transport-node";
import { DeliverPolicy, jetstream, RetentionPolicy, StorageType, type JetStreamClient, type JetStreamManager, type PubAck } from "@nats-io/jetstream";
import { ensureStream, isNotFound, openJetStreamManager } from "../../lib/nats/jetstream.js";
import { valueSchema } from "../../lib/nats/kv-records.js";
import { streams, subjects } from "../../lib/nats/subjects.js";
import { continuesDelta, RESPONSE_DELTA_EVENTS, RESPONSE_TERMINAL_EVENTS, type ResponseEvent, type ResponseEventSink } from "../openai/mod.js";

/** A stored event: numbered, as the client receives it. */
export type NumberedEvent = ResponseEvent & { sequence_number: number };

/** Stored events are checked for what the log relies on (type, number); the rest is the event's own. */
const numberedEvent = valueSchema<NumberedEvent>()(
  Schema.StructWithRest(Schema.Struct({ type: Schema.String, sequence_number: Schema.Int }), [Schema.Record(Schema.String, Schema.Unknown)]),
);

/** Deltas produced within this window go out as one event (fewer JetStream writes per token). */
const COALESCE_MS = 25;
const RETENTION_NS = 24 * 3600 * 1_000_000_000;

/**
 * The stream events of background responses created with stream: true, one subject per
 * response in the JetStream stream `responseEvents`. The worker that runs the response writes
 * them as they happen; any gateway replays and follows them (the create request's own stream,
 * and GET /v1/responses/{id}?stream=true&starting_after=N), so a client that lost its
 * connection resumes where it was, from whichever gateway.
 */
export class ResponseEventLog {
  private constructor(private readonly nc: NatsConnection, private readonly js: JetStreamClient, private readonly jsm: JetStreamManager) {}

  static async open(nc: NatsConnection): Promise<ResponseEventLog> {
    const jsm = await openJetStreamManager(nc);
    await ensureStream(jsm, {
      name: streams.responseEvents,
      subjects: [subjects.responseEventsAll],
      retention: RetentionPolicy.Limits,
      storage: StorageType.File,
      max_age: RETENTION_NS,
    });
    return new ResponseEventLog(nc, jetstream(nc), jsm);
  }

  /** A sink numbering events from `firstSequence` and appending them to the response's log. */
  writer(responseId: string, firstSequence: number): EventLogWriter {
    return new EventLogWriter(this.js, subjects.responseEvents(responseId), firstSequence);
  }

  /** The sequence number the next event of the response gets. */
  async nextSequence(responseId: string): Promise<number> {
    const last = await this.last(responseId);
    return last ? last.sequence_number + 1 : 0;
  }

  async last(responseId: string): Promise<NumberedEvent | undefined> {
    try {
      const msg = await this.jsm.streams.getMessage(streams.responseEvents, { last_by_subj: subjects.responseEvents(responseId) });
      return msg ? numberedEvent.parseBytes(`${msg.subject} #${msg.seq}`, msg.data) : undefined;
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw err;
    }
  }

  /**
   * Delivers the response's events from the first one until a terminal event, or until
   * `signal` aborts (client gone). `onIdle` runs when nothing arrived for a while: it may end the
   * stream (a response cancelled before a worker took it has no worker to write its end); when
   * it throws, following stops and rejects with its error.
   */
  async follow(
    responseId: string,
    onEvent: (event: NumberedEvent) => void,
    options: { signal: AbortSignal; onIdle: () => Promise<boolean>; idleMs?: number },
  ): Promise<void> {
    const consumer = await this.js.consumers.get(streams.responseEvents, {
      // One subject as a string: a list needs nats-server 2.10.
      filter_subjects: subjects.responseEvents(responseId),
      deliver_policy: DeliverPolicy.All,
    });
    const messages = await consumer.consume({ max_messages: 256 });
    const stop = () => void messages.close();
    options.signal.addEventListener("abort", stop, { once: true });
    const idleMs = options.idleMs ?? 2_000;
    let lastAt = Date.now();
    let ended = false;
    let idleFailure: { err: unknown } | undefined;
    const idleTimer = setInterval(() => {
      if (ended || Date.now() - lastAt < idleMs) return;
      options.onIdle().then(
        (end) => {
          if (!end) return;
          ended = true;
          stop();
        },
        (err: unknown) => {
          idleFailure = { err };
          ended = true;
          stop();
        },
      );
    }, idleMs);
    try {
      for await (const msg of messages) {
        lastAt = Date.now();
        const event = numberedEvent.parseBytes(`${msg.subject} #${msg.seq}`, msg.data);
        onEvent(event);
        if (RESPONSE_TERMINAL_EVENTS.has(event.type)) break;
      }
    } finally {
      ended = true;
      clearInterval(idleTimer);
      options.signal.removeEventListener("abort", stop);
      await messages.close();
    }
    if (idleFailure) throw idleFailure.err;
  }

  /** Deletes the response's events (the response was deleted). */
  async purge(responseId: string): Promise<void> {
    await this.jsm.streams.purge(streams.responseEvents, { filter: subjects.responseEvents(responseId) }).catch(() => {});
  }

  get connection(): NatsConnection {
    return this.nc;
  }
}

/**
 * Appends events to one response's log in order: publishes are pipelined on one connection
 * (JetStream stores them in the order sent) and deltas within a short window are merged.
 */
export class EventLogWriter implements ResponseEventSink {
  private sequence: number;
  private pending: ResponseEvent | undefined;
  private timer: NodeJS.Timeout | undefined;
  private readonly acks: Array<Promise<PubAck>> = [];

  constructor(private readonly js: JetStreamClient, private readonly subject: string, firstSequence: number) {
    this.sequence = firstSequence;
  }

  event(event: ResponseEvent): void {
    const p = this.pending;
    if (p && continuesDelta(p, event)) {
      p.delta = (p.delta as string) + (event.delta as string);
      // A text delta's logprobs (when asked for) are its tokens': merged deltas keep them all.
      const more = event.logprobs as unknown[] | undefined;
      if (more?.length) p.logprobs = [...((p.logprobs as unknown[] | undefined) ?? []), ...more];
      return;
    }
    this.publishPending();
    if (RESPONSE_DELTA_EVENTS.has(event.type)) {
      this.pending = { ...event };
      this.timer = setTimeout(() => this.publishPending(), COALESCE_MS);
      return;
    }
    this.publish(event);
  }

  /** Resolves once every event is stored; rejects when JetStream refused one. */
  async flush(): Promise<void> {
    this.publishPending();
    await Promise.all(this.acks);
  }

  private publishPending(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    const p = this.pending;
    this.pending = undefined;
    if (p) this.publish(p);
  }

  private publish(event: ResponseEvent): void {
    const numbered = { ...event, sequence_number: this.sequence++ };
    const ack = this.js.publish(this.subject, JSON.stringify(numbered));
    ack.catch(() => {}); // reported by flush()
    this.acks.push(ack);
  }
}
