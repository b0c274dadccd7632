import { connect, type Socket } from "node:net";

// HTTP/1.1 over a raw socket, for hostile tests that must control what a client sends and when
// (a body the server did not ask for, a head one byte at a time, a reader that never reads) and
// observe exactly how the server answered and ended the connection.

export interface RawResponse {
  status: number;
  headers: Record<string, string>;
  body: string;
  json<T = { error: { message: string; type: string; param: string | null; code: string | null } }>(): T;
}

export interface RawConnection {
  socket: Socket;
  /** The first complete response, or undefined when the connection ended without one. */
  response: Promise<RawResponse | undefined>;
  /** How the connection ended: "closed" (the server's FIN), "reset", or the client's own "destroyed". */
  ended: Promise<"closed" | "reset" | "destroyed">;
  /** Error of the last write (EPIPE/ECONNRESET when the server closed while the client sent). */
  writeError: () => Error | undefined;
  /** Bytes received so far (all responses, raw). */
  received: () => number;
  destroy(): void;
}

export interface RawOpen {
  port: number;
  /** Source address: any 127.x.y.z is loopback on Linux, so one test can be many clients. */
  localAddress?: string;
  /** Stop reading the response (a client that never reads). */
  paused?: boolean;
}

/** Opens a connection; nothing is sent yet. */
export function rawConnect(options: RawOpen): Promise<RawConnection> {
  return new Promise((resolveConnected, rejectConnected) => {
    const socket = connect({ port: options.port, host: "127.0.0.1", localAddress: options.localAddress });
    const chunks: Buffer[] = [];
    let bytes = 0;
    let writeError: Error | undefined;
    let resolveResponse!: (r: RawResponse | undefined) => void;
    const response = new Promise<RawResponse | undefined>((r) => (resolveResponse = r));
    let reset = false;
    let destroyedByUs = false;
    const ended = new Promise<"closed" | "reset" | "destroyed">((resolve) =>
      socket.once("close", () => {
        resolveResponse(parseResponse(Buffer.concat(chunks)));
        resolve(destroyedByUs ? "destroyed" : reset ? "reset" : "closed");
      }),
    );
    socket.on("data", (d: Buffer) => {
      chunks.push(d);
      bytes += d.length;
      const parsed = parseResponse(Buffer.concat(chunks));
      if (parsed) resolveResponse(parsed);
    });
    socket.on("error", (err: NodeJS.ErrnoException) => {
      if (err.code === "ECONNRESET") reset = true;
      writeError = err;
    });
    socket.once("connect", () => {
      if (options.paused) socket.pause();
      resolveConnected({
        socket,
        response,
        ended,
        writeError: () => writeError,
        received: () => bytes,
        destroy: () => {
          destroyedByUs = true;
          socket.destroy();
        },
      });
    });
    socket.once("error", rejectConnected);
  });
}

/** Writes and resolves once the kernel took it (or the connection failed). */
export function rawWrite(conn: RawConnection, data: string | Buffer): Promise<void> {
  return new Promise((resolve) => {
    if (conn.socket.destroyed) return resolve();
    conn.socket.write(data, () => resolve());
  });
}

/** `data` as one chunk of the chunked transfer coding. */
export function chunkFrame(data: Buffer): Buffer {
  return Buffer.concat([Buffer.from(`${data.length.toString(16)}\r\n`), data, Buffer.from("\r\n")]);
}

/**
 * Offers `mebibytes` MiB more of a chunked body (after the server answered) and returns how many
 * of those bytes left the client within `ms`: a server still reading takes them all at once on
 * loopback, one that stopped reading only what the two sockets' kernel buffers hold.
 */
export async function bytesTakenOfMore(conn: RawConnection, mebibytes: number, ms = 1500): Promise<number> {
  const block = chunkFrame(Buffer.alloc(1024 * 1024, "m"));
  const offered = mebibytes * block.length;
  const queued = conn.socket.writableLength + offered;
  conn.socket.write(Buffer.concat(Array.from({ length: mebibytes }, () => block)));
  await sleep(ms);
  return Math.max(0, Math.min(offered, queued - conn.socket.writableLength));
}

export interface RawRequest extends RawOpen {
  method?: string;
  path: string;
  headers?: Record<string, string>;
  body?: string | Buffer;
}

/**
 * Sends one request with its whole body at once, however the server answers meanwhile; `sent`
 * resolves once the kernel took all of it (never, if the server stops reading and stays open).
 */
export async function rawRequest(request: RawRequest): Promise<RawConnection & { sent: Promise<void> }> {
  const conn = await rawConnect(request);
  const body = request.body === undefined ? undefined : Buffer.from(request.body);
  const head = requestHead(request.method ?? "POST", request.path, { ...(body ? { "content-length": String(body.length) } : {}), ...request.headers });
  const sent = rawWrite(conn, body ? Buffer.concat([Buffer.from(head), body]) : head);
  return { ...conn, sent };
}

export function requestHead(method: string, path: string, headers: Record<string, string>): string {
  let head = `${method} ${path} HTTP/1.1\r\nhost: tributary.test\r\n`;
  for (const [k, v] of Object.entries(headers)) head += `${k}: ${v}\r\n`;
  return head + "\r\n";
}

/** The first response in `raw`, once it is complete (content-length or chunked). */
export function parseResponse(raw: Buffer): RawResponse | undefined {
  const text = raw.toString("latin1");
  const headEnd = text.indexOf("\r\n\r\n");
  if (headEnd < 0) return undefined;
  const lines = text.slice(0, headEnd).split("\r\n");
  const status = Number(lines[0]!.split(" ")[1]);
  const headers: Record<string, string> = {};
  for (const line of lines.slice(1)) {
    const colon = line.indexOf(":");
    headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
  }
  let rest = raw.subarray(Buffer.byteLength(text.slice(0, headEnd + 4), "latin1"));
  let body: Buffer;
  if (headers["content-length"] !== undefined) {
    const length = Number(headers["content-length"]);
    if (rest.length < length) return undefined;
    body = rest.subarray(0, length);
  } else if (headers["transfer-encoding"] === "chunked") {
    const parts: Buffer[] = [];
    for (;;) {
      const nl = rest.indexOf("\r\n");
      if (nl < 0) return undefined;
      const size = parseInt(rest.subarray(0, nl).toString("latin1"), 16);
      if (rest.length < nl + 2 + size + 2) return undefined;
      if (size === 0) break;
      parts.push(rest.subarray(nl + 2, nl + 2 + size));
      rest = rest.subarray(nl + 2 + size + 2);
    }
    body = Buffer.concat(parts);
  } else return undefined;
  const bodyText = body.toString("utf8");
  return { status, headers, body: bodyText, json: () => JSON.parse(bodyText) };
}

/** Resolves with `value` after `ms`. */
export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** What came back for bytes sent in one write on a fresh connection (sendInOneWrite). */
export interface OneWriteResult {
  /** The first complete response. */
  res: RawResponse | undefined;
  /** How the connection ended, or "open" when it was still open a second after the write. */
  ended: "closed" | "reset" | "destroyed" | "open";
  /** Everything the server sent, as text. */
  received: string;
}

/** Sends `raw` in one write on a fresh connection, and reads what comes back for up to a second. */
export async function sendInOneWrite(raw: string | Buffer, options: RawOpen): Promise<OneWriteResult> {
  const conn = await rawConnect(options);
  let received = "";
  conn.socket.on("data", (d: Buffer) => (received += d.toString("latin1")));
  await rawWrite(conn, raw);
  const ended = await Promise.race([conn.ended, sleep(1_000).then(() => "open" as const)]);
  const res = await Promise.race([conn.response, sleep(100).then(() => undefined)]);
  conn.destroy();
  return { res, ended, received };
}
