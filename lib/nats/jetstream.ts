import type { NatsConnection } from "@nats-io/transport-node";
import { Kvm, type KV, type KvOptions } from "@nats-io/kv";
import { Objm, type ObjectStore, type ObjectStoreOptions } from "@nats-io/obj";
import { JetStreamApiCodes, JetStreamApiError, jetstreamManager, type StreamConfig } from "@nats-io/jetstream";

// Opening JetStream state the same way everywhere: create-or-bind, with the replica count of
// the deployment (1 on one machine, 3 on a JetStream cluster: TRIBUTARY_JS_REPLICAS).

export function jetStreamReplicas(env: NodeJS.ProcessEnv = process.env): number {
  const n = Number(env.TRIBUTARY_JS_REPLICAS ?? 1);
  return Number.isInteger(n) && n >= 1 && n <= 5 ? n : 1;
}

/** Opens the KV bucket `name`, creating it with `options` when it does not exist yet. */
export async function openKv(nc: NatsConnection, name: string, options: Partial<KvOptions> = {}): Promise<KV> {
  return new Kvm(nc).create(name, { replicas: jetStreamReplicas(), ...options });
}

/** Opens the Object Store bucket `name`, creating it when it does not exist yet. */
export async function openObjectStore(nc: NatsConnection, name: string, options: Partial<ObjectStoreOptions> = {}): Promise<ObjectStore> {
  return new Objm(nc).create(name, { replicas: jetStreamReplicas(), ...options });
}

/** JetStream's "stream name already in use" (not among the client's named codes). */
const STREAM_NAME_IN_USE = 10058;

/** Creates the stream `config.name` unless it exists (its existing configuration is kept). */
export async function ensureStream(nc: NatsConnection, config: Partial<StreamConfig> & { name: string; subjects: string[] }): Promise<void> {
  const jsm = await jetstreamManager(nc);
  try {
    await jsm.streams.info(config.name);
  } catch (err) {
    if (!(err instanceof JetStreamApiError) || err.code !== JetStreamApiCodes.StreamNotFound) throw err;
    try {
      await jsm.streams.add({ num_replicas: jetStreamReplicas(), ...config });
    } catch (addErr) {
      // Another process created it in between.
      if (!(addErr instanceof JetStreamApiError) || addErr.code !== STREAM_NAME_IN_USE) throw addErr;
    }
  }
}
