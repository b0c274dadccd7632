import uWS from "uWebSockets.js";
import type { Logger } from "../lib/log.js";
import type { Authenticator } from "../modules/accounts/mod.js";
import { asDomainError, errors, isDomainError, type DomainError } from "../modules/errors/mod.js";
import { openAIError } from "../modules/openai/mod.js";
import { ConnectionLimiter } from "./http/connection-limiter.js";
import { HttpExchange, type ExchangeLimits } from "./http/exchange.js";
import { statusLine } from "./http/status-line.js";
import type { Match, Router } from "./http/router.js";

export interface EdgeLimits extends ExchangeLimits {
  /** Requests in progress in total (each holds its connection); past it, a 503. */
  maxConnections: number;
  /** Requests in progress from one client address; past it, a 429 (0: no limit). */
  maxConnectionsPerAddress: number;
}

/**
 * The uWebSockets.js server: every request goes through one dispatcher that applies the edge's
 * limits (head size, connections per address and in total), matches the route (404/405),
 * authenticates (unless the route is public), runs the handler and turns any thrown DomainError
 * into an OpenAI error response. Unexpected errors become a 500 without internals, for that
 * request only: nothing a request does escapes into uWS's native callbacks.
 */
export class GatewayServer {
  private readonly app: uWS.TemplatedApp;
  private listenSocket: uWS.us_listen_socket | undefined;
  private readonly open = new Set<HttpExchange>();
  private readonly connections: ConnectionLimiter;
  private idleWaiters: Array<() => void> = [];
  /** Set by `close`: requests that come after (on connections kept alive) are refused, to be retried elsewhere. */
  private closing = false;
  port = 0;

  /**
   * Requests to hosted apps: when `match` takes the Host header or the path (as sent), the
   * request goes to `handler` with the params it gave (authenticated like any route) instead of
   * the router.
   */
  hostedApps: { match(host: string | undefined, rawPath: string): Pick<Match, "pattern" | "params"> | undefined; handler: Match["handler"] } | undefined;

  /** Runs once a request is over (metrics, usage, traces); its errors are logged, never the request's. */
  onFinished: ((ex: HttpExchange) => void) | undefined;

  constructor(private readonly router: Router, private readonly authenticator: Authenticator, private readonly limits: EdgeLimits, private readonly log: Logger) {
    assertNativeUws();
    this.connections = new ConnectionLimiter(limits.maxConnections, limits.maxConnectionsPerAddress);
    this.app = uWS.App();
    this.app.any("/*", (res, req) => this.dispatch(res, req));
  }

  /** Registers WebSocket routes on the same server (before listen). */
  webSockets(register: (app: uWS.TemplatedApp) => void): void {
    register(this.app);
  }

  /** Requests in flight (streams included). */
  get inFlight(): number {
    return this.open.size;
  }

  listen(host: string, port: number): Promise<number> {
    return new Promise((resolve, reject) => {
      this.app.listen(host, port, (socket) => {
        if (!socket) return reject(new Error(`cannot listen on ${host}:${port}`));
        this.listenSocket = socket;
        this.port = uWS.us_socket_local_port(socket);
        resolve(this.port);
      });
    });
  }

  /** Stops accepting connections; resolves when in-flight requests are done or `timeoutMs` passed. */
  async close(timeoutMs: number): Promise<boolean> {
    this.closing = true;
    if (this.listenSocket) uWS.us_listen_socket_close(this.listenSocket);
    this.listenSocket = undefined;
    if (this.open.size === 0) return true;
    let timer: NodeJS.Timeout | undefined;
    const idle = new Promise<boolean>((resolve) => this.idleWaiters.push(() => resolve(true)));
    const late = new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), timeoutMs)));
    const drained = await Promise.race([idle, late]);
    clearTimeout(timer);
    return drained;
  }

  /** Closes every remaining connection (after the drain timeout). */
  closeAll(): void {
    for (const ex of this.open) ex.close();
  }

  /** uWS's request callback: it must not throw, and must answer or attach an abort handler before returning. */
  private dispatch(res: uWS.HttpResponse, req: uWS.HttpRequest): void {
    let ex: HttpExchange;
    try {
      ex = new HttpExchange(res, req, this.limits, this.log);
    } catch (err) {
      this.log.error("request could not be read", { err });
      answerBare(res);
      return;
    }
    try {
      this.admit(ex);
    } catch (err) {
      this.log.error("request dispatch failed", { requestId: ex.requestId, method: ex.method, path: ex.path, err });
      ex.error(errors.internal(err));
    }
  }

  private admit(ex: HttpExchange): void {
    // Both refusals close the connection: their answers go out once uWS is done with this read,
    // so a request pipelined behind one is never dispatched (HttpExchange.writeClosing).
    if (ex.headViolation) return ex.refuseHead();
    const refused = this.connections.acquire(ex.remoteAddress);
    if (refused) return ex.error(refused);
    let match: Match;
    try {
      const hosted = this.hostedApps?.match(ex.headers.host, ex.rawPath);
      match = hosted ? { ...hosted, handler: this.hostedApps!.handler, public: false } : this.router.match(ex.method, ex.path);
    } catch (err) {
      this.connections.release(ex.remoteAddress);
      ex.error(err as DomainError);
      return;
    }
    if (this.closing && !match.public) {
      // Closing the listening socket leaves the connections kept alive open, and a client sends
      // its next request on one: taken, it could start after the drain's wait and be cut by the
      // exit (its NATS connection drained under it). A 503 that closes the connection instead,
      // which a client (or load balancer) retries on another gateway. Probes still answer.
      this.connections.release(ex.remoteAddress);
      ex.error(errors.unavailable("This gateway is shutting down. Please retry the request.", 1), { closeConnection: true });
      return;
    }
    this.open.add(ex);
    ex.route = match.pattern;
    void this.run(ex, match)
      .then(() => ex.finished)
      .finally(() => {
        try {
          this.onFinished?.(ex);
        } catch (err) {
          this.log.error("recording a finished request failed", { requestId: ex.requestId, err });
        }
        this.connections.release(ex.remoteAddress);
        this.open.delete(ex);
        if (this.open.size === 0 && this.idleWaiters.length > 0) for (const w of this.idleWaiters.splice(0)) w();
      });
  }

  private async run(ex: HttpExchange, match: Match): Promise<void> {
    try {
      if (!match.public) {
        const principal = await this.authenticator.authenticate(ex.headers.authorization, ex.headers);
        ex.principal = principal;
        ex.responseHeaders["openai-organization"] = principal.organizationId;
        ex.responseHeaders["openai-project"] = principal.projectId;
      }
      await match.handler(ex, match.params);
      if (!ex.responded && !ex.aborted) {
        // A handler that returned without answering and without a stream is a bug: say so.
        throw new Error(`handler for ${ex.method} ${ex.path} did not respond`);
      }
    } catch (err) {
      const error = asDomainError(err);
      if (ex.observation && !ex.observation.error && !ex.observation.cancelled) ex.observation.fail(error);
      if (ex.aborted) return;
      if (error._tag === "Internal") this.log.error("request failed", { requestId: ex.requestId, method: ex.method, path: ex.path, err: isDomainError(err) ? error.cause : err });
      else if (!isDomainError(err)) this.log.warn("request failed: NATS unavailable", { requestId: ex.requestId, method: ex.method, path: ex.path, err: String(err) });
      if (!ex.responded) ex.error(error);
      // A stream that failed without ending itself: drop the connection rather than leave the client waiting.
      else ex.close();
    }
  }
}

/** A 500 for a request whose exchange could not even be built (no request id): the response is used once, defensively. */
function answerBare(res: uWS.HttpResponse): void {
  try {
    const { status, body } = openAIError(errors.internal(), "(none)");
    res.cork(() => res.writeStatus(statusLine(status)).writeHeader("content-type", "application/json").end(JSON.stringify(body), true));
  } catch {
    try {
      res.close();
    } catch {
      // Nothing left to do with this connection.
    }
  }
}

/**
 * The npm build of uWebSockets.js falls back to a slow pure-JS server when its native binary
 * does not load. Tributary refuses to run on that fallback rather than silently lose throughput.
 */
function assertNativeUws(): void {
  if (typeof (uWS as { getParts?: unknown }).getParts !== "function")
    throw new Error("uWebSockets.js native binary did not load (unsupported Node.js ABI or glibc); refusing the JS fallback");
}
