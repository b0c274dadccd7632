// The platform's run time (sandboxes, jobs, hosted apps' instances) is not metered as it runs:
// it is read from the records, which say when each thing started and ended. These are the sums
// over time buckets of such spans, for the dashboard's usage page.

export const RUN_KINDS = ["sandbox", "job", "app"] as const;
export type RunKind = (typeof RUN_KINDS)[number];

/** Something that ran from `start` to `end` (Unix seconds; `end` is now for what still runs). */
export interface RunSpan {
  kind: RunKind;
  start: number;
  end: number;
}

/** Seconds of each kind. */
export type RunSeconds = Record<RunKind, number>;

const none = (): RunSeconds => ({ sandbox: 0, job: 0, app: 0 });

/** Seconds of `span` that fall in [from, to). */
export function overlapSeconds(span: RunSpan, from: number, to: number): number {
  return Math.max(0, Math.min(span.end, to) - Math.max(span.start, from));
}

/**
 * The seconds each kind ran in each bucket [start, start + width) of `starts`, and in all of
 * them together; spans count only where they overlap a bucket, and several at once add up.
 */
export function runSecondsPerBucket(spans: readonly RunSpan[], starts: readonly number[], width: number): { buckets: RunSeconds[]; total: RunSeconds } {
  const buckets = starts.map(() => none());
  const total = none();
  for (const span of spans) {
    if (!(span.end > span.start)) continue;
    starts.forEach((start, i) => {
      const seconds = overlapSeconds(span, start, start + width);
      buckets[i]![span.kind] += seconds;
      total[span.kind] += seconds;
    });
  }
  return { buckets, total };
}
