import type { DomainError } from "../errors/mod.js";

// The one mapping from domain errors to OpenAI's error: the HTTP status, the envelope
// {"error": {"message", "type", "param", "code"}} and the headers that go with it. The gateway
// answers with it; batch output files carry it per line (their `status_code` and `body`).

export interface OpenAIErrorBody {
  error: { message: string; type: string; param: string | null; code: string | null };
}

export interface OpenAIError {
  status: number;
  body: OpenAIErrorBody;
  headers: Record<string, string>;
}

const INVALID = "invalid_request_error";
const SERVER = "server_error";

const of = (status: number, message: string, type: string, code: string | null, param: string | null = null, headers: Record<string, string> = {}): OpenAIError => ({
  status,
  body: { error: { message, type, param, code } },
  headers,
});

const retryAfter = (seconds: number) => ({ "retry-after": String(Math.max(1, Math.ceil(seconds))) });

/** The status, body and headers a client gets for `err`. `requestId` is quoted in a 500. */
export function openAIError(err: DomainError, requestId: string): OpenAIError {
  switch (err._tag) {
    case "InvalidParam":
      return of(400, err.message, INVALID, err.code, err.param);
    case "InvalidJson":
      return of(400, err.message, INVALID, null);
    case "ContextLengthExceeded":
      return of(400, err.message, INVALID, "context_length_exceeded", err.param);
    case "TooLarge":
      return of(413, err.message, INVALID, "request_too_large", err.param);
    case "HeadersTooLarge":
      return of(431, err.message, INVALID, "request_header_fields_too_large");
    case "AmbiguousRequest":
      return of(400, err.message, INVALID, "ambiguous_request");
    case "RequestTimeout":
      return of(408, err.message, INVALID, "request_timeout");
    case "TooManyConnections":
      return err.scope === "address"
        ? of(429, err.message, "requests", "too_many_connections", null, retryAfter(1))
        : of(503, err.message, SERVER, "server_overloaded", null, retryAfter(1));
    case "UnsupportedMediaType":
      return of(415, err.message, INVALID, "unsupported_media_type");
    case "NotFound":
      return of(404, err.message, INVALID, err.code, err.param);
    case "ModelNotFound":
      return of(404, err.message, INVALID, "model_not_found", "model");
    case "Conflict":
      return of(409, err.message, INVALID, err.code, err.param);
    case "Gone":
      return of(410, err.message, INVALID, err.code, err.param);
    case "Unauthenticated":
      return of(401, err.message, INVALID, err.reason === "missing_key" ? null : err.reason);
    case "Forbidden":
      return of(403, err.message, INVALID, err.code);
    case "RateLimited":
      return of(429, err.message, err.limit, "rate_limit_exceeded", null, err.retryable ? { ...err.headers } : { ...err.headers, "x-should-retry": "false" });
    case "UnknownRoute":
      return of(404, err.message, INVALID, "unknown_url");
    case "MethodNotAllowed":
      return of(405, err.message, INVALID, "method_not_allowed", null, { allow: err.allowed.join(", ") });
    case "NoRunner":
      return of(503, err.message, SERVER, "service_unavailable", null, retryAfter(err.retryAfterSeconds));
    case "QueueFull":
      return of(503, err.message, SERVER, "server_overloaded", null, retryAfter(1));
    case "NoSandboxHost":
      return of(503, err.message, SERVER, "service_unavailable", null, retryAfter(err.retryAfterSeconds));
    case "RunnerLost":
      return of(502, err.message, SERVER, "runner_lost");
    case "AppUnavailable":
      return of(502, err.message, SERVER, err.code);
    case "AppOverloaded":
      // The app's capacity, not the caller's rate: a 503 (as a reverse proxy's connection limit answers), retried shortly.
      return of(503, err.message, SERVER, "app_overloaded", null, retryAfter(1));
    case "StreamInterrupted":
      return of(502, err.message, SERVER, "stream_interrupted");
    case "DeadlineExceeded":
      return of(504, err.message, SERVER, err.code ?? "timeout");
    case "Cancelled":
      return of(499, err.message, INVALID, err.reason);
    case "ShuttingDown":
      return of(503, err.message, SERVER, "server_shutdown", null, retryAfter(1));
    case "Unavailable":
      return of(503, err.message, SERVER, "service_unavailable", null, retryAfter(err.retryAfterSeconds));
    case "Internal":
      return of(
        500,
        `The server had an error while processing your request. Sorry about that! You can retry your request, or contact us if the error persists. (Please include the request ID ${requestId} in your message.)`,
        SERVER,
        null,
      );
  }
}
