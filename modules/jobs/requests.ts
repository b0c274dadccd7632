import * as Schema from "effect/Schema";
import { decodeBody, Metadata } from "../openai/mod.js";
import { parseExec, parseSandboxCreate, type SandboxBounds, type SandboxNetwork } from "../sandboxes/mod.js";

export interface JobCreateRequest {
  command: string[];
  cwd: string;
  env: Record<string, string>;
  secrets: string[];
  timeout_seconds: number;
  max_retries: number;
  cpu_mhz: number;
  memory_mb: number;
  disk_mb: number;
  network: SandboxNetwork;
  metadata: Record<string, string>;
  input_files: string[];
}

export const MAX_JOB_RETRIES = 10;
export const MAX_INPUT_FILES = 20;
const DEFAULT_JOB_TIMEOUT_SECONDS = 600;

/**
 * POST /v1/jobs: the command's fields are checked as an exec's, the sandbox's as a sandbox's
 * (same bounds, same parameter names), plus max_retries (0-10).
 */
export function parseJobCreate(json: unknown, bounds: SandboxBounds): JobCreateRequest {
  const int = (min: number, max: number) => Schema.optionalKey(Schema.NullOr(Schema.Int.check(Schema.isBetween({ minimum: min, maximum: max }))));
  const schema = Schema.Struct({
    command: Schema.Unknown,
    cwd: Schema.optionalKey(Schema.Unknown),
    env: Schema.optionalKey(Schema.Unknown),
    secrets: Schema.optionalKey(Schema.Unknown),
    timeout_seconds: int(1, 86_400),
    max_retries: int(0, MAX_JOB_RETRIES),
    cpu_mhz: Schema.optionalKey(Schema.Unknown),
    memory_mb: Schema.optionalKey(Schema.Unknown),
    disk_mb: Schema.optionalKey(Schema.Unknown),
    network: Schema.optionalKey(Schema.Unknown),
    metadata: Schema.optionalKey(Schema.NullOr(Metadata)),
    input_files: Schema.optionalKey(
      Schema.NullOr(
        Schema.Array(Schema.String.check(Schema.isPattern(/^file-[0-9A-Za-z]{1,64}$/, { message: "file ids look like file-..." }))).check(
          Schema.makeFilter((a: readonly string[]) => a.length <= MAX_INPUT_FILES || `at most ${MAX_INPUT_FILES} files`),
          Schema.makeFilter((a: readonly string[]) => new Set(a).size === a.length || "file ids must be unique"),
        ),
      ),
    ),
  });
  const body = decodeBody(schema, json) as Record<string, unknown>;
  const pick = (keys: string[]) => Object.fromEntries(keys.filter((k) => body[k] !== undefined).map((k) => [k, body[k]]));
  const exec = parseExec(pick(["command", "cwd", "env"]));
  const sandbox = parseSandboxCreate(pick(["secrets", "cpu_mhz", "memory_mb", "disk_mb", "network", "metadata"]), bounds);
  return {
    command: exec.argv,
    cwd: exec.cwd,
    env: exec.env,
    secrets: sandbox.secrets,
    timeout_seconds: (body.timeout_seconds as number | null | undefined) ?? DEFAULT_JOB_TIMEOUT_SECONDS,
    max_retries: (body.max_retries as number | null | undefined) ?? 0,
    cpu_mhz: sandbox.cpu_mhz,
    memory_mb: sandbox.memory_mb,
    disk_mb: sandbox.disk_mb,
    network: sandbox.network,
    metadata: sandbox.metadata,
    input_files: [...((body.input_files as string[] | null | undefined) ?? [])],
  };
}
