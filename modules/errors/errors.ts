import * as Data from "effect/Data";

// What can go wrong, as tagged values. Domain code throws (or fails an Effect with) one of these;
// it never picks an HTTP status. The one mapping to OpenAI's error body and status is
// `openAIError` in modules/openai; retry decisions test tags (`isTransient`), never numbers.

/** A request field is missing, unknown or has a bad value. `param` names it (messages[0].role). */
export class InvalidParam extends Data.TaggedError("InvalidParam")<{
  readonly message: string;
  readonly param: string | null;
  /** invalid_value, invalid_type, missing_required_parameter, unknown_parameter, or a specific one. */
  readonly code: string;
}> {}

/** The body is not JSON (or not an object where one is required). */
export class InvalidJson extends Data.TaggedError("InvalidJson")<{ readonly detail: string }> {
  override get message(): string {
    return `We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON. ${this.detail})`;
  }
}

/** The prompt plus the requested output does not fit the model's context. */
export class ContextLengthExceeded extends Data.TaggedError("ContextLengthExceeded")<{
  readonly message: string;
  readonly param: string;
}> {}

/** A body, upload or encoded request is beyond its size limit. */
export class TooLarge extends Data.TaggedError("TooLarge")<{ readonly message: string; readonly param: string | null }> {}

/** The request head (its header lines) is beyond the gateway's limits. */
export class HeadersTooLarge extends Data.TaggedError("HeadersTooLarge")<{ readonly message: string }> {}

/**
 * The request head can be read more than one way (RFC 9112 §3.2, §6.3): a repeated or invalid
 * Content-Length, a Content-Length beside a Transfer-Encoding, a Transfer-Encoding other than
 * chunked, a missing or repeated Host. uWS and a proxy in front may each have framed (or routed)
 * it their own way, so nothing after it on the connection can be trusted. The message names the
 * header at fault.
 */
export class AmbiguousRequest extends Data.TaggedError("AmbiguousRequest")<{ readonly message: string }> {}

/** The client took too long to send its request body. */
export class RequestTimeout extends Data.TaggedError("RequestTimeout")<{ readonly message: string }> {}

/**
 * The gateway holds as many connections with a request in progress as it allows, from this
 * client address ("address") or in total ("server").
 */
export class TooManyConnections extends Data.TaggedError("TooManyConnections")<{ readonly scope: "address" | "server"; readonly limit: number }> {
  override get message(): string {
    return this.scope === "address"
      ? `Too many concurrent requests from your address (the limit is ${this.limit}). Please retry after the ones in progress finish.`
      : "The server is handling as many requests as it can. Please retry after a short wait.";
  }
}

export class UnsupportedMediaType extends Data.TaggedError("UnsupportedMediaType")<{ readonly contentType: string }> {
  override get message(): string {
    return `Unsupported Content-Type '${this.contentType}': send application/json.`;
  }
}

/** A resource of the caller's project that does not exist (or belongs to another project). */
export class NotFound extends Data.TaggedError("NotFound")<{
  readonly message: string;
  readonly param: string | null;
  readonly code: string | null;
}> {}

export class ModelNotFound extends Data.TaggedError("ModelNotFound")<{ readonly model: string }> {
  override get message(): string {
    return `The model \`${shown(this.model, 256)}\` does not exist or you do not have access to it.`;
  }
}

/** The thing exists already, or was used already (a redeemed invitation). */
export class Conflict extends Data.TaggedError("Conflict")<{ readonly message: string; readonly param: string | null; readonly code: string | null }> {}

/** The thing existed and is over (an expired invitation). */
export class Gone extends Data.TaggedError("Gone")<{ readonly message: string; readonly param: string | null; readonly code: string | null }> {}

export type UnauthenticatedReason = "missing_key" | "invalid_api_key" | "mismatched_project" | "mismatched_organization";

export class Unauthenticated extends Data.TaggedError("Unauthenticated")<{ readonly reason: UnauthenticatedReason }> {
  override get message(): string {
    switch (this.reason) {
      case "missing_key":
        return "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).";
      case "invalid_api_key":
        return "Incorrect API key provided. You can find your API keys in your dashboard.";
      case "mismatched_project":
        return "OpenAI-Project header should match project for API key";
      case "mismatched_organization":
        return "OpenAI-Organization header should match organization for API key";
    }
  }
}

/** Authenticated, but not allowed to do this (another project's resource behind a shared address). */
export class Forbidden extends Data.TaggedError("Forbidden")<{ readonly message: string; readonly code: string | null }> {}

/** Over a rate limit. `headers` are the rate-limit headers of the budget at the time. */
export class RateLimited extends Data.TaggedError("RateLimited")<{
  readonly message: string;
  readonly limit: "requests" | "tokens";
  /** False when the request can never be admitted (its estimate alone exceeds the limit). */
  readonly retryable: boolean;
  readonly headers: Readonly<Record<string, string>>;
}> {}

/** The router knows no such path. */
export class UnknownRoute extends Data.TaggedError("UnknownRoute")<{ readonly method: string; readonly path: string }> {
  override get message(): string {
    return `Unknown request URL: ${shown(this.method, 16)} ${shown(this.path, 256)}. Please check the URL for typos, or see the docs at https://platform.openai.com/docs/api-reference/.`;
  }
}

export class MethodNotAllowed extends Data.TaggedError("MethodNotAllowed")<{ readonly method: string; readonly path: string; readonly allowed: readonly string[] }> {
  override get message(): string {
    return `Method ${shown(this.method, 16)} is not allowed for ${shown(this.path, 256)}. Allowed: ${this.allowed.join(", ")}.`;
  }
}

/** No runner of the model can take the request now (none known, loading, or failed to load). */
export class NoRunner extends Data.TaggedError("NoRunner")<{
  readonly model: string;
  readonly state: "none" | "loading" | "failed";
  readonly retryAfterSeconds: number;
}> {
  override get message(): string {
    switch (this.state) {
      case "loading":
        return `The model ${this.model} is loading. Please retry shortly.`;
      case "failed":
        // The runner's own detail (file paths, library errors) stays in its log.
        return `The model ${this.model} is unavailable: its runners failed to load it. Please retry later.`;
      case "none":
        return `No runner is serving the model ${this.model} right now. Please retry shortly.`;
    }
  }
}

/** Every runner that was asked is full (queue bound reached) or draining. */
export class QueueFull extends Data.TaggedError("QueueFull")<{ readonly model: string; readonly detail: string }> {
  override get message(): string {
    return `The model is overloaded: ${this.detail}. Please retry after a short wait.`;
  }
}

/**
 * No sandbox host can start a sandbox now: none is heard from, or every one is full (`detail`
 * names the limit reached, with its figures: "memory: 3.9 of 4.0 GiB reserved, 1.0 GiB asked").
 */
export class NoSandboxHost extends Data.TaggedError("NoSandboxHost")<{ readonly state: "none" | "full"; readonly detail: string | null; readonly retryAfterSeconds: number }> {
  /** What keeps a sandbox from starting, as a sentence's clause (a queued job's `waiting_reason`). */
  get situation(): string {
    return this.state === "none" ? "no sandbox host is running" : `every sandbox host is full (${this.detail})`;
  }

  override get message(): string {
    const situation = this.situation;
    return `${situation[0]!.toUpperCase()}${situation.slice(1)}. ${this.state === "none" ? "Please retry shortly." : "Please retry after some sandboxes stop."}`;
  }
}

/** The runner of an admitted request went silent (crashed, partitioned). */
export class RunnerLost extends Data.TaggedError("RunnerLost")<{ readonly message: string }> {}

/** A hosted app gave no answer: no healthy instance, or the instance (or its host) was lost mid-exchange. */
export class AppUnavailable extends Data.TaggedError("AppUnavailable")<{ readonly message: string; readonly code: string }> {}

/** A hosted app's instance is serving as many requests as it may at once: refused untouched, worth a retry shortly. */
export class AppOverloaded extends Data.TaggedError("AppOverloaded")<{ readonly message: string }> {}

/** Events of an admitted request were lost on the way (a sequence gap). */
export class StreamInterrupted extends Data.TaggedError("StreamInterrupted")<{ readonly message: string }> {}

/** The request's deadline passed (queueing included), no runner answered in time, or a hosted app did not (`code` app_timeout). */
export class DeadlineExceeded extends Data.TaggedError("DeadlineExceeded")<{ readonly message: string; readonly code?: string }> {}

export type CancelReason = "client_closed" | "cancelled" | "batch_cancelled";

/** Stopped on purpose: the client left, the user cancelled, the batch was cancelled. */
export class Cancelled extends Data.TaggedError("Cancelled")<{ readonly reason: CancelReason }> {
  override get message(): string {
    return this.reason === "client_closed" ? "The client closed the request." : "The request was cancelled.";
  }
}

/** This process is shutting down and its drain ran out. */
export class ShuttingDown extends Data.TaggedError("ShuttingDown")<{}> {
  override get message(): string {
    return "The server is shutting down; the request was interrupted.";
  }
}

/** A dependency the request needs is not reachable now (no budget owner, JetStream down). */
export class Unavailable extends Data.TaggedError("Unavailable")<{ readonly message: string; readonly retryAfterSeconds: number }> {}

/** A bug or an unexpected failure: the client gets no details, the log gets `cause`. */
export class Internal extends Data.TaggedError("Internal")<{ readonly cause?: unknown }> {
  override get message(): string {
    return "internal error";
  }
}

export type DomainError =
  | InvalidParam
  | InvalidJson
  | ContextLengthExceeded
  | TooLarge
  | HeadersTooLarge
  | AmbiguousRequest
  | RequestTimeout
  | TooManyConnections
  | UnsupportedMediaType
  | NotFound
  | ModelNotFound
  | Conflict
  | Gone
  | Unauthenticated
  | Forbidden
  | RateLimited
  | UnknownRoute
  | MethodNotAllowed
  | NoRunner
  | QueueFull
  | NoSandboxHost
  | RunnerLost
  | AppUnavailable
  | AppOverloaded
  | StreamInterrupted
  | DeadlineExceeded
  | Cancelled
  | ShuttingDown
  | Unavailable
  | Internal;

const TAGS: ReadonlySet<string> = new Set<DomainError["_tag"]>([
  "InvalidParam", "InvalidJson", "ContextLengthExceeded", "TooLarge", "HeadersTooLarge", "AmbiguousRequest", "RequestTimeout", "TooManyConnections", "UnsupportedMediaType", "NotFound", "ModelNotFound",
  "Conflict", "Gone", "Unauthenticated", "Forbidden", "RateLimited", "UnknownRoute", "MethodNotAllowed", "NoRunner",
  "QueueFull", "NoSandboxHost", "RunnerLost", "AppUnavailable", "AppOverloaded", "StreamInterrupted", "DeadlineExceeded", "Cancelled", "ShuttingDown", "Unavailable", "Internal",
]);

export function isDomainError(err: unknown): err is DomainError {
  return err instanceof Error && typeof (err as { _tag?: unknown })._tag === "string" && TAGS.has((err as unknown as { _tag: string })._tag);
}

/** Any thrown value as a domain error: unknown failures become Internal (keeping the cause for the log). */
export function asDomainError(err: unknown): DomainError {
  if (isDomainError(err)) return err;
  if (isNatsOutage(err))
    return new Unavailable({ message: "The service is briefly unavailable while its messaging cluster fails over. Please retry your request.", retryAfterSeconds: 1 });
  return new Internal({ cause: err });
}

/**
 * A failure of the NATS fabric rather than of the request: a server that died mid-request, a
 * JetStream stream electing a new leader, a node still starting (the client's error names).
 * Another attempt a moment later, or on another gateway, succeeds: a 503 with retry-after.
 */
export function isNatsOutage(err: unknown): boolean {
  const e = err as { name?: unknown; code?: unknown; api_error?: { code?: number }; apiError?: () => { code?: number } } | null;
  if (!e || typeof e !== "object") return false;
  if (["TimeoutError", "JetStreamNotEnabled", "NoRespondersError", "ConnectionError", "ClosedConnectionError", "DrainingConnectionError"].includes(String(e.name))) return true;
  // The JetStream client's JetStreamApiError keeps the server's answer behind apiError() (a 503
  // is "JetStream system temporarily unavailable": no meta leader, as while a partitioned node rejoins).
  const status = typeof e.apiError === "function" ? e.apiError().code : e.api_error?.code;
  return status === 503;
}

/** Failures another attempt (later, or on another runner) may not see. */
export function isTransient(err: DomainError): boolean {
  switch (err._tag) {
    case "NoRunner":
    case "QueueFull":
    case "NoSandboxHost":
    case "RunnerLost":
    case "AppUnavailable":
    case "AppOverloaded":
    case "StreamInterrupted":
    case "DeadlineExceeded":
    case "ShuttingDown":
    case "Unavailable":
    case "Internal":
      return true;
    default:
      return false;
  }
}

/**
 * A value from the request as an error message may quote it: at most `max` characters (an id or
 * a query value may be kilobytes long; a message quotes enough to recognise it, not all of it).
 */
export function shown(value: string, max = 64): string {
  return value.length <= max ? value : `${value.slice(0, max)}…`;
}

/** Who is at fault: the request (a 4xx) or the platform (a 5xx). */
export function isClientError(err: DomainError): boolean {
  return !isTransient(err) && err._tag !== "Cancelled";
}

/** Constructors for the common cases, so that throw sites read as sentences. */
export const errors = {
  invalidJson: (detail: string) => new InvalidJson({ detail }),
  invalidParam: (param: string | null, message: string, code = "invalid_value") => new InvalidParam({ param, message, code }),
  missingParam: (param: string) => new InvalidParam({ param, message: `Missing required parameter: '${param}'.`, code: "missing_required_parameter" }),
  unknownParam: (param: string) => new InvalidParam({ param: shown(param), message: `Unrecognized request argument supplied: ${shown(param)}`, code: "unknown_parameter" }),
  contextLength: (message: string, param = "messages") => new ContextLengthExceeded({ message, param }),
  tooLarge: (message: string, param: string | null = null) => new TooLarge({ message, param }),
  bodyTooLarge: (limit: number) => new TooLarge({ message: `Request body too large: the limit is ${limit} bytes.`, param: null }),
  headersTooLarge: (message: string) => new HeadersTooLarge({ message }),
  ambiguousRequest: (message: string) => new AmbiguousRequest({ message }),
  requestTimeout: (message: string) => new RequestTimeout({ message }),
  tooManyConnections: (scope: "address" | "server", limit: number) => new TooManyConnections({ scope, limit }),
  notFound: (message: string, param: string | null = null, code: string | null = null) => new NotFound({ message, param, code }),
  modelNotFound: (model: string) => new ModelNotFound({ model }),
  conflict: (message: string, param: string | null = null, code: string | null = null) => new Conflict({ message, param, code }),
  gone: (message: string, param: string | null = null, code: string | null = null) => new Gone({ message, param, code }),
  unknownRoute: (method: string, path: string) => new UnknownRoute({ method, path }),
  methodNotAllowed: (method: string, path: string, allowed: readonly string[]) => new MethodNotAllowed({ method, path, allowed }),
  missingKey: () => new Unauthenticated({ reason: "missing_key" }),
  invalidKey: () => new Unauthenticated({ reason: "invalid_api_key" }),
  forbidden: (message: string, code: string | null = null) => new Forbidden({ message, code }),
  unavailable: (message: string, retryAfterSeconds = 1) => new Unavailable({ message, retryAfterSeconds }),
  deadline: (message: string, code = "timeout") => new DeadlineExceeded({ message, code }),
  cancelled: (reason: CancelReason = "cancelled") => new Cancelled({ reason }),
  internal: (cause?: unknown) => new Internal({ cause }),
  appUnavailable: (message: string, code = "app_unavailable") => new AppUnavailable({ message, code }),
  appOverloaded: (message: string) => new AppOverloaded({ message }),
};
