/** One batch line waiting on the work stream (subject: batch.work.<model>.<batch id>). */
export interface WorkItem {
  project: string;
  batchId: string;
  /** 0-based index among the batch's request lines: the key of its result. */
  line: number;
  customId: string;
  endpoint: string;
  body: unknown;
  /** The batch's expires_at (Unix seconds): the line's deadline. */
  expiresAt: number;
}
