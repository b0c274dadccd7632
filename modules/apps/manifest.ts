import { parse as parseYaml, YAMLParseError } from "yaml";
import { errors } from "../errors/mod.js";
import { SECRET_NAME } from "../secrets/mod.js";

// The app manifest: `tributary.yaml` at the app's root. Every rule refuses with its own message
// naming the field (`manifest.<field>`), at deploy time, before anything is stored or started.

export const MANIFEST_FILE = "tributary.yaml";
/** Largest manifest file read (it is a few lines; anything bigger is not a manifest). */
export const MAX_MANIFEST_BYTES = 64 * 1024;
export const MAX_ENTRYPOINT_LENGTH = 256;
export const MAX_PROJECT_NAME_LENGTH = 256;
export const MAX_ENV_VARS = 64;
export const MAX_ENV_VALUE_BYTES = 4096;
export const MAX_SECRETS = 32;
/** Smallest memory an app instance gets: Python plus uvicorn need about this much to start. */
export const MIN_MEMORY_MB = 64;
/** Smallest CPU share: below this uvicorn cannot answer its health check in time. */
export const MIN_CPU_MHZ = 50;
export const RUNTIMES = ["python"] as const;
/** Most instances one deployment may ask for (`min_instances`, `max_instances`). */
export const MAX_INSTANCES = 100;
/** Scaling's default target: requests in flight per instance (`target_inflight`). */
export const DEFAULT_TARGET_INFLIGHT = 10;
export const MAX_TARGET_INFLIGHT = 10_000;
/** Bounds of `timeouts.request_seconds` and `timeouts.idle_seconds`. */
export const MAX_TIMEOUT_SECONDS = 3600;

/** `package.module:variable`: Python identifiers, dots between packages, one colon. */
const IDENT = "[A-Za-z_][A-Za-z0-9_]*";
export const ENTRYPOINT = new RegExp(`^${IDENT}(\\.${IDENT})*:${IDENT}$`);
/** A DNS label (RFC 1123): lowercase letters, digits and inner hyphens, 1 to 63 characters. */
export const DNS_LABEL = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;
/** Variables the platform sets in every instance: a manifest may not override them. */
export const PLATFORM_ENV_PREFIX = "TRIBUTARY_";

const FIELDS = ["entrypoint", "organization_slug", "project", "project_slug", "cpu_mhz", "gpu_count", "memory_size_mb", "env", "secrets", "runtime", "timeouts", "min_instances", "max_instances", "target_inflight"] as const;
const TIMEOUT_FIELDS = ["request_seconds", "idle_seconds"] as const;
const REQUIRED = ["entrypoint", "organization_slug", "project", "project_slug", "cpu_mhz", "gpu_count", "memory_size_mb"] as const;

export interface AppManifest {
  entrypoint: string;
  organizationSlug: string;
  project: string;
  projectSlug: string;
  cpuMhz: number;
  gpuCount: number;
  memorySizeMb: number;
  env: Record<string, string>;
  secrets: string[];
  runtime: "python";
  /** Instances kept running whatever the load (0: scaled to zero when idle; the first request waits for a start). */
  minInstances: number;
  /** Instances scaling may add up to. */
  maxInstances: number;
  /** Requests in flight per instance that scaling aims at. */
  targetInflight: number;
  /** As written (absent when the manifest sets none); the gateway's defaults fill the rest at deploy time. */
  timeouts?: AppTimeouts;
}

/**
 * How long the gateway waits on the app: for the response head (`requestSeconds`: from the
 * request's head on, a 504 `app_timeout` past it), and for the next bytes of a response body
 * (`idleSeconds`: the response is cut off past it; streams should send something more often).
 */
export interface AppTimeouts {
  requestSeconds?: number;
  idleSeconds?: number;
}

/** What the app hosts offer: the largest instance one host can run. */
export interface AppHostOffer {
  maxCpuMhz: number;
  maxMemoryMb: number;
  /** GPUs of the best-equipped app host (0: no GPU app host). */
  maxGpuCount: number;
}

/** Who deploys: the slugs of the key's organization and project. */
export interface DeployTarget {
  organizationSlug: string;
  projectSlug: string;
}

/**
 * An organization's or project's slug: its name as a DNS label (lowercased, runs of other
 * characters as one hyphen, trimmed, at most 63). Accounts have names, not slugs; this is the
 * one place that derives them, so the manifest, the gateway's Host routing and docs/platform.md agree.
 */
export function slugOf(name: string): string {
  const slug = name
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, "-")
    .replace(/^-+/, "")
    .slice(0, 63)
    .replace(/-+$/, "");
  return slug || "x";
}

const param = (field: string) => `manifest.${field}`;

/** `raw[field]` as an integer of at least `min`; `path`: the field's name in the manifest (nested fields). */
function integerField(raw: Record<string, unknown>, field: string, min: number, path = field): number {
  const value = raw[field];
  if (typeof value !== "number" || !Number.isInteger(value)) throw errors.invalidParam(param(path), `${field} must be an integer.`, "invalid_type");
  if (value < min) throw errors.invalidParam(param(path), `${field} must be at least ${min}.`);
  return value;
}

function stringField(raw: Record<string, unknown>, field: string): string {
  const value = raw[field];
  if (typeof value !== "string") throw errors.invalidParam(param(field), `${field} must be a string.`, "invalid_type");
  return value;
}

function slugField(raw: Record<string, unknown>, field: string): string {
  const value = stringField(raw, field);
  if (!DNS_LABEL.test(value))
    throw errors.invalidParam(param(field), `${field} '${value.slice(0, 80)}' is not a DNS label: lowercase letters, digits and hyphens (not first or last), at most 63 characters.`, "invalid_slug");
  return value;
}

/** Parses the manifest's text (YAML) and checks every rule; throws InvalidParam naming the field. */
export function parseManifest(text: string, target: DeployTarget, offer: AppHostOffer): AppManifest {
  if (Buffer.byteLength(text, "utf8") > MAX_MANIFEST_BYTES) throw errors.tooLarge(`The manifest is larger than ${MAX_MANIFEST_BYTES} bytes.`, "manifest");
  let raw: unknown;
  try {
    // No aliases to expand (a billion-laughs document stays small), no custom tags.
    raw = parseYaml(text, { maxAliasCount: 0, uniqueKeys: true, schema: "core" });
  } catch (err) {
    // The yaml library throws a ReferenceError for an alias (`*name`): say so, without the class name.
    const detail = err instanceof YAMLParseError ? err.message.split("\n")[0]!.slice(0, 256) : /alias/i.test(String(err)) ? "aliases (*name) are not allowed" : "it could not be parsed";
    throw errors.invalidParam("manifest", `${MANIFEST_FILE} is not valid YAML: ${detail}`, "invalid_yaml");
  }
  return checkManifest(raw, target, offer);
}

/** Checks a decoded manifest (a YAML or JSON object). */
export function checkManifest(raw: unknown, target: DeployTarget, offer: AppHostOffer): AppManifest {
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) throw errors.invalidParam("manifest", `${MANIFEST_FILE} must be a mapping of fields.`, "invalid_type");
  const fields = raw as Record<string, unknown>;
  for (const key of Object.keys(fields)) if (!(FIELDS as readonly string[]).includes(key)) throw errors.unknownParam(param(key.slice(0, 64)));
  for (const key of REQUIRED) if (fields[key] === undefined || fields[key] === null) throw errors.missingParam(param(key));

  const runtime = fields.runtime ?? "python";
  if (runtime !== "python")
    throw errors.invalidParam(param("runtime"), `runtime '${String(runtime).slice(0, 40)}' is not supported: app hosts run Python ASGI apps only (runtime: python).`, "unsupported_runtime");

  const entrypoint = stringField(fields, "entrypoint");
  if (entrypoint.length > MAX_ENTRYPOINT_LENGTH) throw errors.invalidParam(param("entrypoint"), `entrypoint is longer than ${MAX_ENTRYPOINT_LENGTH} characters.`);
  if (!ENTRYPOINT.test(entrypoint))
    throw errors.invalidParam(param("entrypoint"), `entrypoint '${entrypoint.slice(0, 80)}' must be package.module:variable (Python names, dots between packages, one colon).`, "invalid_entrypoint");

  const organizationSlug = slugField(fields, "organization_slug");
  const projectSlug = slugField(fields, "project_slug");
  if (organizationSlug !== target.organizationSlug)
    throw errors.invalidParam(param("organization_slug"), `organization_slug '${organizationSlug}' does not match the key's organization ('${target.organizationSlug}').`, "slug_mismatch");
  if (projectSlug !== target.projectSlug)
    throw errors.invalidParam(param("project_slug"), `project_slug '${projectSlug}' does not match the key's project ('${target.projectSlug}').`, "slug_mismatch");

  const project = stringField(fields, "project");
  if (project.trim() === "" || project.length > MAX_PROJECT_NAME_LENGTH)
    throw errors.invalidParam(param("project"), `project must be a display name of 1 to ${MAX_PROJECT_NAME_LENGTH} characters.`);

  const cpuMhz = integerField(fields, "cpu_mhz", MIN_CPU_MHZ);
  if (cpuMhz > offer.maxCpuMhz) throw errors.invalidParam(param("cpu_mhz"), `cpu_mhz ${cpuMhz} is more than an app host offers (${offer.maxCpuMhz}).`, "resources_unavailable");
  const memorySizeMb = integerField(fields, "memory_size_mb", MIN_MEMORY_MB);
  if (memorySizeMb > offer.maxMemoryMb)
    throw errors.invalidParam(param("memory_size_mb"), `memory_size_mb ${memorySizeMb} is more than an app host offers (${offer.maxMemoryMb}).`, "resources_unavailable");
  const gpuCount = integerField(fields, "gpu_count", 0);
  if (gpuCount > 0 && offer.maxGpuCount === 0)
    throw errors.invalidParam(param("gpu_count"), `gpu_count ${gpuCount}: no app host has a GPU (use gpu_count: 0 for CPU-only apps).`, "resources_unavailable");
  if (gpuCount > offer.maxGpuCount)
    throw errors.invalidParam(param("gpu_count"), `gpu_count ${gpuCount} is more than an app host offers (${offer.maxGpuCount}).`, "resources_unavailable");

  const env = envField(fields.env);
  const secrets = secretsField(fields.secrets);
  // A secret and a plain variable of the same name: which one the app sees would be an accident.
  for (const name of secrets)
    if (name in env) throw errors.invalidParam(param(`env.${name}`), `${name} is both in env and in secrets: name it once.`, "conflicting_fields");

  const { minInstances, maxInstances, targetInflight } = scalingFields(fields);
  const timeouts = timeoutsField(fields.timeouts);
  return { entrypoint, organizationSlug, project, projectSlug, cpuMhz, gpuCount, memorySizeMb, env, secrets, runtime: "python", minInstances, maxInstances, targetInflight, ...(timeouts ? { timeouts } : {}) };
}

/** min_instances (default 1), max_instances (default min_instances, at least 1) and target_inflight. */
function scalingFields(fields: Record<string, unknown>): Pick<AppManifest, "minInstances" | "maxInstances" | "targetInflight"> {
  const optional = (field: string, min: number, max: number, fallback: number) => {
    if (fields[field] === undefined || fields[field] === null) return fallback;
    const value = integerField(fields, field, min);
    if (value > max) throw errors.invalidParam(param(field), `${field} must be at most ${max}.`);
    return value;
  };
  const minInstances = optional("min_instances", 0, MAX_INSTANCES, 1);
  const maxInstances = optional("max_instances", 1, MAX_INSTANCES, Math.max(minInstances, 1));
  if (maxInstances < minInstances)
    throw errors.invalidParam(param("max_instances"), `max_instances ${maxInstances} is less than min_instances ${minInstances}.`, "conflicting_fields");
  const targetInflight = optional("target_inflight", 1, MAX_TARGET_INFLIGHT, DEFAULT_TARGET_INFLIGHT);
  return { minInstances, maxInstances, targetInflight };
}

function timeoutsField(value: unknown): AppTimeouts | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "object" || Array.isArray(value)) throw errors.invalidParam(param("timeouts"), "timeouts must be a mapping: request_seconds, idle_seconds.", "invalid_type");
  const fields = value as Record<string, unknown>;
  for (const key of Object.keys(fields)) if (!(TIMEOUT_FIELDS as readonly string[]).includes(key)) throw errors.unknownParam(param(`timeouts.${key.slice(0, 64)}`));
  const seconds = (field: (typeof TIMEOUT_FIELDS)[number]): number | undefined => {
    if (fields[field] === undefined || fields[field] === null) return undefined;
    const n = integerField(fields, field, 1, `timeouts.${field}`);
    if (n > MAX_TIMEOUT_SECONDS) throw errors.invalidParam(param(`timeouts.${field}`), `${field} must be at most ${MAX_TIMEOUT_SECONDS}.`);
    return n;
  };
  const requestSeconds = seconds("request_seconds");
  const idleSeconds = seconds("idle_seconds");
  return { ...(requestSeconds !== undefined ? { requestSeconds } : {}), ...(idleSeconds !== undefined ? { idleSeconds } : {}) };
}

function envField(value: unknown): Record<string, string> {
  if (value === undefined || value === null) return {};
  if (typeof value !== "object" || Array.isArray(value)) throw errors.invalidParam(param("env"), "env must be a mapping of variable names to values.", "invalid_type");
  const entries = Object.entries(value as Record<string, unknown>);
  if (entries.length > MAX_ENV_VARS) throw errors.invalidParam(param("env"), `env has more than ${MAX_ENV_VARS} variables.`);
  const env: Record<string, string> = {};
  for (const [name, v] of entries) {
    const p = param(`env.${name.slice(0, 128)}`);
    if (!ENV_NAME.test(name)) throw errors.invalidParam(p, `'${name.slice(0, 128)}' is not a variable name (letters, digits and _, not starting with a digit, at most 128).`);
    if (name.startsWith(PLATFORM_ENV_PREFIX)) throw errors.invalidParam(p, `${name}: variables starting with ${PLATFORM_ENV_PREFIX} are set by the platform.`, "reserved_name");
    if (typeof v !== "string" && typeof v !== "number" && typeof v !== "boolean") throw errors.invalidParam(p, `${name} must be a string, number or boolean.`, "invalid_type");
    const text = String(v);
    if (text.includes("\0")) throw errors.invalidParam(p, `${name} contains a NUL character.`);
    if (Buffer.byteLength(text, "utf8") > MAX_ENV_VALUE_BYTES) throw errors.invalidParam(p, `${name} is longer than ${MAX_ENV_VALUE_BYTES} bytes.`);
    env[name] = text;
  }
  return env;
}

function secretsField(value: unknown): string[] {
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value)) throw errors.invalidParam(param("secrets"), "secrets must be a list of secret names.", "invalid_type");
  if (value.length > MAX_SECRETS) throw errors.invalidParam(param("secrets"), `secrets names more than ${MAX_SECRETS} secrets.`);
  const names: string[] = [];
  value.forEach((name, i) => {
    const p = param(`secrets[${i}]`);
    if (typeof name !== "string" || !SECRET_NAME.test(name)) throw errors.invalidParam(p, "a secret name is uppercase letters, digits and _ (at most 128), as created with the secrets API.");
    if (name.startsWith(PLATFORM_ENV_PREFIX)) throw errors.invalidParam(p, `${name}: names starting with ${PLATFORM_ENV_PREFIX} are set by the platform.`, "reserved_name");
    if (names.includes(name)) throw errors.invalidParam(p, `${name} is listed twice.`, "duplicate_value");
    names.push(name);
  });
  return names;
}
