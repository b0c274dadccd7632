import * as Data from "effect/Data";

// Why a runner could not get or load its model's file, as tagged values with a message a person
// can act on. The runner logs the message as `err` and the tag as `cause`, its heartbeats carry
// the message, and `tributary start` says from them what is wrong and what to do.

/** The network is down or the host is unreachable (DNS, refused or reset connections, timeouts). */
export class NoNetwork extends Data.TaggedError("NoNetwork")<{ readonly detail: string }> {
  override get message(): string {
    return `no network: ${this.detail}`;
  }
}

/** The server answered a download with an error status. */
export class HttpStatus extends Data.TaggedError("HttpStatus")<{ readonly url: string; readonly status: number; readonly tokenSent: boolean }> {
  override get message(): string {
    if (this.status === 404) return `not found at ${this.url}`;
    if (this.status === 401 || this.status === 403)
      return this.tokenSent
        ? `${this.url} refused the token in HF_TOKEN (HTTP ${this.status}): check that it may read this repository`
        : `${this.url} needs a token: set HF_TOKEN (HTTP ${this.status}: a gated or private model)`;
    return `HTTP ${this.status} from ${this.url}`;
  }
}

/** The file's sha256 is not the one expected (the catalog's, else the one Hugging Face publishes). */
export class ChecksumMismatch extends Data.TaggedError("ChecksumMismatch")<{
  /** The URL downloaded, or the local path. */
  readonly source: string;
  readonly expected: string;
  readonly actual: string;
  /** A download that was deleted (the next attempt starts over). */
  readonly discarded: boolean;
}> {
  override get message(): string {
    return `sha256 mismatch for ${this.source}: expected ${this.expected}, got ${this.actual}${this.discarded ? "; the download was discarded" : ""}`;
  }
}

/** No space left for the file (ENOSPC, or a disk quota). */
export class DiskFull extends Data.TaggedError("DiskFull")<{ readonly detail: string }> {
  override get message(): string {
    return `disk full: ${this.detail}`;
  }
}

/** A local model file the catalog names does not exist. */
export class ModelFileMissing extends Data.TaggedError("ModelFileMissing")<{ readonly path: string }> {
  override get message(): string {
    return `model file not found: ${this.path}`;
  }
}

/** The file is there but is not a GGUF model the engine can load (corrupt, truncated, another format). */
export class InvalidGguf extends Data.TaggedError("InvalidGguf")<{ readonly path: string; readonly detail: string }> {
  override get message(): string {
    return `not a valid GGUF model: ${this.path} (${this.detail})`;
  }
}

/** Anything else: the error's own message, its causes included. */
export class ModelLoadFailed extends Data.TaggedError("ModelLoadFailed")<{ readonly detail: string }> {
  override get message(): string {
    return this.detail;
  }
}

export type ModelFileFailure = NoNetwork | HttpStatus | ChecksumMismatch | DiskFull | ModelFileMissing | InvalidGguf | ModelLoadFailed;

const failureTags = new Set(["NoNetwork", "HttpStatus", "ChecksumMismatch", "DiskFull", "ModelFileMissing", "InvalidGguf", "ModelLoadFailed"]);

/** The failures that happen while downloading (what `tributary start` calls "cannot download"). */
export const downloadFailureTags: ReadonlySet<string> = new Set(["NoNetwork", "HttpStatus", "DiskFull"]);

// System error codes (Node's `code`, undici's for fetch) that mean the host cannot be reached.
const networkCodes = new Set([
  "ENOTFOUND", "EAI_AGAIN", "EAI_FAIL", "EAI_NONAME", "ECONNREFUSED", "ECONNRESET", "ECONNABORTED", "ENETUNREACH", "ENETDOWN",
  "EHOSTUNREACH", "EHOSTDOWN", "ETIMEDOUT", "EPIPE", "UND_ERR_CONNECT_TIMEOUT", "UND_ERR_HEADERS_TIMEOUT", "UND_ERR_BODY_TIMEOUT", "UND_ERR_SOCKET",
]);
const diskFullCodes = new Set(["ENOSPC", "EDQUOT"]);

interface ErrorLike {
  message?: unknown;
  code?: unknown;
  name?: unknown;
  cause?: unknown;
  errors?: unknown;
}

const isObject = (value: unknown): value is ErrorLike => typeof value === "object" && value !== null;

/** The error, then its causes and an AggregateError's errors (fetch's "fetch failed" holds the system error as its cause). */
function* causeChain(err: unknown, depth = 0): Generator<ErrorLike> {
  if (!isObject(err) || depth > 5) return;
  yield err;
  yield* causeChain(err.cause, depth + 1);
  if (Array.isArray(err.errors)) for (const inner of err.errors) yield* causeChain(inner, depth + 1);
}

/** An error's message; an AggregateError of connection attempts has none, its first error does. */
function messageOf(err: ErrorLike): string {
  if (typeof err.message === "string" && err.message !== "") return err.message;
  const first = Array.isArray(err.errors) ? err.errors.find(isObject) : undefined;
  if (first) return messageOf(first);
  return typeof err.code === "string" ? err.code : String(err);
}

/** "fetch failed: getaddrinfo ENOTFOUND huggingface.co": the message, then each cause's. */
export function describeError(err: unknown): string {
  if (!isObject(err)) return String(err);
  const parts: string[] = [];
  for (let e: unknown = err, depth = 0; isObject(e) && depth < 5; e = e.cause, depth++) {
    const message = messageOf(e);
    if (parts.at(-1) !== message) parts.push(message);
  }
  return parts.join(": ");
}

/**
 * What a model load failure was: a failure already tagged stays as it is; a system error (or one
 * in its causes) with a network code is NoNetwork, with ENOSPC or EDQUOT DiskFull; a timeout
 * (AbortSignal.timeout's TimeoutError) is NoNetwork; anything else is ModelLoadFailed with its
 * messages.
 */
export function classifyModelFailure(err: unknown): ModelFileFailure {
  if (isObject(err) && typeof (err as { _tag?: unknown })._tag === "string" && failureTags.has((err as { _tag: string })._tag))
    return err as ModelFileFailure;
  for (const e of causeChain(err)) {
    if (typeof e.code === "string" && networkCodes.has(e.code)) return new NoNetwork({ detail: messageOf(e) });
    if (typeof e.code === "string" && diskFullCodes.has(e.code)) return new DiskFull({ detail: messageOf(e) });
    if (e.name === "TimeoutError") return new NoNetwork({ detail: messageOf(e) });
  }
  return new ModelLoadFailed({ detail: describeError(err) });
}
