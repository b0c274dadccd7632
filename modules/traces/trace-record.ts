import { randomToken } from "../../lib/ids.js";
import * as Schema from "effect/Schema";
import { valueSchema } from "../../lib/nats/kv-records.js";
import { openAIError } from "../openai/mod.js";
import type { Principal } from "../accounts/mod.js";
import type { RequestObservation, TraceEndpoint, TraceStatus } from "./observation.js";

// The trace of one `log: true` request, as stored in the trace stream and returned by
// GET /v1/traces/{id}. Credentials never get here: the key is named by its id, headers are not
// recorded. Bodies and the prompt are cut at a byte cap each, with `truncated` set.

export interface CappedText {
  /** UTF-8 text, cut at the cap on a character boundary. */
  text: string;
  /** Size of the whole original, in bytes. */
  bytes: number;
  truncated: boolean;
}

export interface TraceTimings {
  /** Unix ms: the request arrived at the gateway (the batch worker, for a batch line). */
  received_at: number;
  /** Milliseconds after arrival; null when the request never got there. */
  rate_limit_admitted_ms: number | null;
  runner_admitted_ms: number | null;
  /** Time the request waited in the runner's queue for a slot. */
  queue_wait_ms: number | null;
  first_token_ms: number | null;
  end_ms: number;
  /** Time to first token (first_token_ms) and total time (end_ms), repeated under their usual names. */
  ttft_ms: number | null;
  total_ms: number;
}

export interface Trace {
  object: "trace";
  id: string;
  request_id: string;
  /** Unix seconds of the end of the request. */
  created_at: number;
  organization_id: string;
  project_id: string;
  api_key_id: string;
  endpoint: TraceEndpoint | "batch";
  model: string;
  status: TraceStatus;
  http_status: number;
  error: { type: string; code: string | null; message: string } | null;
  stream: boolean;
  batch: boolean;
  runner_id: string | null;
  timings: TraceTimings;
  usage: { input_tokens: number; cached_input_tokens: number; output_tokens: number };
  finish_reasons: string[];
  request: CappedText;
  /** For a stream, the response reassembled from its chunks. */
  response: CappedText & { chunks: number };
  /** The prompt as the engine saw it (chat template applied); null when no runner admitted the request. */
  prompt: CappedText | null;
  /** OpenTelemetry GenAI semantic-convention attributes (gen_ai.*), and error.type. */
  attributes: Record<string, string | number | boolean | string[]>;
}

/** Trace ids carry the time they were made (ms, hex) so that a lookup starts where it was written. */
export const TRACE_ID = /^trace_([0-9a-f]{12})[0-9A-Za-z]{16}$/;

export function newTraceId(atMs: number): string {
  // randomToken draws from a pooled buffer: a fresh randomBytes per id cost several microseconds.
  return `trace_${atMs.toString(16).padStart(12, "0")}${randomToken(16)}`;
}

/** The time (ms) a trace id was made, or undefined for something that is not a trace id. */
export function traceIdTime(id: string): number | undefined {
  const m = TRACE_ID.exec(id);
  return m ? parseInt(m[1]!, 16) : undefined;
}

/** Text cut to at most `maxBytes` of UTF-8, never in the middle of a character. */
export function capText(value: Buffer | string | undefined, maxBytes: number): CappedText {
  if (value === undefined) return { text: "", bytes: 0, truncated: false };
  if (typeof value === "string") {
    // Most texts fit: measured without copying them into a Buffer and back (it showed in profiles).
    const bytes = Buffer.byteLength(value, "utf8");
    if (bytes <= maxBytes) return { text: value, bytes, truncated: false };
  }
  const buf = typeof value === "string" ? Buffer.from(value, "utf8") : value;
  if (buf.length <= maxBytes) return { text: buf.toString("utf8"), bytes: buf.length, truncated: false };
  let end = maxBytes;
  // Back up over continuation bytes (10xxxxxx) so the cut falls on a character boundary.
  while (end > 0 && (buf[end]! & 0xc0) === 0x80) end--;
  return { text: buf.subarray(0, end).toString("utf8"), bytes: buf.length, truncated: true };
}

export function statusOf(obs: RequestObservation, clientLeft: boolean): TraceStatus {
  if (clientLeft) return "client_disconnected";
  if (obs.error) return "error";
  if (obs.cancelled) return "cancelled";
  return "success";
}

const ms = (v: number | undefined) => (v === undefined ? null : Math.round(v * 100) / 100);

/** The trace of a finished request. */
export function buildTrace(
  obs: RequestObservation,
  input: { principal: Principal; httpStatus: number; clientLeft: boolean; maxBodyBytes: number; endpoint?: Trace["endpoint"] },
): Trace {
  obs.end();
  const end = obs.endMs!;
  const status = statusOf(obs, input.clientLeft);
  const usage = obs.effectiveUsage();
  const error = obs.error ? openAIError(obs.error, obs.requestId).body.error : undefined;
  const responseBody = obs.responseBody ?? obs.responseOf?.();
  const response = capText(responseBody === undefined ? undefined : typeof responseBody === "string" ? responseBody : JSON.stringify(responseBody), input.maxBodyBytes);
  const attributes: Trace["attributes"] = {
    "gen_ai.operation.name": "chat",
    "gen_ai.provider.name": "tributary",
    "gen_ai.request.model": obs.model,
    "gen_ai.response.model": obs.model,
    "gen_ai.usage.input_tokens": usage.inputTokens,
    "gen_ai.usage.output_tokens": usage.outputTokens,
    "gen_ai.response.finish_reasons": obs.finishReasons,
  };
  if (obs.responseId) attributes["gen_ai.response.id"] = obs.responseId;
  if (obs.request.maxTokens != null) attributes["gen_ai.request.max_tokens"] = obs.request.maxTokens;
  if (obs.request.temperature != null) attributes["gen_ai.request.temperature"] = obs.request.temperature;
  if (obs.request.topP != null) attributes["gen_ai.request.top_p"] = obs.request.topP;
  if (error) attributes["error.type"] = error.code ?? error.type;
  const endedAt = obs.receivedAt + end;
  return {
    object: "trace",
    id: newTraceId(Math.round(endedAt)),
    request_id: obs.requestId,
    created_at: Math.floor(endedAt / 1000),
    organization_id: input.principal.organizationId,
    project_id: input.principal.projectId,
    api_key_id: input.principal.keyId,
    endpoint: input.endpoint ?? obs.endpoint,
    model: obs.model,
    status,
    http_status: input.httpStatus,
    error: error ? { type: error.type, code: error.code, message: error.message } : null,
    stream: obs.stream,
    batch: obs.batch,
    runner_id: obs.runnerId || null,
    timings: {
      received_at: obs.receivedAt,
      rate_limit_admitted_ms: ms(obs.rateLimitAdmittedMs),
      runner_admitted_ms: ms(obs.runnerAdmittedMs),
      queue_wait_ms: obs.queueWaitMs ?? null,
      first_token_ms: ms(obs.firstTokenMs),
      end_ms: ms(end)!,
      ttft_ms: ms(obs.firstTokenMs),
      total_ms: ms(end)!,
    },
    usage: { input_tokens: usage.inputTokens, cached_input_tokens: usage.cachedInputTokens, output_tokens: usage.outputTokens },
    finish_reasons: obs.finishReasons,
    request: capText(obs.requestBody, input.maxBodyBytes),
    response: { text: response.text, bytes: response.bytes, truncated: response.truncated, chunks: obs.chunks },
    prompt: obs.renderedPrompt === undefined ? null : capText(obs.renderedPrompt, input.maxBodyBytes),
    attributes,
  };
}

const Str = Schema.String;
const Num = Schema.Number;
const NullNum = Schema.NullOr(Num);
const Capped = Schema.Struct({ text: Str, bytes: Num, truncated: Schema.Boolean });

/** How a stored trace is read back. */
export const traceSchema = valueSchema<Trace>()(
  Schema.Struct({
    object: Schema.Literal("trace"),
    id: Str,
    request_id: Str,
    created_at: Num,
    organization_id: Str,
    project_id: Str,
    api_key_id: Str,
    endpoint: Schema.Literals(["/v1/chat/completions", "/v1/responses", "/v1/responses/{name}", "batch"]),
    model: Str,
    status: Schema.Literals(["success", "error", "cancelled", "client_disconnected"]),
    http_status: Num,
    error: Schema.NullOr(Schema.Struct({ type: Str, code: Schema.NullOr(Str), message: Str })),
    stream: Schema.Boolean,
    batch: Schema.Boolean,
    runner_id: Schema.NullOr(Str),
    timings: Schema.Struct({
      received_at: Num,
      rate_limit_admitted_ms: NullNum,
      runner_admitted_ms: NullNum,
      queue_wait_ms: NullNum,
      first_token_ms: NullNum,
      end_ms: Num,
      ttft_ms: NullNum,
      total_ms: Num,
    }),
    usage: Schema.Struct({ input_tokens: Num, cached_input_tokens: Num, output_tokens: Num }),
    finish_reasons: Schema.Array(Str),
    request: Capped,
    response: Schema.Struct({ text: Str, bytes: Num, truncated: Schema.Boolean, chunks: Num }),
    prompt: Schema.NullOr(Capped),
    attributes: Schema.Record(Str, Schema.Union([Str, Num, Schema.Boolean, Schema.Array(Str)])),
  }),
);
