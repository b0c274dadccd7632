import type { NatsConnection, Subscription } from "@nats-io/transport-node";
import { randomToken } from "../../lib/ids.js";
import type { Logger } from "../../lib/log.js";
import { subjects } from "../../lib/nats/subjects.js";
import { AppRequestFrame, AppResponseFrames, type AppResponseFrame } from "../../proto/gen/tributary/v1/apps.js";
import { errors } from "../errors/mod.js";
import { MAX_FRAME_BYTES, RESPONSE_WINDOW } from "./exchange-host.js";

// The gateway's side of HTTP exchanges with hosted apps over NATS: sends the request head and
// body (within the host's credit), writes the response to the client as frames arrive, and
// grants the host more response credit only as the client's socket takes the bytes. A host that
// goes silent (its heartbeats stop), a sequence gap or a failure frame ends the exchange: a 502
// before the response head, a dropped connection after it.

/** Where a response goes (the gateway's HTTP exchange). */
export interface ResponseSink {
  readonly live: boolean;
  head(status: number, headers: Array<[string, string]>): void;
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
  method: string;
  /** Path and query. */
  target: string;
  headers: Array<[string, string]>;
  /** Undefined: no body. */
  body: AsyncIterable<Uint8Array> | undefined;
}

interface Pending {
  hostId: string;
  expectedSeq: number;
  headSeen: boolean;
  requestCredit: number;
  creditWaiter: (() => void) | undefined;
  onFrame(frame: AppResponseFrame): void;
  fail(code: string, message: string): void;
}

export interface AppExchangeClientOptions {
  /** Is the host alive (its heartbeats)? Checked every second for open exchanges. */
  hostAlive(hostId: string): boolean;
  /** Longest wait for the response head. */
  headTimeoutMs: number;
}

export class AppExchangeClient {
  private readonly pending = new Map<string, Pending>();
  private subscription: Subscription | undefined;
  private livenessTimer: NodeJS.Timeout | undefined;

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
        for (const frame of frames) {
          const p = this.pending.get(frame.exchangeId);
          if (!p) return;
          if (frame.seq !== p.expectedSeq) return p.fail("stream_interrupted", "frames of the app's response were lost on the way");
          p.expectedSeq++;
          try {
            p.onFrame(frame);
          } catch (error) {
            this.log.error("app response frame failed", { exchangeId: frame.exchangeId, err: error });
            p.fail("app_unavailable", "the app's response could not be relayed");
          }
        }
      },
    });
    this.livenessTimer = setInterval(() => {
      for (const p of this.pending.values()) if (!this.options.hostAlive(p.hostId)) p.fail("app_instance_lost", "the app's host stopped answering");
    }, 1_000);
    this.livenessTimer.unref();
  }

  stop(): void {
    this.subscription?.unsubscribe();
    clearInterval(this.livenessTimer);
  }

  /**
   * Runs one exchange. Resolves "done" once the response ended (or the client left), or
   * "no_instance" when the host serves no healthy instance of the deployment (nothing was sent
   * to the app: the caller may try another host). Throws AppUnavailable (a 502) or a deadline
   * before the response head; after it, a failure drops the client's connection.
   */
  exchange(request: AppExchangeRequest, sink: ResponseSink): Promise<"done" | "no_instance"> {
    const id = randomToken(16);
    const toHost = subjects.appHostExchange(request.hostId);
    const publish = (frame: AppRequestFrame["frame"]) => this.nc.publish(toHost, AppRequestFrame.encode({ exchangeId: id, frame }).finish());
    return new Promise<"done" | "no_instance">((resolve, reject) => {
      let settled = false;
      let owedCredit = 0;
      let creditInFlight = false;
      const headTimer = setTimeout(() => p.fail("timeout", `the app did not answer within ${this.options.headTimeoutMs} ms`), this.options.headTimeoutMs);
      const settle = (outcome: "done" | "no_instance" | Error, tellHost: boolean) => {
        if (settled) return;
        settled = true;
        clearTimeout(headTimer);
        this.pending.delete(id);
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
      const p: Pending = {
        hostId: request.hostId,
        expectedSeq: 1,
        headSeen: false,
        // Nothing of the body goes before the host accepted the head (its first credit).
        requestCredit: 0,
        creditWaiter: undefined,
        fail: (code, message) => {
          if (settled) return;
          if (!p.headSeen) {
            if (code === "no_instance") return settle("no_instance", false);
            return settle(code === "timeout" ? errors.deadline(message) : errors.appUnavailable(message, code === "app_error" ? "app_unavailable" : code), true);
          }
          sink.abort();
          settle("done", true);
        },
        onFrame: (frame) => {
          const kind = frame.frame;
          if (!kind || settled) return;
          switch (kind.$case) {
            case "head": {
              p.headSeen = true;
              clearTimeout(headTimer);
              sink.head(kind.value.status, kind.value.headers.map((h) => [h.name, Buffer.from(h.value).toString("latin1")]));
              return;
            }
            case "body": {
              if (!sink.live) return settle("done", true);
              const bytes = kind.value.length;
              if (sink.write(kind.value)) return grant(bytes);
              // The client is behind: the host gets this credit back once the socket drained.
              creditInFlight = true;
              void sink.writable().then(() => {
                creditInFlight = false;
                grant(bytes);
              });
              return;
            }
            case "end":
              void (creditInFlight ? sink.writable() : Promise.resolve()).then(() => sink.end());
              return settle("done", false);
            case "credit":
              p.requestCredit += kind.value.bytes;
              p.creditWaiter?.();
              return;
            case "failure":
              return p.fail(kind.value.code === "no_instance" ? "no_instance" : kind.value.code === "instance_lost" ? "app_instance_lost" : "app_error", `the app failed: ${kind.value.message}`);
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
