import { errors } from "../errors/mod.js";
import type { UsageStore, BucketWidth, StoredUsageRow } from "./usage-store.js";
import { WIDTH_SECONDS } from "./usage-store.js";
import { mergeLatency, summarizeLatency, type LatencyHistogram, type LatencySummary } from "./latency-histogram.js";

// GET /v1/organization/usage/completions in OpenAI's shape: time buckets of a width, each with
// results summed over the rows that pass the filters, one result per group (group_by).

const GROUP_FIELDS = ["project_id", "user_id", "api_key_id", "model", "batch", "service_tier"] as const;
type GroupField = (typeof GROUP_FIELDS)[number];

const LIMITS: Record<BucketWidth, { default: number; max: number }> = {
  "1d": { default: 7, max: 31 },
  "1h": { default: 24, max: 168 },
  "1m": { default: 60, max: 1440 },
};
const KNOWN = new Set(["start_time", "end_time", "bucket_width", "project_ids", "user_ids", "api_key_ids", "models", "batch", "group_by", "limit", "page"]);
const MAX_TIME = 2 ** 32 - 1;
/** Values one list filter may hold. */
const MAX_FILTER_VALUES = 100;

export interface UsageQuery {
  startTime: number;
  /** Exclusive; undefined: now, when the page is read. */
  endTime: number | undefined;
  width: BucketWidth;
  projectIds: string[] | undefined;
  userIds: string[] | undefined;
  apiKeyIds: string[] | undefined;
  models: string[] | undefined;
  batch: boolean | undefined;
  groupBy: GroupField[];
  limit: number;
  /** Unix seconds of the first bucket of this page. */
  page: number | undefined;
}

function time(params: URLSearchParams, name: string, required: boolean): number | undefined {
  const raw = params.get(name);
  if (raw === null) {
    if (required) throw errors.missingParam(name);
    return undefined;
  }
  const v = /^\d{1,10}$/.test(raw) ? Number(raw) : NaN;
  if (!(v >= 0 && v <= MAX_TIME)) throw errors.invalidParam(name, `Invalid value for '${name}': expected Unix seconds (an integer from 0 to ${MAX_TIME}), got '${raw.slice(0, 64)}'.`);
  return v;
}

/** A list parameter, as `name=a&name=b` or `name[]=a&name[]=b`; each value checked by `valid`. */
function list(params: URLSearchParams, name: string, valid: (v: string) => boolean, what: string): string[] | undefined {
  const values = [...params.getAll(name), ...params.getAll(`${name}[]`)];
  if (values.length === 0) return undefined;
  if (values.length > MAX_FILTER_VALUES) throw errors.invalidParam(name, `Invalid value for '${name}': at most ${MAX_FILTER_VALUES} values.`);
  for (const v of values) if (!valid(v)) throw errors.invalidParam(name, `Invalid value for '${name}': '${v.slice(0, 64)}' is not ${what}.`);
  return [...new Set(values)];
}

const isId = (v: string) => /^[A-Za-z0-9_-]{1,64}$/.test(v);

export function parseUsageQuery(params: URLSearchParams): UsageQuery {
  for (const name of params.keys()) if (!KNOWN.has(name.replace(/\[\]$/, ""))) throw errors.unknownParam(name.slice(0, 64));
  const startTime = time(params, "start_time", true)!;
  const endTime = time(params, "end_time", false);
  if (endTime !== undefined && endTime <= startTime) throw errors.invalidParam("end_time", "Invalid value for 'end_time': it must be after 'start_time'.");
  const rawWidth = params.get("bucket_width") ?? "1d";
  if (!(rawWidth in WIDTH_SECONDS)) throw errors.invalidParam("bucket_width", `Invalid value for 'bucket_width': expected '1m', '1h' or '1d', got '${rawWidth.slice(0, 64)}'.`);
  const width = rawWidth as BucketWidth;
  const rawLimit = params.get("limit");
  let limit = LIMITS[width].default;
  if (rawLimit !== null) {
    limit = /^\d{1,5}$/.test(rawLimit) ? Number(rawLimit) : NaN;
    if (!(limit >= 1 && limit <= LIMITS[width].max))
      throw errors.invalidParam("limit", `Invalid value for 'limit': with bucket_width ${width}, expected an integer between 1 and ${LIMITS[width].max}, got '${rawLimit.slice(0, 64)}'.`);
  }
  const rawBatch = params.get("batch");
  if (rawBatch !== null && rawBatch !== "true" && rawBatch !== "false") throw errors.invalidParam("batch", `Invalid value for 'batch': expected true or false, got '${rawBatch.slice(0, 64)}'.`);
  const groupBy = (list(params, "group_by", (v) => (GROUP_FIELDS as readonly string[]).includes(v), `one of ${GROUP_FIELDS.join(", ")}`) ?? []) as GroupField[];
  const rawPage = params.get("page");
  let page: number | undefined;
  if (rawPage !== null) {
    const m = /^page_(\d{1,10})$/.exec(rawPage);
    page = m ? Number(m[1]) : NaN;
    if (!(page! >= startTime && page! <= MAX_TIME && (endTime === undefined || page! < endTime)))
      throw errors.invalidParam("page", "Invalid value for 'page': pass the next_page of the previous response (with the same start_time and end_time).");
  }
  return {
    startTime,
    endTime,
    width,
    projectIds: list(params, "project_ids", isId, "a project id"),
    userIds: list(params, "user_ids", isId, "a user id"),
    apiKeyIds: list(params, "api_key_ids", isId, "an API key id"),
    models: list(params, "models", (v) => v.length >= 1 && v.length <= 256, "a model id"),
    batch: rawBatch === null ? undefined : rawBatch === "true",
    groupBy,
    limit,
    page,
  };
}

export interface UsageResult {
  object: "organization.usage.completions.result";
  input_tokens: number;
  input_cached_tokens: number;
  output_tokens: number;
  input_audio_tokens: number;
  output_audio_tokens: number;
  num_model_requests: number;
  /** Tributary's own field: requests that ended in an error. */
  num_model_request_errors: number;
  project_id: string | null;
  user_id: string | null;
  api_key_id: string | null;
  model: string | null;
  batch: boolean | null;
  service_tier: string | null;
  /**
   * Tributary's own field: percentiles (ms) of the time to first token (requests that had one)
   * and of the end-to-end time of the requests a runner took, computed from the bucket counts of
   * the rows this result sums (so they are exact for any bucket width and grouping, to the
   * precision of the histogram's buckets).
   */
  latency_ms: { ttft: LatencySummary; request: LatencySummary };
  /** The histograms themselves, only when asked for (the dashboard merges them across buckets). */
  histograms?: { ttft_ms: LatencyHistogram; request_ms: LatencyHistogram };
}

export interface UsageBucketObject {
  object: "bucket";
  start_time: number;
  end_time: number;
  results: UsageResult[];
}

export interface UsagePage {
  object: "page";
  data: UsageBucketObject[];
  has_more: boolean;
  next_page: string | null;
}

/**
 * Reads the page of buckets the query asks for, over the organization's projects (`projects`:
 * every project of the caller's organization; project_ids narrows them, and an id of another
 * organization matches nothing).
 */
export async function usagePage(store: UsageStore, projects: readonly string[], q: UsageQuery, options: { histograms?: boolean; nowSeconds?: number } = {}): Promise<UsagePage> {
  const w = WIDTH_SECONDS[q.width];
  const first = Math.floor((q.page ?? q.startTime) / w) * w;
  // Without end_time the range ends now (OpenAI's default), so has_more and next_page lead a
  // client that pages on next_page to the current bucket, not only through the first page.
  const end = q.endTime ?? options.nowSeconds ?? Math.floor(Date.now() / 1000);
  const starts: number[] = [];
  for (let s = first; s < end && starts.length < q.limit; s += w) starts.push(s);
  const wanted = q.projectIds ? projects.filter((p) => q.projectIds!.includes(p)) : [...projects];
  const data: UsageBucketObject[] = [];
  // Reads in parallel, a bounded number at a time.
  const reads: Array<() => Promise<{ start: number; project: string; rows: StoredUsageRow[] }>> = [];
  for (const start of starts) for (const project of wanted) reads.push(async () => ({ start, project, rows: await store.read(q.width, start, project) }));
  const got: Array<{ start: number; project: string; rows: StoredUsageRow[] }> = [];
  for (let i = 0; i < reads.length; i += 64) got.push(...(await Promise.all(reads.slice(i, i + 64).map((r) => r()))));
  for (const start of starts) {
    const groups = new Map<string, UsageResult>();
    const histograms = new Map<UsageResult, { ttft_ms: LatencyHistogram; request_ms: LatencyHistogram }>();
    for (const g of got) {
      if (g.start !== start) continue;
      for (const row of g.rows) {
        if (q.apiKeyIds && !q.apiKeyIds.includes(row.api_key_id)) continue;
        if (q.models && !q.models.includes(row.model)) continue;
        if (q.batch !== undefined && row.batch !== q.batch) continue;
        // Rows carry no user: a user_ids filter matches nothing (requests are made with keys).
        if (q.userIds) continue;
        const by = (f: GroupField) => q.groupBy.includes(f);
        const result: UsageResult = {
          object: "organization.usage.completions.result",
          input_tokens: 0,
          input_cached_tokens: 0,
          output_tokens: 0,
          input_audio_tokens: 0,
          output_audio_tokens: 0,
          num_model_requests: 0,
          num_model_request_errors: 0,
          project_id: by("project_id") ? g.project : null,
          user_id: null,
          api_key_id: by("api_key_id") ? row.api_key_id : null,
          model: by("model") ? row.model : null,
          batch: by("batch") ? row.batch : null,
          service_tier: by("service_tier") ? "default" : null,
          latency_ms: { ttft: summarizeLatency(undefined), request: summarizeLatency(undefined) },
        };
        const key = JSON.stringify([result.project_id, result.api_key_id, result.model, result.batch]);
        const into = groups.get(key) ?? (groups.set(key, result), result);
        into.input_tokens += row.input_tokens;
        into.input_cached_tokens += row.input_cached_tokens;
        into.output_tokens += row.output_tokens;
        into.num_model_requests += row.requests;
        into.num_model_request_errors += row.errors;
        const h = histograms.get(into) ?? (histograms.set(into, { ttft_ms: [], request_ms: [] }), histograms.get(into)!);
        mergeLatency(h.ttft_ms, row.ttft_ms);
        mergeLatency(h.request_ms, row.latency_ms);
      }
    }
    for (const [result, h] of histograms) {
      result.latency_ms = { ttft: summarizeLatency(h.ttft_ms), request: summarizeLatency(h.request_ms) };
      if (options.histograms) result.histograms = h;
    }
    data.push({ object: "bucket", start_time: start, end_time: start + w, results: [...groups.values()] });
  }
  const next = starts.length > 0 ? starts.at(-1)! + w : first;
  const hasMore = next < end;
  return { object: "page", data, has_more: hasMore, next_page: hasMore ? `page_${next}` : null };
}
