import * as Schema from "effect/Schema";
import { valueSchema, type Mutable } from "../../lib/nats/kv-records.js";

// What gateways, actor hosts and sandbox hosts say to each other over NATS: schema-checked JSON
// (bytes as base64). Subjects: lib/nats/subjects.ts (sandboxHostHeartbeat, sandboxHostRpc,
// sandboxExecEvents).

const HeartbeatSchema = Schema.Struct({
  host_id: Schema.String,
  state: Schema.Literals(["ready", "draining"]),
  interval_ms: Schema.Number,
  sandboxes_running: Schema.Number,
  sandboxes_max: Schema.Number,
  /** The host's CPU (cores × core MHz): the ceiling of one sandbox's `cpu_mhz`. */
  cpu_mhz_total: Schema.Number,
  /** `cpu_mhz` it still admits: total × over-commit, less its sandboxes' `cpu_mhz`. */
  cpu_mhz_free: Schema.Number,
  /** How many times its CPU its sandboxes' `cpu_mhz` may add up to (absent from older hosts: 1). */
  cpu_overcommit: Schema.optionalKey(Schema.Number),
  memory_mb_total: Schema.Number,
  /** Memory not reserved: total less its sandboxes' `memory_mb + disk_mb`. */
  memory_mb_free: Schema.Number,
  /** Ids of the sandboxes it runs (the sweeper ends records of a live host that lost one). */
  sandbox_ids: Schema.mutable(Schema.Array(Schema.String)),
  /** Whether it runs sandboxes with network: "egress" (absent from older hosts: no). */
  egress: Schema.optionalKey(Schema.Boolean),
});
export type HostHeartbeat = Mutable<typeof HeartbeatSchema.Type>;
export const hostHeartbeat = valueSchema<HostHeartbeat>()(HeartbeatSchema);

const Limits = Schema.Struct({ cpu_mhz: Schema.Number, memory_mb: Schema.Number, disk_mb: Schema.Number });
const StringMap = Schema.Record(Schema.String, Schema.String);
const Target = { project: Schema.String, sandbox_id: Schema.String };

const CreateCall = Schema.Struct({
  op: Schema.Literal("create"),
  ...Target,
  limits: Limits,
  env: StringMap,
  secrets: Schema.mutable(Schema.Array(Schema.String)),
  expires_at: Schema.Number,
  idle_timeout_seconds: Schema.NullOr(Schema.Number),
  network: Schema.optionalKey(Schema.Literals(["none", "egress"])),
  /** A read-only /workspace/input the host fills (stage calls), for a job's input files. */
  input_dir: Schema.optionalKey(Schema.Boolean),
});
const ExecCall = Schema.Struct({
  op: Schema.Literal("exec"),
  ...Target,
  argv: Schema.mutable(Schema.Array(Schema.String)),
  cwd: Schema.String,
  env: StringMap,
  stdin: Schema.String,
  timeout_ms: Schema.Number,
  max_output: Schema.Number,
  /** Set for a streamed exec: output events go to this subject (sandboxExecEvents). */
  events_subject: Schema.NullOr(Schema.String),
  exec_id: Schema.String,
  /** An interactive session on a terminal of its own (the shell route), its size. */
  pty: Schema.optionalKey(Schema.NullOr(Schema.Struct({ rows: Schema.Number, cols: Schema.Number }))),
});
const KillCall = Schema.Struct({ op: Schema.Literal("kill"), ...Target, exec_id: Schema.String });
const InputCall = Schema.Struct({ op: Schema.Literal("input"), ...Target, exec_id: Schema.String, data: Schema.String });
const ResizeCall = Schema.Struct({ op: Schema.Literal("resize"), ...Target, exec_id: Schema.String, rows: Schema.Number, cols: Schema.Number });
const WriteCall = Schema.Struct({ op: Schema.Literal("write"), ...Target, path: Schema.String, data: Schema.String, append: Schema.Boolean });
/** A piece of a read-only input file (name: one path segment), written on the host side. */
const StageCall = Schema.Struct({ op: Schema.Literal("stage"), ...Target, name: Schema.String, data: Schema.String, append: Schema.Boolean });
const ReadCall = Schema.Struct({ op: Schema.Literal("read"), ...Target, path: Schema.String, offset: Schema.Number, length: Schema.Number });
const ListCall = Schema.Struct({ op: Schema.Literal("list"), ...Target, path: Schema.String, limit: Schema.Number });
const StopCall = Schema.Struct({ op: Schema.Literal("stop"), ...Target, reason: Schema.Literals(["user_stop", "deleted", "timeout", "idle", "error"]) });
const ExtendCall = Schema.Struct({ op: Schema.Literal("extend"), ...Target, expires_at: Schema.Number });

const HostCallSchema = Schema.Union([CreateCall, ExecCall, KillCall, InputCall, ResizeCall, WriteCall, StageCall, ReadCall, ListCall, StopCall, ExtendCall]);
export type HostCall = Mutable<typeof HostCallSchema.Type>;
export const hostCall = valueSchema<HostCall>()(HostCallSchema);
export type CallOf<Op extends HostCall["op"]> = Extract<HostCall, { op: Op }>;

const Entry = Schema.Struct({ name: Schema.String, type: Schema.Literals(["file", "dir", "symlink"]), size: Schema.Number, modified_at: Schema.Number });
export type DirEntry = Mutable<typeof Entry.Type>;

const ReplySchema = Schema.Struct({
  ok: Schema.Boolean,
  /** When not ok: not_found (no such sandbox here), not_running, no_capacity, invalid, file codes, error. */
  code: Schema.optionalKey(Schema.String),
  message: Schema.optionalKey(Schema.String),
  exit_code: Schema.optionalKey(Schema.NullOr(Schema.Number)),
  signal: Schema.optionalKey(Schema.NullOr(Schema.String)),
  timed_out: Schema.optionalKey(Schema.Boolean),
  truncated: Schema.optionalKey(Schema.Boolean),
  oom_killed: Schema.optionalKey(Schema.Boolean),
  stdout: Schema.optionalKey(Schema.String),
  stderr: Schema.optionalKey(Schema.String),
  data: Schema.optionalKey(Schema.String),
  size: Schema.optionalKey(Schema.Number),
  entries: Schema.optionalKey(Schema.mutable(Schema.Array(Entry))),
  started_at: Schema.optionalKey(Schema.Number),
});
export type HostReply = Mutable<typeof ReplySchema.Type>;
export const hostReply = valueSchema<HostReply>()(ReplySchema);

/** Events of a streamed exec: output chunks (base64), then one exit. */
const ExecEventSchema = Schema.Union([
  Schema.Struct({ t: Schema.Literals(["stdout", "stderr"]), d: Schema.String }),
  Schema.Struct({
    t: Schema.Literal("exit"),
    exit_code: Schema.NullOr(Schema.Number),
    signal: Schema.NullOr(Schema.String),
    timed_out: Schema.Boolean,
    truncated: Schema.Boolean,
    oom_killed: Schema.Boolean,
  }),
  Schema.Struct({ t: Schema.Literal("error"), message: Schema.String }),
]);
export type ExecEvent = Mutable<typeof ExecEventSchema.Type>;
export const execEvent = valueSchema<ExecEvent>()(ExecEventSchema);

/** Lines the in-sandbox agent writes (untrusted: a process inside could forge them). */
const AgentLineSchema = Schema.Struct({
  t: Schema.Literals(["ready", "ok", "error", "out", "err", "exit"]),
  id: Schema.optionalKey(Schema.NullOr(Schema.String)),
  d: Schema.optionalKey(Schema.String),
  code: Schema.optionalKey(Schema.NullOr(Schema.Union([Schema.Number, Schema.String]))),
  signal: Schema.optionalKey(Schema.NullOr(Schema.String)),
  timed_out: Schema.optionalKey(Schema.Boolean),
  truncated: Schema.optionalKey(Schema.Boolean),
  stdout: Schema.optionalKey(Schema.String),
  stderr: Schema.optionalKey(Schema.String),
  message: Schema.optionalKey(Schema.String),
  size: Schema.optionalKey(Schema.Number),
  entries: Schema.optionalKey(Schema.mutable(Schema.Array(Entry))),
});
export type AgentLine = Mutable<typeof AgentLineSchema.Type>;
export const agentLine = valueSchema<AgentLine>()(AgentLineSchema);

export const encodeJson = (value: unknown) => new TextEncoder().encode(JSON.stringify(value));
