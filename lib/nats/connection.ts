import { connect, type NatsConnection } from "@nats-io/transport-node";
import type { Logger } from "../log.js";

export const DEFAULT_NATS_URL = "nats://127.0.0.1:4222";

/**
 * Connects with the settings every Tributary process wants: retry while the server starts,
 * reconnect forever (a NATS cluster rolls its pods), and a name that shows up in `nats server report`.
 */
export async function connectNats(url: string, name: string, log: Logger): Promise<NatsConnection> {
  const nc = await connect({
    servers: url.split(",").map((s) => s.trim()),
    name,
    waitOnFirstConnect: true,
    maxReconnectAttempts: -1,
    reconnectTimeWait: 250,
    pingInterval: 10_000,
    // Without this, every request and publish builds an Error up front to keep the caller's stack
    // for a possible timeout: a fifth of the actor host's CPU per batch line, for a debugging aid.
    noAsyncTraces: true,
  });
  (async () => {
    for await (const s of nc.status()) {
      if (s.type === "disconnect" || s.type === "reconnect" || s.type === "error")
        log.warn("nats connection status", { status: s.type, server: (s as { server?: string }).server });
    }
  })().catch(() => {});
  return nc;
}
