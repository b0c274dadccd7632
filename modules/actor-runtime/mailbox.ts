import type { Msg, NatsConnection, Subscription } from "@nats-io/transport-node";
import type { ActorContext } from "./actor.js";

export interface MailboxOptions {
  /** Queue group: one member of the group gets each message. */
  queue?: string;
}

/**
 * Subscribes `handler` to `subject`. Messages are handled as they arrive (handlers may be
 * async; ordering of their effects is the handler's concern). A handler that throws reports the
 * failure to the actor's supervisor instead of crashing the process.
 */
export function openMailbox(
  ctx: ActorContext,
  subject: string,
  handler: (msg: Msg) => void | Promise<void>,
  options: MailboxOptions = {},
): Subscription {
  return (ctx.nc as NatsConnection).subscribe(subject, {
    queue: options.queue,
    callback: (err, msg) => {
      if (err) {
        ctx.log.warn("mailbox subscription error", { subject, err });
        return;
      }
      try {
        const result = handler(msg);
        if (result instanceof Promise) result.catch((e: unknown) => ctx.fail(e));
      } catch (e) {
        ctx.fail(e);
      }
    },
  });
}
