import { Schema } from "effect";
import { valueSchema, type Mutable } from "../../lib/nats/kv-records.js";

// What gateways and app hosts say to each other besides HTTP exchanges (those are protobuf:
// proto/tributary/v1/apps.proto): heartbeats, calls (deploy, stop, logs) and log lines, as
// schema-checked JSON. Subjects: lib/nats/subjects.ts (appHostHeartbeat, appHostRpc, appLogs).

const HeartbeatSchema = Schema.Struct({
  host_id: Schema.String,
  state: Schema.Literals(["ready", "draining"]),
  interval_ms: Schema.Number,
  cpu_mhz_total: Schema.Number,
  cpu_mhz_free: Schema.Number,
  memory_mb_total: Schema.Number,
  memory_mb_free: Schema.Number,
  gpu_count: Schema.Number,
  /** The deployments it runs and the state of each one's replica. */
  deployments: Schema.mutable(Schema.Array(Schema.Struct({ deployment_id: Schema.String, state: Schema.String }))),
});
export type AppHostHeartbeat = Mutable<typeof HeartbeatSchema.Type>;
export const appHostHeartbeat = valueSchema<AppHostHeartbeat>()(HeartbeatSchema);

const Target = { project: Schema.String, deployment_id: Schema.String };
const CallSchema = Schema.Union([
  Schema.Struct({ op: Schema.Literal("deploy"), ...Target }),
  Schema.Struct({ op: Schema.Literal("stop"), ...Target, reason: Schema.Literals(["user_stop", "superseded"]), superseded_by: Schema.NullOr(Schema.String) }),
  Schema.Struct({ op: Schema.Literal("logs"), ...Target }),
]);
export type AppHostCall = Mutable<typeof CallSchema.Type>;
export const appHostCall = valueSchema<AppHostCall>()(CallSchema);

const LogLineSchema = Schema.Struct({ at: Schema.Number, stream: Schema.Literals(["stdout", "stderr"]), line: Schema.String });
const ReplySchema = Schema.Struct({
  ok: Schema.Boolean,
  message: Schema.NullOr(Schema.String),
  logs: Schema.mutable(Schema.Array(LogLineSchema)),
});
export type AppHostReply = Mutable<typeof ReplySchema.Type>;
export const appHostReply = valueSchema<AppHostReply>()(ReplySchema);

/** One line on a deployment's log subject; `end` marks that the deployment ended (followers stop). */
const LogEventSchema = Schema.Struct({ at: Schema.Number, stream: Schema.Literals(["stdout", "stderr"]), line: Schema.String, end: Schema.Boolean });
export type AppLogEvent = Mutable<typeof LogEventSchema.Type>;
export const appLogEvent = valueSchema<AppLogEvent>()(LogEventSchema);

export const encodeJson = (value: unknown) => new TextEncoder().encode(JSON.stringify(value));
