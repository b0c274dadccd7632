import t from "tap";
import { createServer } from "node:net";
import {
  ChecksumMismatch, classifyModelFailure, describeError, DiskFull, HttpStatus, InvalidGguf, ModelFileMissing, ModelLoadFailed, NoNetwork,
} from "../../modules/catalog/mod.js";

// Why a model could not be had (modules/catalog/model-file-failure.ts): errors as Node and its
// fetch raise them, classified into the causes `tributary start` explains.

/** An error as Node's system calls make them: a message, a code, a syscall. */
function systemError(message: string, code: string, extra: Record<string, unknown> = {}): Error {
  return Object.assign(new Error(message), { code, errno: -1, ...extra });
}

t.test("DNS failures, refused and reset connections and unreachable networks are NoNetwork, with the system's message", async (t) => {
  const cases: Array<[Error, string]> = [
    [systemError("getaddrinfo ENOTFOUND huggingface.co", "ENOTFOUND", { syscall: "getaddrinfo", hostname: "huggingface.co" }), "no network: getaddrinfo ENOTFOUND huggingface.co"],
    [systemError("getaddrinfo EAI_AGAIN huggingface.co", "EAI_AGAIN"), "no network: getaddrinfo EAI_AGAIN huggingface.co"],
    [systemError("connect ECONNREFUSED 10.0.0.1:443", "ECONNREFUSED"), "no network: connect ECONNREFUSED 10.0.0.1:443"],
    [systemError("connect ENETUNREACH 2600::1:443", "ENETUNREACH"), "no network: connect ENETUNREACH 2600::1:443"],
    [systemError("read ECONNRESET", "ECONNRESET"), "no network: read ECONNRESET"],
    [systemError("connect ETIMEDOUT 10.0.0.1:443", "ETIMEDOUT"), "no network: connect ETIMEDOUT 10.0.0.1:443"],
  ];
  for (const [err, message] of cases) {
    const failure = classifyModelFailure(err);
    t.ok(failure instanceof NoNetwork, String((err as { code?: string }).code));
    t.equal(failure.message, message);
  }
});

t.test("fetch's TypeError holds the system error as its cause; undici's timeouts and AggregateError's attempts count too", async (t) => {
  const dns = new TypeError("fetch failed", { cause: systemError("getaddrinfo ENOTFOUND huggingface.co", "ENOTFOUND") });
  t.equal(classifyModelFailure(dns).message, "no network: getaddrinfo ENOTFOUND huggingface.co");
  const connectTimeout = new TypeError("fetch failed", { cause: systemError("Connect Timeout Error (attempted address: huggingface.co:443, timeout: 10000ms)", "UND_ERR_CONNECT_TIMEOUT") });
  t.equal(classifyModelFailure(connectTimeout)._tag, "NoNetwork");
  // Node tries each address of a host and reports them all: the AggregateError has no message of its own.
  const attempts = Object.assign(new AggregateError([systemError("connect ECONNREFUSED ::1:443", "ECONNREFUSED"), systemError("connect ECONNREFUSED 127.0.0.1:443", "ECONNREFUSED")], ""), { code: "ECONNREFUSED" });
  t.equal(classifyModelFailure(new TypeError("fetch failed", { cause: attempts })).message, "no network: connect ECONNREFUSED ::1:443");
  const aborted = new DOMException("The operation was aborted due to timeout", "TimeoutError");
  t.equal(classifyModelFailure(aborted)._tag, "NoNetwork", "AbortSignal.timeout");
});

t.test("a real refused connection, through fetch", async (t) => {
  // A port that was just free: nothing listens there now.
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as { port: number }).port;
  await new Promise<void>((r) => server.close(() => r()));
  const err = await fetch(`http://127.0.0.1:${port}/model.gguf`).then(() => undefined, (e: unknown) => e);
  const failure = classifyModelFailure(err);
  t.equal(failure._tag, "NoNetwork");
  t.match(failure.message, /^no network: connect ECONNREFUSED 127\.0\.0\.1:\d+$/);
});

t.test("a full disk is DiskFull", async (t) => {
  const failure = classifyModelFailure(systemError("ENOSPC: no space left on device, write", "ENOSPC", { syscall: "write" }));
  t.ok(failure instanceof DiskFull);
  t.equal(failure.message, "disk full: ENOSPC: no space left on device, write");
  t.equal(classifyModelFailure(systemError("EDQUOT: disk quota exceeded, write", "EDQUOT"))._tag, "DiskFull");
});

t.test("HTTP statuses: not found, needs a token, refused token, others", async (t) => {
  const url = "https://huggingface.co/acme/m-GGUF/resolve/main/m.gguf";
  t.equal(new HttpStatus({ url, status: 404, tokenSent: false }).message, `not found at ${url}`);
  t.equal(new HttpStatus({ url, status: 401, tokenSent: false }).message, `${url} needs a token: set HF_TOKEN (HTTP 401: a gated or private model)`);
  t.match(new HttpStatus({ url, status: 403, tokenSent: true }).message, /refused the token in HF_TOKEN \(HTTP 403\)/);
  t.equal(new HttpStatus({ url, status: 503, tokenSent: false }).message, `HTTP 503 from ${url}`);
});

t.test("a failure already classified is kept as it is", async (t) => {
  const failures = [
    new HttpStatus({ url: "u", status: 404, tokenSent: false }),
    new ChecksumMismatch({ source: "u", expected: "a", actual: "b", discarded: true }),
    new ModelFileMissing({ path: "/m.gguf" }),
    new InvalidGguf({ path: "/m.gguf", detail: "Invalid GGUF magic" }),
    new NoNetwork({ detail: "d" }),
  ];
  for (const f of failures) t.equal(classifyModelFailure(f), f, f._tag);
  t.equal(failures[1]!.message, "sha256 mismatch for u: expected a, got b; the download was discarded");
  t.equal(failures[3]!.message, "not a valid GGUF model: /m.gguf (Invalid GGUF magic)");
});

t.test("anything else: ModelLoadFailed with every message of its causes, never [object Object]", async (t) => {
  const other = classifyModelFailure(new TypeError("fetch failed", { cause: new Error("bad port") }));
  t.ok(other instanceof ModelLoadFailed);
  t.equal(other.message, "fetch failed: bad port");
  t.equal(classifyModelFailure("a string").message, "a string");
  t.equal(classifyModelFailure({ message: "an object" }).message, "an object");
  t.equal(describeError(new Error("outer", { cause: new Error("outer") })), "outer", "a repeated message once");
});
