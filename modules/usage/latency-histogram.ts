// Latency in usage rows: counts per fixed bucket of milliseconds. The bounds are the same for every
// row in every process, so rows add element by element and minute, hour and day buckets fold
// exactly; a percentile is computed from the counts when read (linear within its bucket, as
// Prometheus' histogram_quantile does), so it is as precise as the bucket it falls in: about
// ±20% (bounds step by 1.5 to 2x). Changing the bounds would make old and new rows disagree:
// they are part of the stored format.

/** Upper bounds (inclusive, ms) of the buckets; a last bucket counts everything above. */
export const LATENCY_BOUNDS_MS: readonly number[] = [
  1, 2, 3, 5, 7, 10, 15, 20, 30, 50, 70, 100, 150, 200, 300, 500, 700, 1_000, 1_500, 2_000, 3_000, 5_000, 7_000, 10_000, 15_000, 20_000, 30_000,
  60_000, 120_000, 300_000, 600_000,
];
/** Counts per histogram: one per bound, and the overflow. */
export const LATENCY_BUCKETS = LATENCY_BOUNDS_MS.length + 1;

/**
 * Counts per bucket, trailing empty buckets left out (most requests are fast: a row stays short).
 * Absent in rows written before latency was kept: read as no observations.
 */
export type LatencyHistogram = number[];

function bucketOf(ms: number): number {
  // Binary search: the first bound >= ms.
  let lo = 0;
  let hi = LATENCY_BOUNDS_MS.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (LATENCY_BOUNDS_MS[mid]! >= ms) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

/** Counts one observation of `ms` into `h`. */
export function observeLatency(h: LatencyHistogram, ms: number): void {
  if (!Number.isFinite(ms) || ms < 0) return;
  const i = bucketOf(ms);
  while (h.length <= i) h.push(0);
  h[i]!++;
}

/** Adds `from` into `into`, bucket by bucket. */
export function mergeLatency(into: LatencyHistogram, from: readonly number[] | undefined): void {
  if (!from) return;
  while (into.length < from.length) into.push(0);
  for (let i = 0; i < from.length; i++) into[i]! += from[i]!;
}

export function latencyCount(h: readonly number[] | undefined): number {
  let n = 0;
  for (const c of h ?? []) n += c;
  return n;
}

/**
 * The `q` quantile (0 < q <= 1) in ms, or null with no observations. Within its bucket the value
 * is interpolated linearly between the bucket's bounds; in the overflow bucket it is the last bound.
 */
export function latencyQuantile(h: readonly number[] | undefined, q: number): number | null {
  const total = latencyCount(h);
  if (!h || total === 0) return null;
  const rank = q * total;
  let seen = 0;
  for (let i = 0; i < h.length; i++) {
    const c = h[i]!;
    if (c > 0 && seen + c >= rank) {
      if (i >= LATENCY_BOUNDS_MS.length) return LATENCY_BOUNDS_MS.at(-1)!;
      const lower = i === 0 ? 0 : LATENCY_BOUNDS_MS[i - 1]!;
      const upper = LATENCY_BOUNDS_MS[i]!;
      return lower + (upper - lower) * Math.max(0, Math.min(1, (rank - seen) / c));
    }
    seen += c;
  }
  return LATENCY_BOUNDS_MS.at(-1)!;
}

/** The extension object of a usage result: counts and percentiles of TTFT and request latency. */
export interface LatencySummary {
  count: number;
  p50: number | null;
  p95: number | null;
  p99: number | null;
}

export function summarizeLatency(h: readonly number[] | undefined): LatencySummary {
  const round = (v: number | null) => (v === null ? null : Math.round(v * 10) / 10);
  return { count: latencyCount(h), p50: round(latencyQuantile(h, 0.5)), p95: round(latencyQuantile(h, 0.95)), p99: round(latencyQuantile(h, 0.99)) };
}
