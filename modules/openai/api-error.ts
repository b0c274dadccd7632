/**
 * An error answered in OpenAI's envelope: {"error": {"message", "type", "param", "code"}}.
 * Everything a client can get wrong, and every failure the platform reports, is one of these.
 */
export class ApiError extends Error {
  override name = "ApiError";
  constructor(
    readonly status: number,
    message: string,
    readonly type: string,
    readonly code: string | null = null,
    readonly param: string | null = null,
    /** Extra response headers (retry-after, rate-limit headers). */
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
  }

  toJSON(): { error: { message: string; type: string; param: string | null; code: string | null } } {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }
}

export const errors = {
  invalidJson: (detail: string) =>
    new ApiError(400, `We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON. ${detail})`, "invalid_request_error"),
  missingParam: (param: string) => new ApiError(400, `Missing required parameter: '${param}'.`, "invalid_request_error", "missing_required_parameter", param),
  invalidParam: (param: string, message: string, code = "invalid_value") => new ApiError(400, message, "invalid_request_error", code, param),
  unknownParam: (param: string) => new ApiError(400, `Unrecognized request argument supplied: ${param}`, "invalid_request_error", "unknown_parameter", param),
  contextLength: (message: string, param = "messages") => new ApiError(400, message, "invalid_request_error", "context_length_exceeded", param),
  missingKey: () =>
    new ApiError(401, "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).", "invalid_request_error", null),
  invalidKey: () => new ApiError(401, "Incorrect API key provided. You can find your API keys in your dashboard.", "invalid_request_error", "invalid_api_key"),
  modelNotFound: (model: string) =>
    new ApiError(404, `The model \`${model}\` does not exist or you do not have access to it.`, "invalid_request_error", "model_not_found", "model"),
  notFound: (message: string, param: string | null = null) => new ApiError(404, message, "invalid_request_error", null, param),
  unknownRoute: (method: string, path: string) =>
    new ApiError(404, `Unknown request URL: ${method} ${path}. Please check the URL for typos, or see the docs at https://platform.openai.com/docs/api-reference/.`, "invalid_request_error", "unknown_url"),
  methodNotAllowed: (method: string, path: string, allowed: string[]) =>
    new ApiError(405, `Method ${method} is not allowed for ${path}. Allowed: ${allowed.join(", ")}.`, "invalid_request_error", "method_not_allowed", null, { allow: allowed.join(", ") }),
  bodyTooLarge: (limit: number) =>
    new ApiError(413, `Request body too large: the limit is ${limit} bytes.`, "invalid_request_error", "request_too_large"),
  unsupportedMediaType: (type: string) =>
    new ApiError(415, `Unsupported Content-Type '${type}': send application/json.`, "invalid_request_error", "unsupported_media_type"),
  overloaded: (message: string, retryAfterSeconds = 1) =>
    new ApiError(503, message, "server_error", "server_overloaded", null, { "retry-after": String(retryAfterSeconds) }),
  unavailable: (message: string, retryAfterSeconds = 1) =>
    new ApiError(503, message, "server_error", "service_unavailable", null, { "retry-after": String(retryAfterSeconds) }),
  timeout: (message: string) => new ApiError(504, message, "server_error", "timeout"),
  internal: (requestId: string) =>
    new ApiError(500, `The server had an error while processing your request. Sorry about that! You can retry your request, or contact us if the error persists. (Please include the request ID ${requestId} in your message.)`, "server_error"),
};
