import { jetstream, type Consumer, type JsMsg } from "@nats-io/jetstream";
import { nanos } from "@nats-io/transport-node";
import type { Logger } from "../../lib/log.js";
import { ensureDurableConsumer, openJetStreamManager } from "../../lib/nats/jetstream.js";
import { InvalidValue } from "../../lib/nats/kv-records.js";
import { consumers, streams } from "../../lib/nats/subjects.js";
import type { Counter } from "../../lib/metrics.js";
import { UsageStore, usageMessageSchema } from "../../modules/usage/mod.js";
import type { Actor, ActorContext } from "../../modules/actor-runtime/mod.js";

/**
 * Folds the per-minute usage rows that gateways and actor hosts publish into the minute, hour
 * and day buckets. Every host runs one; they share one durable consumer that hands out one
 * message at a time, so folds happen in stream order and each bucket can tell a message it
 * already took (its sequence) from a new one: a host that dies mid-fold leaves nothing counted twice.
 */
export class UsageFolder implements Actor {
  readonly name = "usage:folder";
  private log!: Logger;
  private consumer!: Consumer;
  private store!: UsageStore;
  private stopping = false;
  private loop: Promise<void> | undefined;

  constructor(private readonly settings: { minuteRetentionSeconds: number; folded?: Counter }) {}

  async start(ctx: ActorContext): Promise<void> {
    this.log = ctx.log;
    await UsageStore.openStream(ctx.nc);
    this.store = await UsageStore.open(ctx.nc, this.settings.minuteRetentionSeconds);
    const jsm = await openJetStreamManager(ctx.nc);
    const config = { ack_wait: nanos(30_000), max_ack_pending: 1, max_deliver: -1 };
    try {
      await ensureDurableConsumer(jsm, streams.usage, { durable_name: consumers.usageFolders, ...config });
    } catch {
      await jsm.consumers.update(streams.usage, consumers.usageFolders, config);
    }
    this.consumer = await jetstream(ctx.nc).consumers.get(streams.usage, consumers.usageFolders);
    this.loop = this.run().catch((err: unknown) => ctx.fail(err));
  }

  async stop(): Promise<void> {
    this.stopping = true;
    await this.loop;
  }

  private async run(): Promise<void> {
    while (!this.stopping) {
      const batch = await this.consumer.fetch({ max_messages: 1, expires: 1_000 });
      for await (const msg of batch) await this.fold(msg);
    }
  }

  private async fold(msg: JsMsg): Promise<void> {
    let rows;
    try {
      rows = usageMessageSchema.parseBytes(`${msg.subject} #${msg.seq}`, msg.data).rows;
    } catch (err) {
      if (!(err instanceof InvalidValue)) throw err;
      this.log.error("undecodable usage message dropped", { err });
      msg.term();
      return;
    }
    try {
      await this.store.fold(rows, msg.seq);
      msg.ack();
      this.settings.folded?.inc({}, rows.length);
    } catch (err) {
      this.log.warn("usage fold failed; retried", { seq: msg.seq, err });
      msg.nak(1_000);
    }
  }
}
