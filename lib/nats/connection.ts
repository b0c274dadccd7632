import { connect, nkeyAuthenticator, type ConnectionOptions, type NatsConnection } from "@nats-io/transport-node";
import { natsAuthConfig, readConfig } from "../config.js";
import type { Logger } from "../log.js";
import { readNkeySeed } from "./identities.js";
import { inboxPrefix, type NatsIdentity } from "./permissions.js";

export const DEFAULT_NATS_URL = "nats://127.0.0.1:4222";

/**
 * The credentials and TLS settings of the environment (TRIBUTARY_NATS_*), for a process of
 * kind `identity`: its nkey or user/password, and its own inbox prefix (the server lets each
 * identity subscribe only below its prefix, see permissions.ts).
 */
export function natsClientOptions(identity: NatsIdentity, env?: Record<string, string | undefined>): Partial<ConnectionOptions> {
  const auth = readConfig(natsAuthConfig, env);
  const options: Partial<ConnectionOptions> = { inboxPrefix: inboxPrefix(identity) };
  if (auth.nkeyFile) options.authenticator = nkeyAuthenticator(readNkeySeed(auth.nkeyFile).seed);
  else if (auth.user !== undefined) {
    options.user = auth.user;
    options.pass = auth.password ?? "";
  }
  if (auth.tlsCaFile || auth.tlsCertFile)
    options.tls = { caFile: auth.tlsCaFile, certFile: auth.tlsCertFile, keyFile: auth.tlsKeyFile };
  return options;
}

/**
 * Connects with the settings every Tributary process wants: its identity's credentials, retry
 * while the server starts, reconnect forever (a NATS cluster rolls its pods), and a name that
 * shows up in `nats server report`.
 */
export async function connectNats(url: string, name: string, log: Logger, identity: NatsIdentity): Promise<NatsConnection> {
  const nc = await connect({
    servers: url.split(",").map((s) => s.trim()),
    name,
    waitOnFirstConnect: true,
    maxReconnectAttempts: -1,
    reconnectTimeWait: 250,
    // A server gone silent (a partition: no reset arrives) is left after 10-15 s, for another
    // node of the cluster; nats-server pings its clients as often (ping_interval 5s, ping_max 2).
    pingInterval: 5_000,
    maxPingOut: 2,
    // Without this, every request and publish builds an Error up front to keep the caller's stack
    // for a possible timeout: a fifth of the actor host's CPU per batch line, for a debugging aid.
    noAsyncTraces: true,
    ...natsClientOptions(identity),
  });
  (async () => {
    for await (const s of nc.status()) {
      if (s.type === "disconnect" || s.type === "reconnect" || s.type === "error")
        log.warn("nats connection status", { status: s.type, server: (s as { server?: string }).server, error: (s as { error?: unknown }).error ? String((s as { error?: unknown }).error) : undefined });
    }
  })().catch(() => {});
  return nc;
}

/**
 * Whether `nc` is connected to a server now (false from a disconnect until the reconnect):
 * readiness probes use it; liveness never does, so a NATS outage does not restart every pod.
 */
export function connectionState(nc: NatsConnection): { connected(): boolean } {
  let connected = !nc.isClosed();
  (async () => {
    for await (const s of nc.status()) {
      if (s.type === "disconnect") connected = false;
      else if (s.type === "reconnect") connected = true;
    }
  })().catch(() => {});
  return { connected: () => connected && !nc.isClosed() };
}
