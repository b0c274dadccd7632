import type { NatsConnection, Subscription } from "@nats-io/transport-node";
import type { Logger } from "../../lib/log.js";
import { subjects } from "../../lib/nats/subjects.js";
import { AppRequestFrame, AppResponseFrames, type AppResponseFrame, type AppRequestHead, type HttpHeader } from "../../proto/gen/tributary/v1/apps.js";
import { AppHttpRequest, type AppConnectionPool } from "./app-http.js";

// The app host's side of HTTP exchanges carried over NATS (proto/tributary/v1/apps.proto): each
// request head opens an HTTP/1.1 request to the deployment's instance on its Unix socket (on a
// pooled keep-alive connection, app-http.ts); the
// request body goes in as the gateway sends it (credit returned once uvicorn took the bytes),
// the response goes back in frames within the credit the gateway grants (the app's response is
// paused when it runs out), so a slow client slows the app, never fills this process.

/**
 * Request body bytes the host grants when it accepts a head with a body. Nothing of the body is
 * sent before that grant, so an exchange the host refuses (no instance here) can be retried
 * elsewhere with the body untouched.
 */
export const REQUEST_WINDOW = 256 * 1024;
/** Response body bytes a gateway grants up front (it names it in the head). */
export const RESPONSE_WINDOW = 256 * 1024;
/** Largest body frame: well under NATS's default 1 MiB payload. */
export const MAX_FRAME_BYTES = 64 * 1024;
/** An exchange that hears nothing from its gateway this long (body or credit awaited) is dropped. */
const STALL_MS = 60_000;
/**
 * The failure code of an exchange refused because its instance already serves as many as it may.
 *
 * Refused at once rather than queued, as nginx's limit_conn and Envoy's circuit breakers do: a
 * queue here would hold the gateway's exchange, the client's connection and this host's memory
 * for a tenant already over its share (and the gateway's head timeout would turn long waits into
 * 504s anyway); an immediate 503 with Retry-After costs nothing and lets clients back off.
 */
export const INSTANCE_BUSY = "instance_busy";
/** The failure code of an exchange this host ends before the response head because it shuts down (the gateway may try another instance). */
export const HOST_STOPPING = "host_stopping";

/** Headers that describe one hop, not the message: never forwarded either way. */
export const HOP_HEADERS: ReadonlySet<string> = new Set(["connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade", "proxy-authorization", "proxy-authenticate"]);
/** Request headers the app never sees: the platform key that reached the hosted address stays with the platform. */
const WITHHELD_REQUEST_HEADERS: ReadonlySet<string> = new Set(["authorization"]);

/** A healthy instance of a deployment to send an exchange to; `release` when the exchange ended. */
export interface ExchangeTarget {
  socketPath: string;
  pool: AppConnectionPool;
  release(): void;
}

interface OpenExchange {
  id: string;
  reply: string;
  seq: number;
  credit: number;
  req: AppHttpRequest;
  headSeen: boolean;
  target: ExchangeTarget;
  lastHeard: number;
  done: boolean;
  /** Frames not yet published: sent together once this turn of the event loop is over. */
  outbox: AppResponseFrame[];
  /**
   * A small response of declared length, held until its body is complete: uvicorn writes head
   * and body separately, and the gateway writes a response that comes whole in one send.
   */
  held: { head: AppResponseFrame["frame"]; body: Buffer[] } | undefined;
}

export class AppExchangeServer {
  private readonly open = new Map<string, OpenExchange>();
  /** Exchanges in progress per instance (socket path), each bounded by `maxPerInstance`. */
  private readonly perInstance = new Map<string, number>();
  private readonly unsent = new Set<OpenExchange>();
  private flushScheduled = false;
  private subscription: Subscription | undefined;
  private sweepTimer: NodeJS.Timeout | undefined;

  constructor(
    private readonly nc: NatsConnection,
    private readonly hostId: string,
    /** The instance of a deployment here an exchange goes to (the one named, or any when ""; undefined: none that serves). */
    private readonly resolve: (deploymentId: string, instanceId: string) => ExchangeTarget | undefined,
    private readonly log: Logger,
    /** Exchanges one instance serves at once; those beyond are refused (INSTANCE_BUSY). */
    private readonly maxPerInstance: number,
  ) {}

  start(): void {
    this.subscription = this.nc.subscribe(subjects.appHostExchange(this.hostId), {
      callback: (err, msg) => {
        if (err) return;
        let frame: AppRequestFrame;
        try {
          frame = AppRequestFrame.decode(msg.data);
        } catch {
          return; // not a frame: nothing to answer it on
        }
        try {
          this.onFrame(frame);
        } catch (error) {
          this.log.error("app exchange frame failed", { exchangeId: frame.exchangeId, err: error });
        }
      },
    });
    this.sweepTimer = setInterval(() => this.sweep(), 5_000);
    this.sweepTimer.unref();
  }

  /** Exchanges in progress (all deployments). */
  get inFlight(): number {
    return this.open.size;
  }

  stop(): void {
    this.subscription?.unsubscribe();
    clearInterval(this.sweepTimer);
    for (const ex of this.open.values()) this.finish(ex, { code: ex.headSeen ? "instance_lost" : HOST_STOPPING, message: "the app host is shutting down" });
  }

  private onFrame(frame: AppRequestFrame): void {
    const kind = frame.frame;
    if (!kind) return;
    if (kind.$case === "head") return this.begin(frame.exchangeId, kind.value);
    const ex = this.open.get(frame.exchangeId);
    if (!ex) return;
    ex.lastHeard = performance.now();
    switch (kind.$case) {
      case "body": {
        const bytes = kind.value.length;
        ex.req.write(kind.value, () => {
          // In the kernel's hands (uvicorn reads it): the gateway may send as much again.
          if (!ex.done) this.send(ex, { $case: "credit", value: { bytes } });
        });
        return;
      }
      case "end":
        ex.req.end();
        return;
      case "credit":
        ex.credit += kind.value.bytes;
        if (ex.credit > 0 && ex.req.paused) ex.req.resume();
        return;
      case "cancel":
        this.finish(ex, undefined);
        return;
    }
  }

  private begin(id: string, head: AppRequestHead): void {
    if (!head.replySubject || this.open.has(id)) return;
    const target = this.resolve(head.deploymentId, head.instanceId);
    if (!target) return this.refuse(id, head.replySubject, "no_instance", "no healthy instance of the deployment on this host");
    const busy = this.perInstance.get(target.socketPath) ?? 0;
    if (busy >= this.maxPerInstance) {
      target.release();
      return this.refuse(id, head.replySubject, INSTANCE_BUSY, `the app is serving as many requests as it may at once (${this.maxPerInstance})`);
    }
    const headers: Array<[string, string]> = [];
    for (const h of head.headers) {
      const name = h.name.toLowerCase();
      if (!HOP_HEADERS.has(name) && !WITHHELD_REQUEST_HEADERS.has(name)) headers.push([name, Buffer.from(h.value.buffer, h.value.byteOffset, h.value.byteLength).toString("latin1")]);
    }
    const ex: OpenExchange = { id, reply: head.replySubject, seq: 0, credit: head.responseCredit, req: undefined!, headSeen: false, target, lastHeard: performance.now(), done: false, outbox: [], held: undefined };
    try {
      ex.req = new AppHttpRequest(target.pool, target.socketPath, head.method, head.target, headers, head.hasBody, {
        head: (status, raw) => this.respond(ex, status, raw),
        body: (chunk) => {
          if (ex.done) return;
          if (ex.held) return void ex.held.body.push(chunk);
          for (let at = 0; at < chunk.length; at += MAX_FRAME_BYTES) this.send(ex, { $case: "body", value: chunk.subarray(at, at + MAX_FRAME_BYTES) });
          ex.credit -= chunk.length;
          // Out of credit: the app's socket stops being read until the client takes what it has.
          if (ex.credit <= 0) ex.req.pause();
        },
        end: () => this.finish(ex, undefined, true),
        error: (err, afterHead) => this.finish(ex, { code: afterHead ? "instance_lost" : "app_error", message: `the app's connection failed: ${err.message}` }),
      });
    } catch (err) {
      // A head HTTP/1.1 cannot carry (a line break in a header value): nothing reached the app.
      target.release();
      return this.refuse(id, head.replySubject, "app_error", (err as Error).message);
    }
    this.open.set(id, ex);
    this.perInstance.set(target.socketPath, busy + 1);
    if (head.hasBody) this.send(ex, { $case: "credit", value: { bytes: REQUEST_WINDOW } });
  }

  /** An exchange ended before it began: its one frame, a failure. */
  private refuse(id: string, replySubject: string, code: string, message: string): void {
    const frame: AppResponseFrame = { exchangeId: id, seq: 1, frame: { $case: "failure", value: { code, message } } };
    this.nc.publish(replySubject, AppResponseFrames.encode({ frames: [frame] }).finish());
  }

  private respond(ex: OpenExchange, status: number, raw: Array<[string, string]>): void {
    ex.headSeen = true;
    const headers: HttpHeader[] = [];
    let length = -1;
    for (const [rawName, value] of raw) {
      const name = rawName.toLowerCase();
      // The gateway frames the body itself: the app's length and framing are one hop's.
      if (name === "content-length") length = Number(value);
      if (HOP_HEADERS.has(name) || name === "content-length") continue;
      headers.push({ name, value: Buffer.from(value, "latin1") });
    }
    const head: AppResponseFrame["frame"] = { $case: "head", value: { status, headers } };
    // At most one frame of body, whose length the app declared (the parser holds it to that).
    if (length > 0 && length <= MAX_FRAME_BYTES) ex.held = { head, body: [] };
    else this.send(ex, head);
  }

  private send(ex: OpenExchange, frame: AppResponseFrame["frame"]): void {
    ex.outbox.push({ exchangeId: ex.id, seq: ++ex.seq, frame });
    this.unsent.add(ex);
    if (!this.flushScheduled) {
      this.flushScheduled = true;
      setImmediate(() => this.flush());
    }
  }

  /** One message per exchange for what this turn produced (a small response: head, body and end together). */
  private flush(): void {
    this.flushScheduled = false;
    for (const ex of this.unsent) {
      this.nc.publish(ex.reply, AppResponseFrames.encode({ frames: ex.outbox }).finish());
      ex.outbox = [];
    }
    this.unsent.clear();
  }

  /** Ends an exchange once: its end or failure frame (none for a cancel), its connection, its slot. */
  private finish(ex: OpenExchange, failure: { code: string; message: string } | undefined, complete = false): void {
    if (ex.done) return;
    ex.done = true;
    this.open.delete(ex.id);
    const busy = (this.perInstance.get(ex.target.socketPath) ?? 1) - 1;
    if (busy > 0) this.perInstance.set(ex.target.socketPath, busy);
    else this.perInstance.delete(ex.target.socketPath);
    const held = ex.held;
    ex.held = undefined;
    if (complete && held) {
      this.send(ex, held.head);
      this.send(ex, { $case: "body", value: held.body.length === 1 ? held.body[0]! : Buffer.concat(held.body) });
    }
    if (complete) this.send(ex, { $case: "end", value: {} });
    else {
      if (failure) this.send(ex, { $case: "failure", value: failure });
      ex.req.destroy();
    }
    ex.target.release();
  }

  private sweep(): void {
    const now = performance.now();
    for (const ex of this.open.values())
      if (now - ex.lastHeard > STALL_MS && (!ex.headSeen ? !ex.req.requestEnded : ex.req.paused))
        this.finish(ex, { code: "instance_lost", message: "the gateway went silent" });
  }
}
