import type { NatsConnection, Subscription } from "@nats-io/transport-node";
import { randomToken } from "../../lib/ids.js";
import type { Logger } from "../../lib/log.js";
import { subjects } from "../../lib/nats/subjects.js";
import { AppRequestFrame, AppResponseFrames, type AppResponseFrame, type AppResponseHead } from "../../proto/gen/tributary/v1/apps.js";
import { errors } from "../errors/mod.js";
import { HOST_STOPPING, INSTANCE_BUSY, MAX_FRAME_BYTES, RESPONSE_WINDOW } from "./exchange-host.js";

// The gateway's side of HTTP exchanges with hosted apps over NATS: sends the request head and
// body (within the host's credit), writes the response to the client as frames arrive, and
// grants the host more response credit only as the client's socket takes the bytes. A host that
// goes silent (its heartbeats stop) or shuts down before the response head ends the exchange as
// `lost` (the balancer may try another instance); a sequence gap or a failure frame is a 502
// before the response head; after it, any failure drops the connection.

/** Where a response goes (the gateway's HTTP exchange). */
export interface ResponseSink {
  readonly live: boolean;
  head(status: number, headers: Array<[string, string]>): void;
  /** A whole response at once (head, body and end arrived together): one write, length-framed. */
  whole(status: number, headers: Array<[string, string]>, body: Uint8Array): void;
  /** Runs `fn` so that what it writes to the client goes out together. */
  batch(fn: () => void): void;
  /** False when the client's socket is behind: more is written only after `writable()`. */
  write(chunk: Uint8Array): boolean;
  /** Resolves once the socket caught up (or the client left). */
  writable(): Promise<void>;
  end(): void;
  /** Drops the connection (a response that cannot be completed). */
  abort(): void;
  /** Registers what to do when the client leaves. */
  onGone(handler: () => void): void;
}

export interface AppExchangeRequest {
  hostId: string;
  deploymentId: string;
  /** The instance on that host ("": any that serves the deployment). */
  instanceId: string;
  method: string;
  /** Path and query. */
  target: string;
  headers: Array<[string, string]>;
  /** Undefined: no body. */
  body: AsyncIterable<Uint8Array> | undefined;
  /** The deployment's: the wait for the response head (from now), and between frames of its body. */
  timeouts: { requestMs: number; idleMs: number };
}

/**
 * How an exchange ended, when it did not throw:
 * - done: the response ended (or the client left);
 * - refused: the host serves no such instance; nothing of the request reached the app;
 * - lost_unaccepted: the instance's host went silent or shut down before it took the request
 *   (a request with a body: the host never granted credit, so the app cannot have seen it);
 * - lost: its host went silent or shut down before the response head, after it may have taken
 *   the request (the app may have begun it).
 */
export type ExchangeOutcome = "done" | "refused" | "lost_unaccepted" | "lost";

/** An exchange's host went silent (its heartbeats stopped). */
const HOST_LOST = "host_lost";
/**
 * A response head that comes alone is held back until its first body bytes (or its end), or,
 * for a response whose body is slow to come (a stream's first event), until the host has been
 * heard from after it (checked every HEAD_HOLD_MS; heartbeats come every second). Until it goes,
 * the client has nothing of the response, so an exchange whose host is lost meanwhile can still
 * be sent to another instance, or answered with a clean 502: a host killed between uvicorn's
 * head and its body (two writes, apart by as much as the app's CPU quota stalls it) loses no
 * request. A stream whose first event comes late gets its head up to a heartbeat later.
 */
export const HEAD_HOLD_MS = 250;

interface Pending {
  hostId: string;
  /** The host answered something (credit, a head): it took the request. */
  accepted: boolean;
  timeouts: AppExchangeRequest["timeouts"];
  /** When the response head is overdue (performance.now() ms); checked with the hosts' liveness. */
  headDeadline: number;
  /**
   * When the response body last moved (performance.now() ms): a frame came, or the client took
   * what it was behind on. Undefined while the gateway waits on the client (the host has no
   * credit then, so the app's silence is not the app's).
   */
  lastMoved: number | undefined;
  expectedSeq: number;
  /** The host sent the response head. */
  headSeen: boolean;
  /** The client has it: the response began (past this, a failure drops the connection). */
  headSent: boolean;
  /** A head held back (HEAD_HOLD_MS) until its first body bytes, when it came, and its timer. */
  heldHead: AppResponseHead | undefined;
  headAt: number;
  headTimer: NodeJS.Timeout | undefined;
  requestCredit: number;
  creditWaiter: (() => void) | undefined;
  onFrame(frame: AppResponseFrame): void;
  /** A response whose head, body and end came in one message. */
  onWhole(head: AppResponseHead, body: Uint8Array): void;
  sink: ResponseSink;
  fail(code: string, message: string): void;
}

export interface AppExchangeClientOptions {
  /** Is the host alive (its heartbeats)? Checked every second for open exchanges, with their timeouts. */
  hostAlive(hostId: string): boolean;
  /** Was the host heard from after `since` (performance.now() ms)? */
  hostHeardSince(hostId: string, since: number): boolean;
}

export class AppExchangeClient {
  private readonly pending = new Map<string, Pending>();
  private subscription: Subscription | undefined;
  private livenessTimer: NodeJS.Timeout | undefined;
  /** Request frames not yet published: sent together once this turn of the event loop is over. */
  private outbox: Array<{ subject: string; data: Uint8Array }> = [];
  private flushScheduled = false;

  constructor(
    private readonly nc: NatsConnection,
    private readonly gatewayId: string,
    private readonly options: AppExchangeClientOptions,
    private readonly log: Logger,
  ) {}

  start(): void {
    this.subscription = this.nc.subscribe(subjects.appReplyWildcard(this.gatewayId), {
      callback: (err, msg) => {
        if (err) return;
        let frames: AppResponseFrame[];
        try {
          frames = AppResponseFrames.decode(msg.data).frames;
        } catch {
          return;
        }
        const first = frames[0];
        if (!first) return;
        const p = this.pending.get(first.exchangeId);
        if (!p) return;
        p.accepted = true;
        // The host sends one exchange's frames per message: a small response is head, body and
        // end at once, written to the client whole; anything else frame by frame, in one write.
        if (frames.length >= 2 && this.whole(p, frames)) return;
        p.sink.batch(() => {
          for (const frame of frames) {
            const q = frame.exchangeId === first.exchangeId ? p : this.pending.get(frame.exchangeId);
            if (!q) return;
            try {
              if (frame.seq !== q.expectedSeq) return q.fail("stream_interrupted", "frames of the app's response were lost on the way");
              q.expectedSeq++;
              q.onFrame(frame);
            } catch (error) {
              // Nothing may throw out of here: this runs inside the HTTP server's write batch.
              this.log.error("app response frame failed", { exchangeId: frame.exchangeId, err: error });
              q.fail("app_unavailable", "the app's response could not be relayed");
            }
          }
        });
      },
    });
    this.livenessTimer = setInterval(() => {
      const now = performance.now();
      for (const p of this.pending.values()) {
        if (!this.options.hostAlive(p.hostId)) p.fail(HOST_LOST, "the app's host stopped answering");
        else if (!p.headSeen && now > p.headDeadline) p.fail("app_timeout", `The app did not answer within ${seconds(p.timeouts.requestMs)} (the deployment's timeouts.request_seconds).`);
        else if (p.headSeen && p.lastMoved !== undefined && now - p.lastMoved > p.timeouts.idleMs) p.fail("app_idle", `the app sent nothing for ${seconds(p.timeouts.idleMs)}`);
      }
    }, 1_000);
    this.livenessTimer.unref();
  }

  /** Frames [head, body..., end] of one exchange, in sequence: the response is written whole. */
  private whole(p: Pending, frames: AppResponseFrame[]): boolean {
    const head = frames[0]!;
    const last = frames[frames.length - 1]!;
    if (head.frame?.$case !== "head" || last.frame?.$case !== "end" || head.seq !== p.expectedSeq || p.headSeen) return false;
    const bodies: Uint8Array[] = [];
    for (let i = 1; i < frames.length - 1; i++) {
      const f = frames[i]!;
      if (f.frame?.$case !== "body" || f.exchangeId !== head.exchangeId || f.seq !== head.seq + i) return false;
      bodies.push(f.frame.value);
    }
    if (last.exchangeId !== head.exchangeId || last.seq !== head.seq + frames.length - 1) return false;
    p.expectedSeq = last.seq + 1;
    try {
      p.onWhole(head.frame.value, bodies.length === 1 ? bodies[0]! : Buffer.concat(bodies));
    } catch (error) {
      this.log.error("app response failed", { exchangeId: head.exchangeId, err: error });
      p.fail("app_unavailable", "the app's response could not be relayed");
    }
    return true;
  }

  /** Queues a request frame; all queued this turn go to NATS together (one socket write). */
  private publish(subject: string, data: Uint8Array): void {
    this.outbox.push({ subject, data });
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    setImmediate(() => {
      this.flushScheduled = false;
      const out = this.outbox;
      this.outbox = [];
      for (const m of out) this.nc.publish(m.subject, m.data);
    });
  }

  stop(): void {
    this.subscription?.unsubscribe();
    clearInterval(this.livenessTimer);
  }

  /**
   * Runs one exchange to the instance named. Resolves how it ended (ExchangeOutcome: the caller
   * may try another instance unless it is "done"). Throws AppUnavailable (a 502: the app's own
   * failure), AppOverloaded or a deadline before the response head; after it, a failure drops
   * the client's connection.
   */
  exchange(request: AppExchangeRequest, sink: ResponseSink): Promise<ExchangeOutcome> {
    const id = randomToken(16);
    const toHost = subjects.appHostExchange(request.hostId);
    const publish = (frame: AppRequestFrame["frame"]) => this.publish(toHost, AppRequestFrame.encode({ exchangeId: id, frame }).finish());
    return new Promise<ExchangeOutcome>((resolve, reject) => {
      let settled = false;
      let owedCredit = 0;
      let creditInFlight = false;
      const settle = (outcome: ExchangeOutcome | Error, tellHost: boolean) => {
        if (settled) return;
        settled = true;
        this.pending.delete(id);
        clearTimeout(p.headTimer);
        p.creditWaiter?.();
        if (tellHost) publish({ $case: "cancel", value: {} });
        if (outcome instanceof Error) reject(outcome);
        else resolve(outcome);
      };
      // Credit goes back in batches: a frame per quarter window, not per chunk.
      const grant = (bytes: number) => {
        owedCredit += bytes;
        if (owedCredit >= RESPONSE_WINDOW / 4 && !settled) {
          publish({ $case: "credit", value: { bytes: owedCredit } });
          owedCredit = 0;
        }
      };
      /** The held head goes to the client (once). */
      const sendHead = () => {
        const head = p.heldHead;
        if (!head) return;
        p.heldHead = undefined;
        clearTimeout(p.headTimer);
        p.headSent = true;
        sink.head(head.status, headerPairs(head));
      };
      const p: Pending = {
        hostId: request.hostId,
        accepted: false,
        timeouts: request.timeouts,
        headDeadline: performance.now() + request.timeouts.requestMs,
        lastMoved: undefined,
        sink,
        expectedSeq: 1,
        headSeen: false,
        headSent: false,
        heldHead: undefined,
        headAt: 0,
        headTimer: undefined,
        // Nothing of the body goes before the host accepted the head (its first credit).
        requestCredit: 0,
        creditWaiter: undefined,
        fail: (code, message) => {
          if (settled) return;
          if (!p.headSent) {
            if (code === "no_instance") return settle("refused", false);
            if (code === HOST_LOST || code === HOST_STOPPING) return settle(p.accepted || request.body === undefined ? "lost" : "lost_unaccepted", true);
            if (code === "app_overloaded") return settle(errors.appOverloaded(message), false);
            return settle(code === "app_timeout" ? errors.deadline(message, "app_timeout") : errors.appUnavailable(message, code === "app_error" ? "app_unavailable" : code), true);
          }
          if (code === "app_idle") this.log.info("app response cut off", { hostId: p.hostId, reason: message });
          sink.abort();
          settle("done", true);
        },
        onWhole: (head, body) => {
          if (settled) return;
          p.headSeen = true;
          p.headSent = true;
          sink.whole(head.status, headerPairs(head), body);
          settle("done", false);
        },
        onFrame: (frame) => {
          const kind = frame.frame;
          if (!kind || settled) return;
          switch (kind.$case) {
            case "head": {
              p.headSeen = true;
              p.heldHead = kind.value;
              p.headAt = performance.now();
              p.lastMoved = p.headAt;
              const check = () => {
                if (settled || !p.heldHead) return;
                if (this.options.hostHeardSince(p.hostId, p.headAt)) sink.batch(sendHead);
                else p.headTimer = setTimeout(check, HEAD_HOLD_MS);
              };
              p.headTimer = setTimeout(check, HEAD_HOLD_MS);
              return;
            }
            case "body": {
              if (!sink.live) return settle("done", true);
              sendHead();
              const bytes = kind.value.length;
              if (sink.write(kind.value)) {
                if (!creditInFlight) p.lastMoved = performance.now();
                return grant(bytes);
              }
              // The client is behind: the host gets this credit back once the socket drained.
              creditInFlight = true;
              p.lastMoved = undefined;
              void sink.writable().then(() => {
                creditInFlight = false;
                p.lastMoved = performance.now();
                grant(bytes);
              });
              return;
            }
            case "end":
              sendHead();
              void (creditInFlight ? sink.writable() : Promise.resolve()).then(() => sink.end());
              return settle("done", false);
            case "credit":
              p.requestCredit += kind.value.bytes;
              p.creditWaiter?.();
              return;
            case "failure":
              if (kind.value.code === INSTANCE_BUSY) return p.fail("app_overloaded", `The app is overloaded: ${kind.value.message}. Please retry after a short wait.`);
              if (kind.value.code === "no_instance" || kind.value.code === HOST_STOPPING) return p.fail(kind.value.code, kind.value.message);
              return p.fail(kind.value.code === "instance_lost" ? "app_instance_lost" : "app_error", `the app failed: ${kind.value.message}`);
          }
        },
      };
      this.pending.set(id, p);
      sink.onGone(() => settle("done", true));
      const replySubject = subjects.appReply(this.gatewayId, id);
      publish({
        $case: "head",
        value: {
          deploymentId: request.deploymentId,
          instanceId: request.instanceId,
          method: request.method,
          target: request.target,
          headers: request.headers.map(([name, value]) => ({ name, value: Buffer.from(value, "latin1") })),
          replySubject,
          responseCredit: RESPONSE_WINDOW,
          hasBody: request.body !== undefined,
        },
      });
      if (request.body) void this.sendBody(request.body, p, publish, () => settled).catch((err) => settle(err instanceof Error ? err : errors.internal(err), true));
    });
  }

  /** The request body, within the host's credit: the client's reads wait while the host is behind. */
  private async sendBody(body: AsyncIterable<Uint8Array>, p: Pending, publish: (frame: AppRequestFrame["frame"]) => void, over: () => boolean): Promise<void> {
    const waitCredit = async (bytes: number) => {
      while (p.requestCredit < bytes && !over()) await new Promise<void>((resolve) => (p.creditWaiter = resolve));
      p.creditWaiter = undefined;
    };
    const chunks = body[Symbol.asyncIterator]();
    for (;;) {
      // No read of the client's body before there is credit to send some of it.
      await waitCredit(1);
      if (over()) return void (await chunks.return?.());
      const next = await chunks.next();
      if (next.done) break;
      for (let at = 0; at < next.value.length; at += MAX_FRAME_BYTES) {
        const piece = next.value.subarray(at, at + MAX_FRAME_BYTES);
        await waitCredit(piece.length);
        if (over()) return void (await chunks.return?.());
        p.requestCredit -= piece.length;
        publish({ $case: "body", value: piece });
      }
    }
    if (!over()) publish({ $case: "end", value: {} });
  }
}

/** A duration for an error message: "1 s", "300 s", "1.5 s". */
const seconds = (ms: number) => `${ms / 1000} s`;

/** Header values are bytes on the wire (latin1 text here): read in place, not copied. */
function headerPairs(head: AppResponseHead): Array<[string, string]> {
  return head.headers.map((h) => [h.name, Buffer.from(h.value.buffer, h.value.byteOffset, h.value.byteLength).toString("latin1")]);
}
