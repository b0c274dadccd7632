import type { NatsConnection } from "@nats-io/transport-node";
import type { Logger } from "../../lib/log.js";

/**
 * An actor: state owned by one object, reached only through NATS subjects (its mailboxes), and
 * restarted by its supervisor when it fails. `start` subscribes and initialises; `stop` drains.
 */
export interface Actor {
  readonly name: string;
  start(ctx: ActorContext): Promise<void>;
  /** Stops accepting work and finishes (or hands back) what is in flight. */
  stop(): Promise<void>;
}

export interface ActorContext {
  readonly nc: NatsConnection;
  readonly log: Logger;
  /** Reports a failure the actor cannot recover from by itself: the supervisor restarts it. */
  fail(error: unknown): void;
}
