import * as Schema from "effect/Schema";
import { valueSchema, type Mutable } from "../../lib/nats/kv-records.js";

// What gateways, app hosts and the reconciler say to each other besides HTTP exchanges (those
// are protobuf: proto/tributary/v1/apps.proto): heartbeats, calls (start and stop instances,
// stop a deployment, logs), demand for a scaled-to-zero app, and log lines, as schema-checked
// JSON. Subjects: lib/nats/subjects.ts (appHostHeartbeat, appHostRpc, appDemand, appLogs).

/** What an app host says of each instance it runs: starting (or restarting), healthy (serving), stopping (draining: no new requests). */
export const HOST_INSTANCE_STATES = ["starting", "healthy", "stopping"] as const;
export type HostInstanceState = (typeof HOST_INSTANCE_STATES)[number];

const HeartbeatSchema = Schema.Struct({
  host_id: Schema.String,
  state: Schema.Literals(["ready", "draining"]),
  interval_ms: Schema.Number,
  cpu_mhz_total: Schema.Number,
  cpu_mhz_free: Schema.Number,
  memory_mb_total: Schema.Number,
  memory_mb_free: Schema.Number,
  gpu_count: Schema.Number,
  /**
   * The instances it runs: their state, requests in flight now, and `load`, the requests in
   * flight on average since the previous heartbeat (what scaling reads).
   */
  instances: Schema.mutable(
    Schema.Array(Schema.Struct({ instance_id: Schema.String, project: Schema.String, deployment_id: Schema.String, state: Schema.Literals(HOST_INSTANCE_STATES), in_flight: Schema.Number, load: Schema.Number })),
  ),
});
export type AppHostHeartbeat = Mutable<typeof HeartbeatSchema.Type>;
export const appHostHeartbeat = valueSchema<AppHostHeartbeat>()(HeartbeatSchema);

const Target = { project: Schema.String, deployment_id: Schema.String };
const CallSchema = Schema.Union([
  /** The reconciler placed an instance here: start it (refused when the host has no room or is draining). */
  Schema.Struct({ op: Schema.Literal("start_instance"), ...Target, instance_id: Schema.String }),
  /** Stop one instance once it drained (scaled down, or not wanted by its record). */
  Schema.Struct({ op: Schema.Literal("stop_instance"), ...Target, instance_id: Schema.String, reason: Schema.Literals(["retired", "unwanted"]) }),
  /** The deployment ended (its record says so already): stop its instances here. A user's stop is answered once they ended. */
  Schema.Struct({ op: Schema.Literal("stop"), ...Target, reason: Schema.Literals(["user_stop", "superseded", "failed"]) }),
  Schema.Struct({ op: Schema.Literal("logs"), ...Target }),
]);
export type AppHostCall = Mutable<typeof CallSchema.Type>;
export const appHostCall = valueSchema<AppHostCall>()(CallSchema);

/** A gateway holds a request for a deployment with no instance serving (scaled to zero, or all lost). */
const DemandSchema = Schema.Struct({ project: Schema.String, deployment_id: Schema.String });
export type AppDemand = Mutable<typeof DemandSchema.Type>;
export const appDemand = valueSchema<AppDemand>()(DemandSchema);

const LogLineSchema = Schema.Struct({ at: Schema.Number, stream: Schema.Literals(["stdout", "stderr"]), line: Schema.String });
const ReplySchema = Schema.Struct({
  ok: Schema.Boolean,
  message: Schema.NullOr(Schema.String),
  logs: Schema.mutable(Schema.Array(LogLineSchema)),
});
export type AppHostReply = Mutable<typeof ReplySchema.Type>;
export const appHostReply = valueSchema<AppHostReply>()(ReplySchema);

/**
 * Why an app host refuses to start an instance: the first word of the refusal's message. It has
 * no room, or is shutting down (the reconciler places the instance elsewhere and asks this host
 * nothing for a while); or the instance's record no longer wants it (nothing is wrong with the host).
 */
export type StartRefusal = "host_full" | "host_draining" | "unwanted";
export const refusal = (why: StartRefusal, words: string) => `${why}: ${words}`;
export const refusalOf = (message: string | null): StartRefusal | undefined => /^(host_full|host_draining|unwanted):/.exec(message ?? "")?.[1] as StartRefusal | undefined;

/** One line on a deployment's log subject; `end` marks that the deployment ended (followers stop). */
const LogEventSchema = Schema.Struct({ at: Schema.Number, stream: Schema.Literals(["stdout", "stderr"]), line: Schema.String, end: Schema.Boolean });
export type AppLogEvent = Mutable<typeof LogEventSchema.Type>;
export const appLogEvent = valueSchema<AppLogEvent>()(LogEventSchema);

export const encodeJson = (value: unknown) => new TextEncoder().encode(JSON.stringify(value));

/**
 * The last event on a deployment's log subject: it ended, and followers of its logs stop. Its
 * hosts send one as they stop its instances; whoever ends it sends one too, for a deployment
 * that had no instance running (scaled to zero, never placed).
 */
export const endedEvent = (status: string): Uint8Array => encodeJson({ at: Date.now(), stream: "stderr", line: `[tributary] deployment ${status}`, end: true } satisfies AppLogEvent);
