import { connect } from "node:net";

/**
 * POSTs `body` to `path` over a raw socket and stops reading the response for `pauseMs`, like a
 * client that falls behind; resolves with the whole HTTP response once the server closes it.
 */
export function postAndReadLate(port: number, key: string, path: string, body: string, pauseMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, "127.0.0.1");
    const parts: Buffer[] = [];
    socket.on("connect", () => {
      socket.write(
        `POST ${path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${key}\r\ncontent-type: application/json\r\n` +
          `content-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
      );
      socket.pause();
      setTimeout(() => socket.resume(), pauseMs);
    });
    socket.on("data", (d) => parts.push(d));
    socket.on("end", () => resolve(Buffer.concat(parts).toString("utf8")));
    socket.on("error", reject);
  });
}

/** The body of an HTTP/1.1 response sent with chunked transfer encoding. */
export function dechunk(http: string): string {
  const [, ...rest] = http.split("\r\n\r\n");
  let body = rest.join("\r\n\r\n");
  let out = "";
  for (;;) {
    const nl = body.indexOf("\r\n");
    const size = parseInt(body.slice(0, nl), 16);
    if (!size) return out;
    out += body.slice(nl + 2, nl + 2 + size);
    body = body.slice(nl + 2 + size + 2);
  }
}
