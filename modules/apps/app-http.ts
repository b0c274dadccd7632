import { connect, type Socket } from "node:net";

// The app host's HTTP/1.1 client to its instances (uvicorn on a Unix socket): one request per
// pooled keep-alive connection at a time, the head written in one send, the response parsed
// straight off the socket (content-length, chunked or until close) and handed on as it arrives.
// node:http's client cost more CPU per small exchange than the rest of the app host together;
// this speaks only what a relay to uvicorn needs, and refuses anything else as a broken answer.

/** Largest response head taken from an app. */
export const MAX_RESPONSE_HEAD_BYTES = 64 * 1024;
/** Most response header lines taken from an app. */
export const MAX_RESPONSE_HEADERS = 256;
/** Longest chunk-size or trailer line of a chunked response. */
const MAX_LINE_BYTES = 4 * 1024;
/**
 * An idle connection is reused only this long: uvicorn closes idle keep-alive connections after
 * 5 s, and a request written as it closes one would be lost.
 */
const IDLE_REUSE_MS = 2_000;
/** Idle connections kept per socket path. */
const MAX_IDLE_PER_PATH = 64;
/** Connections (in use and idle) per socket path unless the pool is told otherwise. */
export const DEFAULT_MAX_CONNECTIONS_PER_PATH = 256;

/** What a request hands on: the response's head (raw names, latin1 values), its body pieces, its end or failure. */
export interface AppResponseHandlers {
  head(status: number, headers: Array<[string, string]>): void;
  body(chunk: Buffer): void;
  end(): void;
  /** `afterHead`: the response had begun (a broken stream, not a missing answer). */
  error(err: Error, afterHead: boolean): void;
}

/** One connection to an instance's socket; its listeners stay for its life and talk to its current request. */
class AppConnection {
  owner: AppHttpRequest | undefined;
  idleSince = 0;
  dead = false;
  /** It served a request before (a reused connection may have been closed by the app meanwhile). */
  used = false;

  constructor(
    readonly socket: Socket,
    readonly path: string,
    private readonly pool: AppConnectionPool,
  ) {
    socket.on("data", (chunk: Buffer) => (this.owner ? this.owner.onData(chunk) : this.destroy()));
    socket.on("end", () => this.owner?.onEof());
    socket.on("error", (err) => this.owner?.onSocketError(err));
    socket.on("close", () => {
      this.markDead();
      this.owner?.onClose();
    });
  }

  /** Closes it; it stops counting against its path's bound now (its descriptor goes with the destroy). */
  destroy(): void {
    this.markDead();
    this.socket.destroy();
  }

  private markDead(): void {
    if (this.dead) return;
    this.dead = true;
    this.pool.forget(this);
  }
}

/**
 * Keep-alive connections to instances' Unix sockets (one pool per deployment; any number of
 * paths), at most `maxPerPath` open to one path (in use and idle together): the app host's
 * descriptors are shared by every tenant's instances, so one instance's traffic cannot take them
 * all. The exchange host admits no more exchanges per instance than that, so a request finds
 * either an idle connection or room for a new one; the bound here holds even if it did not.
 */
export class AppConnectionPool {
  private readonly idle = new Map<string, AppConnection[]>();
  /** Connections open per path, in use or idle (not yet destroyed or closed). */
  private readonly open = new Map<string, number>();
  private destroyed = false;

  constructor(readonly maxPerPath = DEFAULT_MAX_CONNECTIONS_PER_PATH) {
    if (!Number.isInteger(maxPerPath) || maxPerPath < 1) throw new Error("a connection pool needs room for at least one connection per path");
  }

  /** Connections open to `path` (in use and idle). */
  connections(path: string): number {
    return this.open.get(path) ?? 0;
  }

  /** An idle connection to `path` still fresh enough to reuse, else a new one (throws when `path` has its bound of connections open). */
  take(path: string, fresh = false): AppConnection {
    const list = fresh ? undefined : this.idle.get(path);
    const now = performance.now();
    while (list && list.length > 0) {
      const c = list.pop()!;
      if (!c.dead && now - c.idleSince < IDLE_REUSE_MS) return c;
      c.destroy();
    }
    const count = this.connections(path);
    if (count >= this.maxPerPath) {
      // Make room with an idle connection (a fresh one was asked for), else refuse.
      const spare = this.idle.get(path)?.shift();
      if (!spare) throw new Error(`the instance has ${this.maxPerPath} connections open, its bound`);
      spare.destroy();
    }
    this.open.set(path, this.connections(path) + 1);
    return new AppConnection(connect({ path }), path, this);
  }

  give(c: AppConnection): void {
    c.owner = undefined;
    c.used = true;
    const list = this.idle.get(c.path) ?? [];
    if (this.destroyed || c.dead || list.length >= MAX_IDLE_PER_PATH) return void c.destroy();
    c.idleSince = performance.now();
    list.push(c);
    this.idle.set(c.path, list);
  }

  /** A connection closed: out of the idle list, and no longer counted against its path. */
  forget(c: AppConnection): void {
    const list = this.idle.get(c.path);
    const at = list?.indexOf(c) ?? -1;
    if (at >= 0) list!.splice(at, 1);
    if (list && list.length === 0) this.idle.delete(c.path);
    const count = this.connections(c.path) - 1;
    if (count > 0) this.open.set(c.path, count);
    else this.open.delete(c.path);
  }

  /** Closes the idle connections; those in use close when their requests end. */
  destroy(): void {
    this.destroyed = true;
    for (const list of [...this.idle.values()]) for (const c of [...list]) c.destroy();
    this.idle.clear();
  }
}

type ParseState = "head" | "length" | "chunk-size" | "chunk-data" | "chunk-end" | "trailers" | "until-close" | "done";

/** Header values a request may carry to the app: no line breaks or NULs (they would split the head). */
const UNSAFE_HEADER = /[\r\n\0]/;
const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
const TARGET = /^[\x21-\x7e]+$/;
const STATUS_LINE = /^HTTP\/1\.([01]) (\d{3})(?: |$)/;
/** HTTP/1.1's framing rules name these answers (RFC 9112 section 6.3): an upgrade, and two that never carry a body. */
const SWITCHING_PROTOCOLS = 101;
const NO_CONTENT = 204;
const NOT_MODIFIED = 304;

/** One HTTP/1.1 request to an instance and its response. */
export class AppHttpRequest {
  private conn!: AppConnection;
  private readonly head: string;
  private readonly chunkedBody: boolean;
  private state: ParseState = "head";
  private pending: Buffer | undefined;
  private line = "";
  private remaining = 0;
  private keepAlive = true;
  private headSeen = false;
  private gotBytes = false;
  private retried = false;
  private sentBody = false;
  private eof = false;
  private failure: Error | undefined;
  /** The request's body ended (or it had none). */
  requestEnded: boolean;
  /** Nothing more happens: the response ended, failed, or the request was destroyed. */
  finished = false;
  paused = false;

  constructor(
    private readonly pool: AppConnectionPool,
    private readonly path: string,
    private readonly method: string,
    target: string,
    headers: ReadonlyArray<readonly [string, string]>,
    private readonly hasBody: boolean,
    private readonly handlers: AppResponseHandlers,
  ) {
    if (!TOKEN.test(method) || !TARGET.test(target)) throw new Error("the request line cannot be sent as HTTP/1.1");
    let head = `${method} ${target} HTTP/1.1\r\n`;
    let length = false;
    for (const [name, value] of headers) {
      if (!TOKEN.test(name) || UNSAFE_HEADER.test(value)) throw new Error(`the header ${JSON.stringify(name.slice(0, 64))} cannot be sent as HTTP/1.1`);
      if (name === "content-length") length = true;
      head += `${name}: ${value}\r\n`;
    }
    // A body of unknown length (the client sent it chunked) goes on chunked.
    this.chunkedBody = hasBody && !length;
    if (this.chunkedBody) head += "transfer-encoding: chunked\r\n";
    this.head = `${head}\r\n`;
    this.requestEnded = !hasBody;
    this.open(false);
  }

  private open(fresh: boolean): void {
    this.conn = this.pool.take(this.path, fresh);
    this.conn.owner = this;
    this.conn.socket.write(this.head, "latin1");
  }

  /** A piece of the request body; `done` once the kernel took it. */
  write(chunk: Uint8Array, done: () => void): void {
    if (this.finished) return;
    this.sentBody = true;
    const socket = this.conn.socket;
    if (!this.chunkedBody) return void socket.write(chunk, () => done());
    if (chunk.length === 0) return done();
    socket.cork();
    socket.write(`${chunk.length.toString(16)}\r\n`, "latin1");
    socket.write(chunk);
    socket.write("\r\n", "latin1", () => done());
    socket.uncork();
  }

  end(): void {
    if (this.finished || this.requestEnded) return;
    this.requestEnded = true;
    if (this.chunkedBody) this.conn.socket.write("0\r\n\r\n", "latin1");
  }

  pause(): void {
    this.paused = true;
    this.conn.socket.pause();
  }

  resume(): void {
    this.paused = false;
    if (!this.finished) this.conn.socket.resume();
  }

  /** Abandons the exchange: its connection is closed (whatever the app still sends is not wanted). */
  destroy(): void {
    if (this.finished) return;
    this.finished = true;
    this.conn.owner = undefined;
    this.conn.destroy();
  }

  onSocketError(err: Error): void {
    this.failure ??= err;
  }

  onEof(): void {
    this.eof = true;
    if (this.state === "until-close") this.complete(false);
  }

  onClose(): void {
    if (this.finished) return;
    // A reused connection the app had closed before it read anything of a bodiless request: the
    // request never reached the app, so it goes once more on a new connection.
    if (this.conn.used && !this.gotBytes && !this.hasBody && !this.sentBody && !this.retried) {
      this.retried = true;
      this.failure = undefined;
      this.conn.owner = undefined;
      try {
        return this.open(true);
      } catch (err) {
        return this.fail(err as Error);
      }
    }
    if (this.state === "until-close" && this.eof) return this.complete(false);
    this.fail(this.failure ?? new Error(this.headSeen ? "the app closed the connection before the response ended" : "the app closed the connection without an answer"));
  }

  private fail(err: Error): void {
    if (this.finished) return;
    this.finished = true;
    this.conn.owner = undefined;
    this.conn.destroy();
    this.handlers.error(err, this.headSeen);
  }

  /** The response ended: the connection goes back to the pool when it can carry another request. */
  private complete(reusable: boolean): void {
    if (this.finished) return;
    this.finished = true;
    this.state = "done";
    if (reusable && this.keepAlive && this.requestEnded) {
      if (this.paused) this.conn.socket.resume();
      this.pool.give(this.conn);
    } else {
      this.conn.owner = undefined;
      this.conn.destroy();
    }
    this.handlers.end();
  }

  onData(chunk: Buffer): void {
    this.gotBytes = true;
    let buf = chunk;
    let at = 0;
    while (at < buf.length && !this.finished) {
      switch (this.state) {
        case "head": {
          const joined = this.pending ? Buffer.concat([this.pending, buf.subarray(at)]) : at === 0 ? buf : buf.subarray(at);
          const end = joined.indexOf("\r\n\r\n");
          if (end < 0 || end > MAX_RESPONSE_HEAD_BYTES) {
            if (joined.length > MAX_RESPONSE_HEAD_BYTES) return this.fail(new Error(`the app's response head exceeds ${MAX_RESPONSE_HEAD_BYTES} bytes`));
            this.pending = Buffer.from(joined);
            return;
          }
          this.pending = undefined;
          buf = joined;
          at = end + 4;
          this.parseHead(joined.toString("latin1", 0, end));
          if ((this.state as ParseState) === "done" && !this.finished) this.complete(at === buf.length);
          break;
        }
        case "length":
        case "chunk-data": {
          const n = Math.min(this.remaining, buf.length - at);
          const piece = buf.subarray(at, at + n);
          at += n;
          this.remaining -= n;
          if (this.remaining === 0) this.state = this.state === "length" ? "done" : "chunk-end";
          this.handlers.body(piece);
          if (this.state === "done" && !this.finished) this.complete(at === buf.length);
          break;
        }
        case "until-close": {
          const piece = at === 0 ? buf : buf.subarray(at);
          at = buf.length;
          this.handlers.body(piece);
          break;
        }
        case "chunk-size":
        case "chunk-end":
        case "trailers": {
          const nl = buf.indexOf(10, at);
          if (nl < 0) {
            this.line += buf.toString("latin1", at);
            at = buf.length;
            if (this.line.length > MAX_LINE_BYTES) return this.fail(new Error("the app's chunked response has an overlong line"));
            break;
          }
          let line = this.line + buf.toString("latin1", at, nl);
          this.line = "";
          at = nl + 1;
          if (line.endsWith("\r")) line = line.slice(0, -1);
          if (line.length > MAX_LINE_BYTES) return this.fail(new Error("the app's chunked response has an overlong line"));
          this.onLine(line, at === buf.length);
          break;
        }
        case "done":
          // Bytes after a complete response (nothing was asked for them): the connection is not reused.
          return;
      }
    }
  }

  private onLine(line: string, atEndOfRead: boolean): void {
    if (this.state === "chunk-end") {
      if (line !== "") return this.fail(new Error("the app's chunked response is malformed"));
      this.state = "chunk-size";
      return;
    }
    if (this.state === "trailers") {
      if (line === "") this.complete(atEndOfRead);
      return;
    }
    const size = line.split(";", 1)[0]!.trim();
    if (!/^[0-9a-fA-F]{1,12}$/.test(size)) return this.fail(new Error("the app's chunked response is malformed"));
    const n = parseInt(size, 16);
    if (n === 0) this.state = "trailers";
    else {
      this.remaining = n;
      this.state = "chunk-data";
    }
  }

  private parseHead(text: string): void {
    const lines = text.split("\r\n");
    const m = STATUS_LINE.exec(lines[0]!);
    if (!m) return this.fail(new Error("the app's response is not HTTP/1.1"));
    const status = Number(m[2]);
    if (lines.length - 1 > MAX_RESPONSE_HEADERS) return this.fail(new Error(`the app's response has more than ${MAX_RESPONSE_HEADERS} headers`));
    // Informational answers (100 Continue, 103 Early Hints) precede the response: skipped.
    if (status >= 100 && status < 200) {
      if (status === SWITCHING_PROTOCOLS) return this.fail(new Error("the app switched protocols, which a hosted address does not relay"));
      return;
    }
    const headers: Array<[string, string]> = [];
    let length: number | undefined;
    let chunked = false;
    this.keepAlive = m[1] === "1";
    for (let i = 1; i < lines.length; i++) {
      const l = lines[i]!;
      const colon = l.indexOf(":");
      if (colon <= 0 || l.charCodeAt(0) === 32 || l.charCodeAt(0) === 9) return this.fail(new Error("the app's response has a malformed header"));
      const name = l.slice(0, colon).trim();
      const value = l.slice(colon + 1).trim();
      headers.push([name, value]);
      switch (name.toLowerCase()) {
        case "content-length":
          if (!/^\d{1,15}$/.test(value) || (length !== undefined && length !== Number(value))) return this.fail(new Error("the app's response has an invalid content-length"));
          length = Number(value);
          break;
        case "transfer-encoding":
          chunked = /(?:^|,)\s*chunked\s*$/i.test(value);
          if (!chunked) this.keepAlive = false;
          break;
        case "connection":
          if (/(?:^|,)\s*close\s*(?:,|$)/i.test(value)) this.keepAlive = false;
          break;
      }
    }
    this.headSeen = true;
    this.state = this.method === "HEAD" || status === NO_CONTENT || status === NOT_MODIFIED ? "done" : chunked ? "chunk-size" : length !== undefined ? (length === 0 ? "done" : "length") : "until-close";
    if (this.state === "length") this.remaining = length!;
    if (this.state === "until-close") this.keepAlive = false;
    this.handlers.head(status, headers);
  }
}
