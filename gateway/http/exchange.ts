import type { HttpRequest, HttpResponse } from "uWebSockets.js";
import { newId } from "../../lib/ids.js";
import type { Logger } from "../../lib/log.js";
import { Cancelled, errors, type DomainError } from "../../modules/errors/mod.js";
import { openAIError } from "../../modules/openai/mod.js";
import { BodyReader } from "./body-reader.js";
import type { RequestObservation } from "../../modules/traces/mod.js";
import type { Principal } from "../../modules/accounts/mod.js";
import { answerEnding, closesConnection, heldConnections, LINGER_MS, relayedEnding, tryHoldConnection, type AnswerEnding } from "./connection-ending.js";
import { headViolation, repeatsSingleHeader } from "./head-checks.js";
import { statusLine } from "./status-line.js";

/** The edge's limits on one request (lib/config.ts documents them). */
export interface ExchangeLimits {
  maxHeaderBytes: number;
  maxHeaders: number;
  /** A body (other than an upload) must have arrived this long after the head; 0: no limit. */
  bodyTimeoutMs: number;
  /**
   * After an answer sent before the body was read (a 401, a 404, an early error, a 413 for a
   * declared length), a rest of at most this many bytes is read and dropped before the
   * connection ends (the answer says `Connection: close`, or is sent once the rest is in when it
   * closes the connection), so the client is never reset while it still sends. A larger or
   * unknown rest is not read at all: reading stops, the answer goes out with `Connection: close`,
   * and the connection ends when the client closes it or at uWS's 10 s timeout, whichever comes
   * first (`holdUnread`).
   */
  drainBodyBytes: number;
  /**
   * Connections held unread at once; past it, such an answer closes its connection at once (and a
   * client still sending may lose it to the reset). Each held connection keeps up to its socket's
   * receive buffer of unread input in the kernel, which nothing else bounds.
   */
  maxHeldConnections: number;
}

/**
 * One HTTP request and its response over uWebSockets.js.
 *
 * uWS's rules, which every path here keeps: an abort handler is attached before the route
 * handler returns; the request object only lives during that synchronous call (everything
 * needed later is captured here); the response may not be touched once it ended or was aborted
 * (uWS.js throws from inside its native callback, which would take the process down), so every
 * use of it goes through this class and checks `live` first; writes after an await are corked;
 * and the callbacks handed to uWS never throw.
 */
export class HttpExchange {
  readonly method: string;
  readonly path: string;
  readonly query: string;
  /** The URL's path exactly as sent (a trailing slash kept): what a hosted app gets. */
  readonly rawPath: string;
  readonly headers: Record<string, string> = {};
  /** The client's IP address, as text. */
  readonly remoteAddress: string;
  readonly requestId = newId("req_");
  readonly startedAt = performance.now();
  principal: Principal | undefined;
  /** Streamed responses in progress in this process (a metric). */
  static openStreams = 0;
  /** Connections answered with their request body still arriving, held unread until uWS closes them (an upper bound). */
  static get heldConnections(): number {
    return heldConnections();
  }
  private streaming = false;
  /** The HTTP status sent (200 for a stream), 0 before an answer. */
  statusCode = 0;
  /** What the inference route recorded about this request (usage, metrics, its trace). */
  observation: RequestObservation | undefined;
  /** The route pattern that matched (a metrics label: bounded, unlike the path). */
  route = "";
  /** The body as read by readJson, kept until a route takes it for a trace (`takeRawBody`). */
  private rawBody: Buffer | undefined;
  /** Headers added to whatever response goes out (request id, rate limits, ...). */
  readonly responseHeaders: Record<string, string> = {};
  /**
   * Set when the head is over the header limits (a 431) or can be read more than one way (a
   * 400, AmbiguousRequest): the server refuses it (`refuseHead`) before any route runs.
   */
  readonly headViolation: DomainError | undefined;
  private state: "open" | "ended" | "aborted" = "open";
  private respondedFlag = false;
  private readonly abortHandlers: Array<() => void> = [];
  private readonly body: BodyReader | undefined;
  private bodyTimer: NodeJS.Timeout | undefined;
  private markFinished!: () => void;
  /** Resolves when the response has been fully written, or the client left. */
  readonly finished = new Promise<void>((resolve) => (this.markFinished = resolve));

  constructor(private readonly res: HttpResponse, req: HttpRequest, private readonly limits: ExchangeLimits, private readonly log: Logger) {
    res.onAborted(() => this.guard("onAborted", () => this.aborted_()));
    this.method = req.getCaseSensitiveMethod().toUpperCase();
    const url = req.getUrl();
    this.rawPath = url;
    this.path = url.length > 1 && url.endsWith("/") ? url.slice(0, -1) : url;
    this.query = req.getQuery() ?? "";
    let count = 0;
    let bytes = this.method.length + url.length + this.query.length + 12; // "GET /?q HTTP/1.1\r\n"
    let repeated: string | undefined;
    const headers = this.headers;
    req.forEach((k, v) => {
      count++;
      bytes += k.length + v.length + 4; // ": " and CRLF
      // uWS gives names in lower case. Another repeated header keeps its last value.
      if (repeatsSingleHeader(headers, k)) repeated ??= k;
      headers[k] = v;
    });
    this.headViolation = headViolation(headers, { count, bytes, repeated }, limits);
    this.remoteAddress = Buffer.from(res.getRemoteAddressAsText()).toString();
    // A refused head's body is never read (an ambiguous one's framing is what is in doubt).
    if (!this.headViolation && (this.method === "POST" || this.method === "PUT" || this.method === "PATCH")) {
      // headViolation() let through no Content-Length (a chunked body, or none) or 1 to 9 digits.
      const contentLength = headers["content-length"];
      const declared = contentLength === undefined ? undefined : Number(contentLength);
      const body = new BodyReader({ pause: () => this.live && res.pause(), resume: () => this.live && res.resume() }, declared);
      this.body = body;
      res.onData((chunk, isLast) => this.guard("onData", () => body.push(chunk, isLast)));
      if (limits.bodyTimeoutMs > 0 && declared !== 0) {
        this.bodyTimer = setTimeout(() => this.bodyTimedOut(), limits.bodyTimeoutMs);
        body.onComplete(() => clearTimeout(this.bodyTimer));
      }
    }
    this.responseHeaders["x-request-id"] = this.requestId;
  }

  /** The response can still be written (it neither ended nor was aborted). */
  get live(): boolean {
    return this.state === "open";
  }

  get aborted(): boolean {
    return this.state === "aborted";
  }

  /** Status and headers went out (a full answer, or the start of a stream). */
  get responded(): boolean {
    return this.respondedFlag;
  }

  /** Runs when the client disconnects before the response completed. */
  onAbort(handler: () => void): void {
    if (this.state === "aborted") handler();
    else this.abortHandlers.push(handler);
  }

  searchParams(): URLSearchParams {
    return new URLSearchParams(this.query);
  }

  /** Reads the whole body, refusing more than `limit` bytes with a 413. */
  readBody(limit: number): Promise<Buffer> {
    this.checkDeclaredLength(limit);
    if (!this.body) return Promise.resolve(Buffer.alloc(0));
    return this.body.readAll(limit, () => errors.bodyTooLarge(limit));
  }

  /**
   * The body as a stream of chunks (uploads), refusing more than `limit` bytes with a 413.
   * Uploads are exempt from the body timeout: they may take long, and uWS drops a client that
   * sends slower than 16 KiB/s anyway.
   */
  bodyChunks(limit: number): AsyncGenerator<Buffer> {
    this.checkDeclaredLength(limit);
    clearTimeout(this.bodyTimer);
    if (!this.body) return (async function* () {})();
    return this.body.chunksUpTo(limit, () => errors.bodyTooLarge(limit));
  }

  private checkDeclaredLength(limit: number): void {
    if ((this.body?.declaredLength ?? 0) > limit) throw errors.bodyTooLarge(limit);
  }

  /**
   * Parses a JSON body; malformed JSON is a 400. The content type is not checked: curl's -d sends
   * form encoding by default, and the body is JSON or it is an error either way.
   */
  async readJson(limit: number): Promise<unknown> {
    const body = await this.readBody(limit);
    this.rawBody = body;
    if (body.length === 0) throw errors.invalidJson("The body is empty.");
    try {
      return JSON.parse(body.toString("utf8"));
    } catch (err) {
      throw errors.invalidJson((err as Error).message);
    }
  }

  /** The raw JSON body read last, once (a trace records it); later calls get undefined. */
  takeRawBody(): Buffer | undefined {
    const body = this.rawBody;
    this.rawBody = undefined;
    return body;
  }

  json(status: number, body: unknown, closeConnection = false): void {
    this.send(status, JSON.stringify(body), "application/json", closeConnection);
  }

  /**
   * Refuses the head's violation (before any route runs): a 431 or a 400 ambiguous_request, each
   * an answer that closes the connection, so it goes out once uWS is done with the bytes it read
   * along with the head (`writeClosing`), and nothing behind it on the connection is dispatched.
   */
  refuseHead(): void {
    if (this.headViolation) this.error(this.headViolation);
  }

  /** Answers with the OpenAI error for `err`: the one place a domain error becomes HTTP. */
  error(err: DomainError, options: { closeConnection?: boolean } = {}): void {
    const { status, body, headers } = openAIError(err, this.requestId);
    for (const k in headers) this.responseHeaders[k] = headers[k]!;
    const closeConnection = options.closeConnection ?? closesConnection(err);
    // Only a body over the limit is still being sent by a client that is waiting for its answer;
    // one that timed out, or a head refused, has nothing worth waiting for.
    this.send(status, JSON.stringify(body), "application/json", closeConnection, err._tag === "TooLarge");
  }

  /** `lingerOnClose`: an answer that closes the connection first takes a rest small enough to drain. */
  send(status: number, body: string | Buffer, contentType: string, closeConnection = false, lingerOnClose = false): void {
    if (!this.live || this.respondedFlag) return;
    this.respondedFlag = true;
    this.statusCode = status;
    const ending = this.settleBody(closeConnection, lingerOnClose);
    if (ending === "linger") return this.sendOnceBodyEnds(status, body, contentType);
    if (ending === "hold") return this.holdUnread(status, body, contentType);
    if (ending === "close") return this.writeClosing(status, body, contentType);
    this.writeWhole(status, body, contentType, ending);
  }

  /**
   * An answer while a rest too large to drain (or of unknown length) is still arriving. Closing
   * now would reset a client that is still writing, and the reset can destroy the answer before
   * the client reads it (Node's net, for one, drops a socket whose write fails, unread input and
   * all). Draining could go on for as long as the client sends. So reading stops instead: the
   * client's writes stall on TCP flow control while it can still read; the answer says
   * `Connection: close`; uWS closes the connection at its 10 s timeout (armed by the answer) unless
   * the client closed it first. A held connection costs a descriptor and what its kernel receive
   * buffer holds, for at most 12 s, and no reading; maxHeldConnections bounds how many there are.
   * The answer goes out outside uWS's callbacks, as writeClosing's does.
   */
  private holdUnread(status: number, body: string | Buffer, contentType: string): void {
    setImmediate(() =>
      this.guard("writing an answer that holds the rest unread", () => {
        if (this.live) this.writeWhole(status, body, contentType, "drain");
      }),
    );
  }

  /**
   * Stops reading the connection for good (uWS closes it at the timeout the answer arms), unless
   * maxHeldConnections are held already: false then, and the caller closes with its answer.
   */
  private readonly holdConnection = (): boolean => {
    if (!tryHoldConnection(this.limits.maxHeldConnections)) return false;
    this.res.pause();
    return true;
  };

  /**
   * Writes an answer that closes the connection once uWS is done with the bytes it read along
   * with the request. Written inside uWS's callbacks (the request's, a body chunk's, or a
   * microtask after either, which still runs inside them), the answer would only be corked, and
   * uWS would go on to dispatch any request it finds behind it in the same read, running its
   * route and answering it on a connection meant to close. While this request is unanswered,
   * uWS instead closes the connection on such a request, without either answer (uWS 20.30
   * drops what is corked for a connection it closes, so no answer can go out first). The answer
   * goes out from setImmediate, the first moment outside; from elsewhere (a timer, after an
   * await), a tick late. Only closing answers pay for this: a closure and an immediate.
   */
  private writeClosing(status: number, body: string | Buffer, contentType: string): void {
    setImmediate(() =>
      this.guard("writing a closing answer", () => {
        if (this.live) this.writeWhole(status, body, contentType, "close");
      }),
    );
  }

  /**
   * An answer that closes the connection while the client is still sending a rest small enough
   * to take: the rest is read and dropped first, then the answer goes out and the connection
   * closes. Closing on a socket with unread input makes the kernel send a reset, and a client
   * still writing (Node's http, undici, curl) then loses an answer it had already received.
   */
  private sendOnceBodyEnds(status: number, body: string | Buffer, contentType: string): void {
    const answer = () => {
      clearTimeout(timer);
      // Usually inside uWS's body callback, which may have read a request behind the body.
      this.writeClosing(status, body, contentType);
    };
    const timer = setTimeout(answer, this.limits.bodyTimeoutMs > 0 ? this.limits.bodyTimeoutMs : LINGER_MS);
    this.body!.onComplete(answer);
  }

  private writeWhole(status: number, body: string | Buffer, contentType: string, ending: "keep" | "drain" | "close"): void {
    this.res.cork(() => {
      this.res.writeStatus(statusLine(status));
      this.res.writeHeader("content-type", contentType);
      this.writeResponseHeaders();
      if (ending === "drain") this.res.writeHeader("connection", "close");
      this.res.end(body, ending === "close");
    });
    this.ended();
  }

  /** Writes status and headers of a streamed response (and its first bytes); the caller writes the rest. */
  beginStream(contentType: string, first?: string | Uint8Array): boolean {
    if (!this.live || this.respondedFlag) return false;
    this.respondedFlag = true;
    this.statusCode = 200;
    this.streaming = true;
    HttpExchange.openStreams++;
    let ok = true;
    this.res.cork(() => {
      this.res.writeStatus(statusLine(200));
      this.res.writeHeader("content-type", contentType);
      this.res.writeHeader("cache-control", "no-cache");
      this.writeResponseHeaders();
      if (first !== undefined) ok = this.res.write(first);
    });
    return ok;
  }

  /**
   * Writes the status and headers of a relayed response (a hosted app's), whose body follows
   * with write() and endStream(). The body is always sent chunked: the app's framing is its hop's.
   */
  beginRelayed(status: number, headers: ReadonlyArray<readonly [string, string]>): boolean {
    if (!this.live || this.respondedFlag) return false;
    this.respondedFlag = true;
    this.statusCode = status;
    this.streaming = true;
    HttpExchange.openStreams++;
    this.res.cork(() => {
      this.res.writeStatus(statusLine(status));
      for (const [name, value] of headers) this.res.writeHeader(name, value);
      this.writeResponseHeaders();
    });
    return true;
  }

  /**
   * A relayed response that arrived whole (head, body and end in one message): status, headers
   * and body in one write, framed by its length rather than chunked.
   */
  relayWhole(status: number, headers: ReadonlyArray<readonly [string, string]>, body: Uint8Array): void {
    if (!this.live || this.respondedFlag) return;
    this.respondedFlag = true;
    this.statusCode = status;
    const rest = this.settleRelayedRest();
    this.res.cork(() => {
      this.res.writeStatus(statusLine(status));
      for (const [name, value] of headers) this.res.writeHeader(name, value);
      this.writeResponseHeaders();
      if (rest !== "keep") this.res.writeHeader("connection", "close");
      this.res.end(body, rest === "close");
    });
    this.ended();
  }

  /** Runs `fn` with the response corked: what it writes goes out in one send. */
  corked(fn: () => void): void {
    if (!this.live) return fn();
    this.res.cork(fn);
  }

  /** Writes part of a streamed response; false when the socket is behind (wait for onWritable). */
  write(chunk: string | Uint8Array): boolean {
    if (!this.live) return false;
    // The hot path of every stream (a write per token): no closure per call.
    this.corkedChunk = chunk;
    this.res.cork(this.writeCorked);
    this.corkedChunk = "";
    return this.corkedOk;
  }

  private corkedChunk: string | Uint8Array = "";
  private corkedOk = false;
  private readonly writeCorked = (): void => {
    this.corkedOk = this.res.write(this.corkedChunk);
  };

  /**
   * Called when a socket that was behind can take more. `handler` returns whether what it wrote
   * went out (uWS's contract); it is not called once the response is over.
   */
  onWritable(handler: () => boolean): void {
    if (!this.live) return;
    this.res.onWritable(() => {
      if (!this.live) return true;
      try {
        return handler();
      } catch (err) {
        this.log.error("writable handler failed", { requestId: this.requestId, err });
        this.close();
        return true;
      }
    });
  }

  /** Ends a streamed response with its last bytes. */
  endStream(last: string): void {
    if (!this.live) return;
    const rest = this.settleRelayedRest();
    this.res.cork(() => this.res.end(last, rest === "close"));
    this.ended();
  }

  /** A relayed response ends: what becomes of a request body still arriving (connection-ending.ts). */
  private settleRelayedRest(): "keep" | "hold" | "close" {
    return relayedEnding(this.discardRest(), this.limits.drainBodyBytes, this.holdConnection);
  }

  /** Drops the connection at once: a stream that cannot be finished properly, shutdown after the drain timeout. */
  close(): void {
    if (!this.live) return;
    this.res.close(); // runs the abort handler
  }

  /** Before an answer: what becomes of a body still arriving (connection-ending.ts). */
  private settleBody(closeConnection: boolean, lingerOnClose: boolean): AnswerEnding {
    clearTimeout(this.bodyTimer);
    return answerEnding(this.discardRest(), { closeConnection, lingerOnClose, drainBodyBytes: this.limits.drainBodyBytes }, this.holdConnection);
  }

  /** The body still to come, which nobody will read now: what comes is dropped. Undefined when none is left. */
  private discardRest(): BodyReader | undefined {
    const body = this.body;
    if (!body || body.complete) return undefined;
    body.discard(new Cancelled({ reason: "cancelled" }));
    return body;
  }

  private bodyTimedOut(): void {
    const body = this.body!;
    if (!this.live || body.complete) return;
    // Paused because the handler has not read what came: the gateway is the slow party.
    if (body.paused) {
      this.bodyTimer = setTimeout(() => this.bodyTimedOut(), this.limits.bodyTimeoutMs);
      return;
    }
    body.abort(errors.requestTimeout(`The request body did not arrive within ${this.limits.bodyTimeoutMs} ms.`));
  }

  private ended(): void {
    if (this.streaming) HttpExchange.openStreams--;
    this.streaming = false;
    this.state = "ended";
    this.markFinished();
  }

  private aborted_(): void {
    if (this.state !== "open") return;
    this.state = "aborted";
    if (this.streaming) HttpExchange.openStreams--;
    this.streaming = false;
    clearTimeout(this.bodyTimer);
    this.markFinished();
    this.body?.abort(new Cancelled({ reason: "client_closed" }));
    for (const h of this.abortHandlers.splice(0)) this.guard("abort handler", h);
  }

  /** Runs a callback uWS (or an abort) invoked: an error in it is logged, never thrown into uWS. */
  private guard(what: string, fn: () => void): void {
    try {
      fn();
    } catch (err) {
      this.log.error(`${what} failed`, { requestId: this.requestId, method: this.method, path: this.path, err });
    }
  }

  private writeResponseHeaders(): void {
    const elapsed = Math.round(performance.now() - this.startedAt);
    this.res.writeHeader("openai-processing-ms", String(elapsed));
    for (const k in this.responseHeaders) this.res.writeHeader(k, this.responseHeaders[k]!);
  }
}
