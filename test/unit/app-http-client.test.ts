import { mkdtempSync } from "node:fs";
import { createServer, type Server, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import t, { type Test } from "tap";
import { AppConnectionPool, AppHttpRequest, MAX_RESPONSE_HEAD_BYTES } from "../../modules/apps/mod.js";

// The app host's HTTP/1.1 client against a server on a Unix socket that answers with raw bytes:
// each response framing uvicorn may use, split anywhere across reads, connection reuse, and
// broken answers refused as errors.

interface Outcome {
  status?: number;
  headers?: Array<[string, string]>;
  body: string;
  ended: boolean;
  error?: { message: string; afterHead: boolean };
}

/** A server answering the n-th request it reads (by the request's head) with `answer(head, socket)`. */
async function rawServer(t: Test, answer: (head: string, socket: Socket, connection: number) => void): Promise<{ path: string; server: Server; requests: string[]; connections: () => number }> {
  const path = join(mkdtempSync(join(tmpdir(), "app-http-")), "app.sock");
  const requests: string[] = [];
  let connections = 0;
  const server = createServer((socket) => {
    const connection = ++connections;
    let buf = "";
    socket.on("data", (d) => {
      buf += d.toString("latin1");
      for (let end = buf.indexOf("\r\n\r\n"); end >= 0; end = buf.indexOf("\r\n\r\n")) {
        const head = buf.slice(0, end);
        buf = buf.slice(end + 4);
        requests.push(head);
        answer(head, socket, connection);
      }
    });
    socket.on("error", () => {});
  });
  await new Promise<void>((resolve) => server.listen(path, resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return { path, server, requests, connections: () => connections };
}

function call(pool: AppConnectionPool, path: string, method = "GET", headers: Array<[string, string]> = [["host", "x"]], body?: Buffer[]): Promise<Outcome> {
  return new Promise((resolve) => {
    const out: Outcome = { body: "", ended: false };
    const req = new AppHttpRequest(pool, path, method, "/p?q=1", headers, body !== undefined, {
      head: (status, h) => {
        out.status = status;
        out.headers = h;
      },
      body: (chunk) => (out.body += chunk.toString("latin1")),
      end: () => {
        out.ended = true;
        resolve(out);
      },
      error: (err, afterHead) => {
        out.error = { message: err.message, afterHead };
        resolve(out);
      },
    });
    if (body) {
      for (const b of body) req.write(b, () => {});
      req.end();
    }
  });
}

/** Writes `bytes` one byte per write, each after the other reached the socket: every split point is exercised. */
async function trickle(socket: Socket, bytes: string): Promise<void> {
  for (const ch of bytes) await new Promise<void>((resolve) => socket.write(ch, "latin1", () => setImmediate(resolve)));
}

t.test("content-length, chunked and close-delimited bodies, whole or a byte per read", async (t) => {
  const responses: Record<string, string> = {
    "/length": "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n{\"ok\":true}",
    "/chunked": "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\nx-trailer: 1\r\n\r\n",
    "/close": "HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nuntil the end",
  };
  for (const slow of [false, true]) {
    let path = "";
    const srv = await rawServer(t, (head, socket) => {
      const r = responses[path]!;
      void (slow ? trickle(socket, r) : Promise.resolve(void socket.write(r, "latin1"))).then(() => {
        if (path === "/close") socket.end();
      });
      void head;
    });
    const pool = new AppConnectionPool();
    for (path of ["/length", "/chunked", "/close"]) {
      const out = await call(pool, srv.path);
      t.equal(out.error, undefined, `${path}${slow ? " (a byte per read)" : ""}: no error`);
      t.equal(out.status, 200);
      t.equal(out.body, { "/length": '{"ok":true}', "/chunked": "hello world", "/close": "until the end" }[path], `${path}${slow ? " (a byte per read)" : ""}: the body`);
      t.ok(out.ended);
    }
    pool.destroy();
  }
});

t.test("the request head goes out as given; a body of unknown length goes chunked", async (t) => {
  const path = join(mkdtempSync(join(tmpdir(), "app-http-")), "app.sock");
  const received: string[] = [];
  // Answers once what it read ends a request: a bare head, or a chunked body's last chunk.
  const server = createServer((socket) => {
    let buf = "";
    socket.on("data", (d) => {
      buf += d.toString("latin1");
      const chunked = buf.includes("transfer-encoding: chunked");
      if (chunked ? buf.endsWith("0\r\n\r\n") : buf.endsWith("\r\n\r\n")) {
        received.push(buf);
        buf = "";
        socket.write("HTTP/1.1 204 No Content\r\n\r\n");
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(path, resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const pool = new AppConnectionPool();
  const first = await call(pool, path, "GET", [["host", "a.b"], ["x-one", "1"]]);
  t.equal(first.status, 204);
  t.equal(received[0], "GET /p?q=1 HTTP/1.1\r\nhost: a.b\r\nx-one: 1\r\n\r\n", "the head as given, nothing added");
  const posted = await call(pool, path, "POST", [["host", "a.b"]], [Buffer.from("abc"), Buffer.from("de")]);
  t.equal(posted.status, 204);
  t.equal(received[1], "POST /p?q=1 HTTP/1.1\r\nhost: a.b\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n", "chunks framed, then the last chunk");
  const sized = await call(pool, path, "POST", [["content-length", "0"]], []);
  t.equal(sized.status, 204);
  t.equal(received[2], "POST /p?q=1 HTTP/1.1\r\ncontent-length: 0\r\n\r\n", "a declared length: the body as is");
  pool.destroy();
});

t.test("keep-alive: sequential requests share one connection; connection: close does not", async (t) => {
  let close = false;
  const srv = await rawServer(t, (_head, socket) => socket.write(`HTTP/1.1 200 OK\r\ncontent-length: 2\r\n${close ? "connection: close\r\n" : ""}\r\nok`));
  const pool = new AppConnectionPool();
  for (let i = 0; i < 5; i++) t.equal((await call(pool, srv.path)).body, "ok");
  t.equal(srv.connections(), 1, "five requests, one connection");
  close = true;
  for (let i = 0; i < 2; i++) t.equal((await call(pool, srv.path)).body, "ok");
  close = false;
  await call(pool, srv.path);
  t.equal(srv.connections(), 3, "a connection the app said it closes is not reused");
  pool.destroy();
});

t.test("HEAD, 204 and 304 have no body whatever their headers say; 100 Continue is skipped", async (t) => {
  const srv = await rawServer(t, (head, socket) => {
    if (head.startsWith("HEAD")) socket.write("HTTP/1.1 200 OK\r\ncontent-length: 50\r\n\r\n");
    else if (head.includes("/p?q=1") && head.includes("x-304")) socket.write("HTTP/1.1 304 Not Modified\r\ncontent-length: 50\r\n\r\n");
    else socket.write("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nyes");
  });
  const pool = new AppConnectionPool();
  const head = await call(pool, srv.path, "HEAD");
  t.same([head.status, head.body, head.ended], [200, "", true]);
  const notModified = await call(pool, srv.path, "GET", [["x-304", "1"]]);
  t.same([notModified.status, notModified.body, notModified.ended], [304, "", true]);
  const continued = await call(pool, srv.path);
  t.same([continued.status, continued.body], [200, "yes"]);
  t.equal(srv.connections(), 1, "all on one connection");
  pool.destroy();
});

t.test("broken answers are errors, before or after the head", async (t) => {
  const cases: Record<string, [string, boolean, RegExp]> = {
    "x-garbage": ["SMTP ready\r\n\r\n", false, /not HTTP\/1.1/],
    "x-short": ["HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc", true, /closed the connection before the response ended/],
    "x-badchunk": ["HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n", true, /malformed/],
    "x-badlength": ["HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n", false, /invalid content-length/],
    "x-upgrade": ["HTTP/1.1 101 Switching Protocols\r\n\r\n", false, /switched protocols/],
    "x-nothing": ["", false, /without an answer/],
    "x-bighead": [`HTTP/1.1 200 OK\r\nx-big: ${"a".repeat(MAX_RESPONSE_HEAD_BYTES)}\r\n\r\n`, false, /head exceeds/],
  };
  const srv = await rawServer(t, (head, socket) => {
    const name = Object.keys(cases).find((k) => head.includes(k))!;
    socket.end(cases[name]![0]);
  });
  const pool = new AppConnectionPool();
  for (const [name, [, afterHead, message]] of Object.entries(cases)) {
    const out = await call(pool, srv.path, "GET", [[name, "1"]]);
    t.match(out.error, { afterHead, message }, name);
  }
  const none = await call(pool, join(tmpdir(), "no-such-app.sock"));
  t.match(none.error, { afterHead: false }, "no socket: an error before the head");
  pool.destroy();
});

t.test("a head HTTP/1.1 cannot carry is refused before anything is sent", async (t) => {
  const pool = new AppConnectionPool();
  t.throws(() => new AppHttpRequest(pool, "/nowhere", "GET", "/", [["x-a", "1\r\nx-b: 2"]], false, { head() {}, body() {}, end() {}, error() {} }), /cannot be sent/);
  t.throws(() => new AppHttpRequest(pool, "/nowhere", "GET", "/a b", [], false, { head() {}, body() {}, end() {}, error() {} }), /cannot be sent/);
  t.throws(() => new AppHttpRequest(pool, "/nowhere", "GE T", "/", [], false, { head() {}, body() {}, end() {}, error() {} }), /cannot be sent/);
});

t.test("a reused connection the app closed meanwhile: a bodiless request goes again on a new one", async (t) => {
  const srv = await rawServer(t, (_head, socket, connection) => {
    // The first connection answers once, then closes as the next request arrives (as an idle timeout would).
    if (connection === 1 && srv.requests.length > 1) return void socket.destroy();
    socket.write("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok");
  });
  const pool = new AppConnectionPool();
  t.equal((await call(pool, srv.path)).body, "ok");
  const again = await call(pool, srv.path);
  t.same([again.error, again.body], [undefined, "ok"], "answered on a new connection");
  t.equal(srv.connections(), 2);
  pool.destroy();
});

t.test("a pool holds at most its bound of connections to a path, in use and idle together", async (t) => {
  const BOUND = 3;
  // Answers only when told: requests stay in flight, each on its own connection.
  const waiting: Socket[] = [];
  const srv = await rawServer(t, (_head, socket) => waiting.push(socket));
  const answer = () => {
    for (const socket of waiting.splice(0)) socket.write("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok");
  };
  const pool = new AppConnectionPool(BOUND);
  const inFlight = Array.from({ length: BOUND }, () => call(pool, srv.path));
  t.equal(pool.connections(srv.path), BOUND, "at the bound: one connection per request in flight");
  await t.rejects(call(pool, srv.path), /3 connections open/, "one more request finds no room and is refused");
  t.equal(pool.connections(srv.path), BOUND, "and opened nothing");
  while (waiting.length < BOUND) await new Promise((r) => setImmediate(r));
  answer();
  t.same((await Promise.all(inFlight)).map((o) => o.body), ["ok", "ok", "ok"]);
  t.equal(pool.connections(srv.path), BOUND, "the answered connections stay, idle");
  // Twice the bound, in rounds: idle connections are reused, never more opened than the bound.
  for (let round = 0; round < 2; round++) {
    const again = Array.from({ length: BOUND }, () => call(pool, srv.path));
    t.equal(pool.connections(srv.path), BOUND, `round ${round}: still ${BOUND}`);
    while (waiting.length < BOUND) await new Promise((r) => setImmediate(r));
    answer();
    await Promise.all(again);
  }
  t.equal(srv.connections(), BOUND, `the server saw ${BOUND} connections in all`);
  pool.destroy();
  t.equal(pool.connections(srv.path), 0, "a destroyed pool holds none");
  t.throws(() => new AppConnectionPool(0), /at least one/);
});
