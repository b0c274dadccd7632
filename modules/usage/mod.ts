// The public surface of the usage module: per-minute rollups counted where requests run, folded
// into minute, hour and day buckets by the actor host, read by the usage API and the dashboard.
export { type UsageCounts, type UsageEvent, type UsageMessage, usageMessageSchema, UsageRecorder, type UsageRow } from "./usage-recorder.js";
export { type BucketWidth, type StoredUsageRow, type UsageBucket, UsageStore, WIDTH_SECONDS } from "./usage-store.js";
export { parseUsageQuery, type UsageBucketObject, type UsagePage, usagePage, type UsageQuery, type UsageResult } from "./usage-query.js";
export { LATENCY_BOUNDS_MS, latencyCount, latencyQuantile, type LatencyHistogram, type LatencySummary, mergeLatency, observeLatency, summarizeLatency } from "./latency-histogram.js";
export { overlapSeconds, RUN_KINDS, type RunKind, type RunSeconds, type RunSpan, runSecondsPerBucket } from "./run-time.js";
