/** Percentile of an unsorted sample (nearest rank); NaN for an empty sample. */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = Float64Array.from(values).sort();
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[rank]!;
}

/**
 * The middle of the finite values of an unsorted sample: the upper of the two middle ones for an
 * even count (a value that was measured, not an average of two; of two rounds, the higher); NaN
 * when there is none. (percentile(values, 50) takes the lower one.)
 */
export function median(values: readonly number[]): number {
  const sorted = Float64Array.from(values.filter(Number.isFinite)).sort();
  return sorted.length === 0 ? NaN : sorted[Math.floor(sorted.length / 2)]!;
}

export function mean(values: readonly number[]): number {
  return values.length === 0 ? NaN : values.reduce((a, b) => a + b, 0) / values.length;
}

export const fmt = (n: number, digits = 1): string => (Number.isFinite(n) ? n.toFixed(digits) : "n/a");
