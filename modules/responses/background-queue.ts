import type { NatsConnection } from "@nats-io/transport-node";
import { jetstream, RetentionPolicy, StorageType, type JetStreamClient } from "@nats-io/jetstream";
import * as Schema from "effect/Schema";
import { ensureStream, openJetStreamManager } from "../../lib/nats/jetstream.js";
import { valueSchema } from "../../lib/nats/kv-records.js";
import { streams, subjects } from "../../lib/nats/subjects.js";
import { ID_RULE, isWellFormedId } from "../../lib/ids.js";

/** One queued background response: the worker reads the rest from the responses bucket. */
export interface BackgroundJob {
  projectId: string;
  responseId: string;
}

/** How a job is read back from the queue. */
export const backgroundJobSchema = valueSchema<BackgroundJob>()(Schema.Struct({ projectId: Schema.String, responseId: Schema.String.check(Schema.makeFilter((id: string) => isWellFormedId(id) || ID_RULE)) }));

/** The durable work queue of background responses (a JetStream work-queue stream). */
export async function ensureBackgroundStream(nc: NatsConnection): Promise<void> {
  await ensureStream(await openJetStreamManager(nc), {
    name: streams.responsesBackground,
    subjects: [subjects.responsesBackground],
    retention: RetentionPolicy.Workqueue,
    storage: StorageType.File,
    // Publishing twice (a retried create) queues once.
    duplicate_window: 2 * 60 * 1_000_000_000,
  });
}

export class BackgroundQueue {
  private constructor(private readonly js: JetStreamClient) {}

  static async open(nc: NatsConnection): Promise<BackgroundQueue> {
    await ensureBackgroundStream(nc);
    return new BackgroundQueue(jetstream(nc));
  }

  /** Queues a stored response; resolves once JetStream has it on disk. */
  async enqueue(job: BackgroundJob): Promise<void> {
    await this.js.publish(subjects.responsesBackground, JSON.stringify(job), { msgID: job.responseId });
  }
}

/** Tells the worker running `responseId` to stop (core NATS: whoever runs it is subscribed). */
export function publishCancel(nc: NatsConnection, responseId: string): void {
  nc.publish(subjects.responseCancel(responseId), "");
}
