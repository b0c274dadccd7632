import type { HttpRequest, HttpResponse } from "uWebSockets.js";
import { newId } from "../../lib/ids.js";
import { Cancelled, errors, type DomainError } from "../../modules/errors/mod.js";
import { openAIError } from "../../modules/openai/mod.js";
import { BodyReader } from "./body-reader.js";
import type { Principal } from "../../modules/accounts/mod.js";

const STATUS_TEXT: Record<number, string> = {
  200: "200 OK", 201: "201 Created", 204: "204 No Content", 400: "400 Bad Request", 401: "401 Unauthorized",
  403: "403 Forbidden", 404: "404 Not Found", 405: "405 Method Not Allowed", 409: "409 Conflict", 410: "410 Gone",
  413: "413 Payload Too Large", 415: "415 Unsupported Media Type", 422: "422 Unprocessable Entity",
  429: "429 Too Many Requests", 500: "500 Internal Server Error", 502: "502 Bad Gateway",
  503: "503 Service Unavailable", 504: "504 Gateway Timeout",
};

export function statusLine(status: number): string {
  return STATUS_TEXT[status] ?? `${status} Status`;
}

/**
 * One HTTP request and its response over uWebSockets.js. uWS's request object only lives during
 * the synchronous handler call, so everything needed later is captured here; every write after
 * an await is corked, and nothing is written once the client went away.
 */
export class HttpExchange {
  readonly method: string;
  readonly path: string;
  readonly query: string;
  readonly headers: Record<string, string> = {};
  readonly requestId = newId("req_");
  readonly startedAt = performance.now();
  principal: Principal | undefined;
  /** Headers added to whatever response goes out (request id, rate limits, ...). */
  readonly responseHeaders: Record<string, string> = {};
  private abortedFlag = false;
  private respondedFlag = false;
  private readonly abortHandlers: Array<() => void> = [];
  private readonly body: BodyReader | undefined;
  private markFinished!: () => void;
  /** Resolves when the response has been fully written, or the client left. */
  readonly finished = new Promise<void>((resolve) => (this.markFinished = resolve));

  constructor(readonly res: HttpResponse, req: HttpRequest) {
    this.method = req.getCaseSensitiveMethod().toUpperCase();
    const url = req.getUrl();
    this.path = url.length > 1 && url.endsWith("/") ? url.slice(0, -1) : url;
    this.query = req.getQuery() ?? "";
    req.forEach((k, v) => {
      this.headers[k] = v;
    });
    if (this.method === "POST" || this.method === "PUT" || this.method === "PATCH") this.body = new BodyReader(res);
    res.onAborted(() => {
      this.abortedFlag = true;
      this.markFinished();
      this.body?.abort(new Cancelled({ reason: "client_closed" }));
      for (const h of this.abortHandlers.splice(0)) h();
    });
    this.responseHeaders["x-request-id"] = this.requestId;
  }

  get aborted(): boolean {
    return this.abortedFlag;
  }

  get responded(): boolean {
    return this.respondedFlag;
  }

  /** Runs when the client disconnects before the response completed. */
  onAbort(handler: () => void): void {
    if (this.abortedFlag) handler();
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

  /** The body as a stream of chunks (uploads), refusing more than `limit` bytes with a 413. */
  bodyChunks(limit: number): AsyncGenerator<Buffer> {
    this.checkDeclaredLength(limit);
    if (!this.body) return (async function* () {})();
    return this.body.chunksUpTo(limit, () => errors.bodyTooLarge(limit));
  }

  private checkDeclaredLength(limit: number): void {
    const declared = Number(this.headers["content-length"] ?? "NaN");
    if (declared > limit) throw errors.bodyTooLarge(limit);
  }

  /**
   * Parses a JSON body; malformed JSON is a 400. The content type is not checked: curl's -d sends
   * form encoding by default, and the body is JSON or it is an error either way.
   */
  async readJson(limit: number): Promise<unknown> {
    const body = await this.readBody(limit);
    if (body.length === 0) throw errors.invalidJson("The body is empty.");
    try {
      return JSON.parse(body.toString("utf8"));
    } catch (err) {
      throw errors.invalidJson((err as Error).message);
    }
  }

  json(status: number, body: unknown, closeConnection = false): void {
    this.send(status, JSON.stringify(body), "application/json", closeConnection);
  }

  /** Answers with the OpenAI error for `err`: the one place a domain error becomes HTTP. */
  error(err: DomainError, options: { closeConnection?: boolean } = {}): void {
    const { status, body, headers } = openAIError(err, this.requestId);
    for (const k in headers) this.responseHeaders[k] = headers[k]!;
    // A body refused for its size is still arriving: close the connection rather than read the rest.
    this.json(status, body, options.closeConnection ?? err._tag === "TooLarge");
  }

  send(status: number, body: string | Buffer, contentType: string, closeConnection = false): void {
    if (this.abortedFlag || this.respondedFlag) return;
    this.respondedFlag = true;
    this.res.cork(() => {
      this.res.writeStatus(statusLine(status));
      this.res.writeHeader("content-type", contentType);
      this.writeResponseHeaders();
      this.res.end(body, closeConnection);
    });
    this.markFinished();
  }

  /** Ends a streamed response with its last bytes. */
  endStream(last: string): void {
    if (this.abortedFlag) return;
    this.res.cork(() => this.res.end(last));
    this.markFinished();
  }

  /** Drops the connection (shutdown after the drain timeout). */
  close(): void {
    if (this.abortedFlag) return;
    this.res.close();
  }

  /** Writes status and headers of a streamed response; the caller writes the body. */
  beginStream(contentType: string): void {
    this.respondedFlag = true;
    this.res.writeStatus("200 OK");
    this.res.writeHeader("content-type", contentType);
    this.res.writeHeader("cache-control", "no-cache");
    this.writeResponseHeaders();
  }

  private writeResponseHeaders(): void {
    const elapsed = Math.round(performance.now() - this.startedAt);
    this.res.writeHeader("openai-processing-ms", String(elapsed));
    for (const k in this.responseHeaders) this.res.writeHeader(k, this.responseHeaders[k]!);
  }
}
