import t from "tap";
import { openAIError } from "../../modules/openai/mod.js";
import {
  Cancelled, ContextLengthExceeded, DeadlineExceeded, errors, Forbidden, Internal, MethodNotAllowed, NoRunner, NoSandboxHost, QueueFull, RateLimited,
  RunnerLost, AppOverloaded, AppUnavailable, shown, ShuttingDown, StreamInterrupted, Unauthenticated, Unavailable, UnsupportedMediaType, type DomainError,
} from "../../modules/errors/mod.js";

// The one mapping from domain errors to OpenAI's HTTP error: every tag's status, type, code,
// param and headers. The table is keyed by tag, so a new tag does not compile until it is here.

interface Expected {
  error: DomainError;
  status: number;
  type: string;
  code: string | null;
  param?: string | null;
  headers?: Record<string, string>;
}

const limitHeaders = { "x-ratelimit-limit-requests": "250", "retry-after": "18", "retry-after-ms": "17500" };

const cases: { [Tag in DomainError["_tag"]]: Expected } = {
  InvalidParam: { error: errors.invalidParam("messages[0].role", "Invalid value.", "invalid_value"), status: 400, type: "invalid_request_error", code: "invalid_value", param: "messages[0].role" },
  InvalidJson: { error: errors.invalidJson("Unexpected token"), status: 400, type: "invalid_request_error", code: null },
  ContextLengthExceeded: { error: new ContextLengthExceeded({ message: "too long", param: "input" }), status: 400, type: "invalid_request_error", code: "context_length_exceeded", param: "input" },
  TooLarge: { error: errors.tooLarge("too big", "file"), status: 413, type: "invalid_request_error", code: "request_too_large", param: "file" },
  HeadersTooLarge: { error: errors.headersTooLarge("Too many headers."), status: 431, type: "invalid_request_error", code: "request_header_fields_too_large" },
  AmbiguousRequest: { error: errors.ambiguousRequest("The request has more than one Content-Length header."), status: 400, type: "invalid_request_error", code: "ambiguous_request", param: null },
  RequestTimeout: { error: errors.requestTimeout("The body did not arrive in time."), status: 408, type: "invalid_request_error", code: "request_timeout" },
  TooManyConnections: { error: errors.tooManyConnections("address", 64), status: 429, type: "requests", code: "too_many_connections", headers: { "retry-after": "1" } },
  UnsupportedMediaType: { error: new UnsupportedMediaType({ contentType: "text/plain" }), status: 415, type: "invalid_request_error", code: "unsupported_media_type" },
  NotFound: { error: errors.notFound("No such file.", "file_id", "file_not_found"), status: 404, type: "invalid_request_error", code: "file_not_found", param: "file_id" },
  ModelNotFound: { error: errors.modelNotFound("x/y"), status: 404, type: "invalid_request_error", code: "model_not_found", param: "model" },
  Conflict: { error: errors.conflict("used", "code", "invitation_used"), status: 409, type: "invalid_request_error", code: "invitation_used", param: "code" },
  Gone: { error: errors.gone("expired", "code", "invitation_expired"), status: 410, type: "invalid_request_error", code: "invitation_expired", param: "code" },
  Unauthenticated: { error: new Unauthenticated({ reason: "mismatched_project" }), status: 401, type: "invalid_request_error", code: "mismatched_project" },
  Forbidden: { error: new Forbidden({ message: "no", code: "forbidden" }), status: 403, type: "invalid_request_error", code: "forbidden" },
  RateLimited: {
    error: new RateLimited({ message: "Rate limit reached", limit: "requests", retryable: true, headers: limitHeaders }),
    status: 429, type: "requests", code: "rate_limit_exceeded", headers: limitHeaders,
  },
  UnknownRoute: { error: errors.unknownRoute("GET", "/v1/nope"), status: 404, type: "invalid_request_error", code: "unknown_url" },
  MethodNotAllowed: { error: new MethodNotAllowed({ method: "PUT", path: "/v1/files", allowed: ["GET", "POST"] }), status: 405, type: "invalid_request_error", code: "method_not_allowed", headers: { allow: "GET, POST" } },
  NoRunner: { error: new NoRunner({ model: "m", state: "loading", retryAfterSeconds: 5 }), status: 503, type: "server_error", code: "service_unavailable", headers: { "retry-after": "5" } },
  QueueFull: { error: new QueueFull({ model: "m", detail: "every runner's queue is full" }), status: 503, type: "server_error", code: "server_overloaded", headers: { "retry-after": "1" } },
  NoSandboxHost: {
    error: new NoSandboxHost({ state: "full", detail: "memory: 3.9 of 4.0 GiB reserved, 1.0 GiB asked", retryAfterSeconds: 5 }),
    status: 503, type: "server_error", code: "service_unavailable", headers: { "retry-after": "5" },
  },
  RunnerLost: { error: new RunnerLost({ message: "silent" }), status: 502, type: "server_error", code: "runner_lost" },
  AppUnavailable: { error: new AppUnavailable({ message: "lost", code: "app_instance_lost" }), status: 502, type: "server_error", code: "app_instance_lost" },
  AppOverloaded: { error: new AppOverloaded({ message: "busy" }), status: 503, type: "server_error", code: "app_overloaded", headers: { "retry-after": "1" } },
  StreamInterrupted: { error: new StreamInterrupted({ message: "gap" }), status: 502, type: "server_error", code: "stream_interrupted" },
  DeadlineExceeded: { error: new DeadlineExceeded({ message: "late" }), status: 504, type: "server_error", code: "timeout" },
  Cancelled: { error: new Cancelled({ reason: "client_closed" }), status: 499, type: "invalid_request_error", code: "client_closed" },
  ShuttingDown: { error: new ShuttingDown(), status: 503, type: "server_error", code: "server_shutdown", headers: { "retry-after": "1" } },
  Unavailable: { error: new Unavailable({ message: "no budget owner", retryAfterSeconds: 2 }), status: 503, type: "server_error", code: "service_unavailable", headers: { "retry-after": "2" } },
  Internal: { error: new Internal({ cause: new Error("secret detail") }), status: 500, type: "server_error", code: null },
};

t.test("every tag: status, envelope and headers", async (t) => {
  for (const [tag, want] of Object.entries(cases)) {
    const got = openAIError(want.error, "req_42");
    t.equal(want.error._tag, tag, `the ${tag} case holds a ${tag}`);
    t.equal(got.status, want.status, `${tag}: status`);
    t.same(got.body, { error: { message: got.body.error.message, type: want.type, param: want.param ?? null, code: want.code } }, `${tag}: type, param, code`);
    t.same(got.headers, want.headers ?? {}, `${tag}: headers`);
    if (tag !== "Internal") t.equal(got.body.error.message, want.error.message, `${tag}: the error's own message`);
  }
});

t.test("an internal error says nothing of its cause and quotes the request id", async (t) => {
  const { body } = openAIError(new Internal({ cause: new Error("secret detail at /srv/x.ts:12") }), "req_42");
  t.notMatch(body.error.message, /secret|srv/);
  t.match(body.error.message, /request ID req_42/);
});

t.test("a missing key has no code; the other authentication failures name their reason", async (t) => {
  t.equal(openAIError(errors.missingKey(), "r").body.error.code, null);
  t.equal(openAIError(errors.invalidKey(), "r").body.error.code, "invalid_api_key");
  t.equal(openAIError(new Unauthenticated({ reason: "mismatched_organization" }), "r").body.error.code, "mismatched_organization");
});

t.test("a rate limit that can never pass says so; its headers are copies", async (t) => {
  const error = new RateLimited({ message: "too large", limit: "tokens", retryable: false, headers: limitHeaders });
  const got = openAIError(error, "r");
  t.equal(got.body.error.type, "tokens");
  t.same(got.headers, { ...limitHeaders, "x-should-retry": "false" });
  got.headers["x-extra"] = "1";
  t.notOk("x-extra" in error.headers, "the caller may add headers without touching the error's");
});

t.test("retry-after is whole seconds, at least 1", async (t) => {
  const retry = (seconds: number) => openAIError(new NoRunner({ model: "m", state: "none", retryAfterSeconds: seconds }), "r").headers["retry-after"];
  t.equal(retry(0), "1");
  t.equal(retry(0.2), "1");
  t.equal(retry(1), "1");
  t.equal(retry(1.01), "2");
  t.equal(retry(10), "10");
});

t.test("cancellations carry their reason as the code", async (t) => {
  t.equal(openAIError(new Cancelled({ reason: "batch_cancelled" }), "r").body.error.code, "batch_cancelled");
  t.equal(openAIError(errors.cancelled(), "r").body.error.message, "The request was cancelled.");
});

t.test("a message quotes at most 64 characters of a value from the request (an id may be kilobytes)", async (t) => {
  t.equal(shown("x".repeat(64)), "x".repeat(64), "at the limit: whole");
  t.equal(shown("x".repeat(65)), "x".repeat(64) + "…", "one past: cut");
  t.equal(shown("abc", 2), "ab…");
  const long = "/v1/" + "x".repeat(3000);
  t.ok(openAIError(errors.unknownRoute("GET", long), "r").body.error.message.length < 512, "an unknown 3 KB path is quoted in part");
  t.ok(openAIError(errors.unknownParam("p".repeat(3000)), "r").body.error.message.length < 256, "an unknown 3 KB parameter name too");
});
