import * as Schema from "effect/Schema";
import { errors } from "../errors/mod.js";
import { decodeBody, Metadata } from "../openai/mod.js";
import { SECRET_NAME } from "../secrets/mod.js";

// Request bodies of the sandbox routes, each bounded: sizes, counts and shapes are checked before
// anything reaches NATS or KV.

export interface SandboxBounds {
  maxCpuMhz: number;
  maxMemoryMb: number;
  maxDiskMb: number;
}

export const MAX_TIMEOUT_SECONDS = 86_400;
export const DEFAULT_TIMEOUT_SECONDS = 300;
export const DEFAULT_RESOURCES = { cpu_mhz: 1_000, memory_mb: 512, disk_mb: 512 };
export const MAX_EXEC_TIMEOUT_SECONDS = 3_600;
export const DEFAULT_EXEC_TIMEOUT_SECONDS = 60;
const MAX_ENV_VARS = 64;
const MAX_ENV_VALUE_BYTES = 32 * 1024;
const MAX_SECRETS = 32;
const MAX_ARGV = 1_024;
const MAX_COMMAND_BYTES = 256 * 1024;
const MAX_STDIN_BYTES = 1024 * 1024;
export const MAX_PATH_LENGTH = 4_096;

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;
const int = (min: number, max: number) => Schema.Int.check(Schema.isBetween({ minimum: min, maximum: max }));
const opt = <S extends Schema.Top>(s: S) => Schema.optionalKey(Schema.NullOr(s));

const Env = Schema.Record(
  Schema.String.check(Schema.isPattern(ENV_NAME, { message: "environment variable names are 1-128 characters of A-Z, a-z, 0-9 and _, not starting with a digit" })),
  Schema.String.check(Schema.isMaxLength(MAX_ENV_VALUE_BYTES)),
).check(Schema.makeFilter((m: Record<string, string>) => Object.keys(m).length <= MAX_ENV_VARS || `at most ${MAX_ENV_VARS} variables`));

const SecretNames = Schema.Array(
  Schema.String.check(Schema.isPattern(SECRET_NAME, { message: "secret names are 1-128 characters of A-Z, 0-9 and _, not starting with a digit" })),
).check(
  Schema.makeFilter((a: readonly string[]) => a.length <= MAX_SECRETS || `at most ${MAX_SECRETS} secrets`),
  Schema.makeFilter((a: readonly string[]) => new Set(a).size === a.length || "secret names must be unique"),
);

export interface SandboxCreateRequest {
  timeout_seconds: number;
  idle_timeout_seconds: number | null;
  metadata: Record<string, string>;
  env: Record<string, string>;
  secrets: string[];
  cpu_mhz: number;
  memory_mb: number;
  disk_mb: number;
  network: SandboxNetwork;
  /** Internal (jobs): a read-only /workspace/input the host fills before the command runs. */
  input_dir?: boolean;
}

/** "none": only a loopback of its own. "egress": outbound IPv4 through a user-mode stack, never the platform's addresses (docs/platform.md). */
export const SANDBOX_NETWORKS = ["none", "egress"] as const;
export type SandboxNetwork = (typeof SANDBOX_NETWORKS)[number];

export function parseSandboxCreate(json: unknown, bounds: SandboxBounds): SandboxCreateRequest {
  const schema = Schema.Struct({
    timeout_seconds: opt(int(1, MAX_TIMEOUT_SECONDS)),
    idle_timeout_seconds: opt(int(1, MAX_TIMEOUT_SECONDS)),
    metadata: opt(Metadata),
    env: opt(Env),
    secrets: opt(SecretNames),
    cpu_mhz: opt(int(100, bounds.maxCpuMhz)),
    memory_mb: opt(int(32, bounds.maxMemoryMb)),
    disk_mb: opt(int(1, bounds.maxDiskMb)),
    network: opt(Schema.String.check(Schema.isMaxLength(64))),
  });
  checkEnvNames(json, "env");
  checkMetadataKeys(json);
  const body = decodeBody(schema, json);
  const network = body.network ?? "none";
  if (!(SANDBOX_NETWORKS as readonly string[]).includes(network))
    throw errors.invalidParam("network", `Invalid value for 'network': expected 'none' (no network, the default) or 'egress' (outbound internet, never the platform's own addresses); got '${network.slice(0, 32)}'.`);
  return {
    timeout_seconds: body.timeout_seconds ?? DEFAULT_TIMEOUT_SECONDS,
    idle_timeout_seconds: body.idle_timeout_seconds ?? null,
    metadata: { ...(body.metadata ?? {}) },
    env: { ...(body.env ?? {}) },
    secrets: [...(body.secrets ?? [])],
    cpu_mhz: body.cpu_mhz ?? Math.min(DEFAULT_RESOURCES.cpu_mhz, bounds.maxCpuMhz),
    memory_mb: body.memory_mb ?? Math.min(DEFAULT_RESOURCES.memory_mb, bounds.maxMemoryMb),
    disk_mb: body.disk_mb ?? Math.min(DEFAULT_RESOURCES.disk_mb, bounds.maxDiskMb),
    network: network as SandboxNetwork,
  };
}

export interface ExecRequest {
  argv: string[];
  cwd: string;
  env: Record<string, string>;
  stdin: string;
  timeout_seconds: number;
  stream: boolean;
}

const PathString = Schema.String.check(Schema.isMinLength(1), Schema.isMaxLength(MAX_PATH_LENGTH));

export function parseExec(json: unknown): ExecRequest {
  const schema = Schema.Struct({
    command: Schema.Union([
      Schema.String.check(Schema.isMinLength(1), Schema.isMaxLength(MAX_COMMAND_BYTES)),
      Schema.Array(Schema.String.check(Schema.isMaxLength(MAX_COMMAND_BYTES))).check(Schema.isMinLength(1), Schema.isMaxLength(MAX_ARGV)),
    ]),
    cwd: opt(PathString),
    env: opt(Env),
    stdin: opt(Schema.String.check(Schema.isMaxLength(MAX_STDIN_BYTES))),
    timeout_seconds: opt(int(1, MAX_EXEC_TIMEOUT_SECONDS)),
    stream: opt(Schema.Boolean),
  });
  checkEnvNames(json, "env");
  const body = decodeBody(schema, json);
  const argv = typeof body.command === "string" ? ["/bin/sh", "-c", body.command] : [...body.command];
  if (argv.reduce((n, a) => n + Buffer.byteLength(a), 0) > MAX_COMMAND_BYTES)
    throw errors.invalidParam("command", `Invalid value for 'command': at most ${MAX_COMMAND_BYTES} bytes in all.`);
  if (argv.some((a) => a.includes("\u0000"))) throw errors.invalidParam("command", "Invalid value for 'command': arguments cannot contain NUL characters.");
  if (body.cwd?.includes("\u0000")) throw errors.invalidParam("cwd", "Invalid value for 'cwd': NUL characters are not allowed.");
  if (body.stdin !== undefined && body.stdin !== null && Buffer.byteLength(body.stdin) > MAX_STDIN_BYTES)
    throw errors.invalidParam("stdin", `Invalid value for 'stdin': at most ${MAX_STDIN_BYTES} bytes.`);
  return {
    argv,
    cwd: body.cwd ?? "/workspace",
    env: { ...(body.env ?? {}) },
    stdin: body.stdin ?? "",
    timeout_seconds: body.timeout_seconds ?? DEFAULT_EXEC_TIMEOUT_SECONDS,
    stream: body.stream ?? false,
  };
}

/** Record keys are not checked by the schema's key pattern in every case: names are checked here too. */
function checkEnvNames(json: unknown, param: string): void {
  const env = json && typeof json === "object" ? (json as Record<string, unknown>)[param] : undefined;
  if (!env || typeof env !== "object" || Array.isArray(env)) return;
  for (const name of Object.keys(env))
    if (!ENV_NAME.test(name))
      throw errors.invalidParam(`${param}.${name.slice(0, 130)}`, `Invalid value for '${param}': '${name.slice(0, 130)}' is not an environment variable name (1-128 characters of A-Z, a-z, 0-9 and _, not starting with a digit).`);
}

/** The shared Metadata schema drops keys its key check refuses instead of failing: refuse them here. */
function checkMetadataKeys(json: unknown): void {
  const metadata = json && typeof json === "object" ? (json as Record<string, unknown>).metadata : undefined;
  if (!metadata || typeof metadata !== "object" || Array.isArray(metadata)) return;
  for (const key of Object.keys(metadata))
    if (key.length > 64) throw errors.invalidParam("metadata", `Invalid value for 'metadata': keys are at most 64 characters ('${key.slice(0, 20)}...' has ${key.length}).`);
}

export function parseTimeoutUpdate(json: unknown): { timeout_seconds: number } {
  const body = decodeBody(Schema.Struct({ timeout_seconds: int(1, MAX_TIMEOUT_SECONDS) }), json);
  return { timeout_seconds: body.timeout_seconds };
}

/** `{}` or an empty body (stop). */
export function parseEmpty(json: unknown): void {
  decodeBody(Schema.Struct({}), json);
}

/** A path in the workspace from the query string: present, bounded, no NUL. */
export function workspacePath(value: string | null, param = "path"): string {
  if (value === null || value === "") throw errors.missingParam(param);
  if (value.length > MAX_PATH_LENGTH) throw errors.invalidParam(param, `Invalid value for '${param}': at most ${MAX_PATH_LENGTH} characters.`);
  if (value.includes("\u0000")) throw errors.invalidParam(param, `Invalid value for '${param}': NUL characters are not allowed.`);
  return value;
}

export function parseSecretCreate(json: unknown, maxValueBytes: number): { name: string; value: string } {
  const body = decodeBody(
    Schema.Struct({
      name: Schema.String.check(Schema.isPattern(SECRET_NAME, { message: "secret names are 1-128 characters of A-Z, 0-9 and _, not starting with a digit" })),
      value: Schema.String,
    }),
    json,
  );
  checkSecretValue(body.value, maxValueBytes);
  return { name: body.name, value: body.value };
}

export function parseSecretRotate(json: unknown, maxValueBytes: number): { value: string } {
  const body = decodeBody(Schema.Struct({ value: Schema.String }), json);
  checkSecretValue(body.value, maxValueBytes);
  return { value: body.value };
}

function checkSecretValue(value: string, maxValueBytes: number): void {
  // The message never quotes the value.
  if (Buffer.byteLength(value) > maxValueBytes) throw errors.invalidParam("value", `Invalid value for 'value': a secret is at most ${maxValueBytes} bytes.`);
  if (value.includes("\u0000")) throw errors.invalidParam("value", "Invalid value for 'value': NUL characters cannot be passed as an environment variable.");
}
