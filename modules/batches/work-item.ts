import * as Schema from "effect/Schema";
import { valueSchema } from "../../lib/nats/kv-records.js";

/** One batch line waiting on the work stream (subject: batch.work.<model>.<batch id>). */
export interface WorkItem {
  project: string;
  /** The batch's organization and creating key (usage rows and traces of its lines); absent in items of older builds. */
  organization?: string;
  keyId?: string;
  batchId: string;
  /** 0-based index among the batch's request lines: the key of its result. */
  line: number;
  customId: string;
  endpoint: string;
  body: unknown;
  /** The batch's expires_at (Unix seconds): the line's deadline. */
  expiresAt: number;
}

/** How a work item is read back from the work stream (its body is checked by the line's executor). */
export const workItemSchema = valueSchema<WorkItem>()(
  Schema.Struct({
    project: Schema.String,
    organization: Schema.optional(Schema.String),
    keyId: Schema.optional(Schema.String),
    batchId: Schema.String,
    line: Schema.Int,
    customId: Schema.String,
    endpoint: Schema.String,
    body: Schema.Unknown,
    expiresAt: Schema.Number,
  }),
);
