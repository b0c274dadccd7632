import { readFileSync, statSync } from "node:fs";
import { isAbsolute, resolve } from "node:path";
import * as Schema from "effect/Schema";
import { parse as parseYaml } from "yaml";
import { firstIssue } from "../../lib/schema-errors.js";
import { repoRoot } from "../../lib/paths.js";
import { catalogOverridesConfig, readConfig, type CatalogOverrides } from "../../lib/config.js";
import { CatalogFileSchema, ModelEntrySchema, type ModelEntry } from "./schema.js";
import { MODEL_DEFAULTS, type ModelSpec } from "./model-spec.js";

export class CatalogError extends Error {
  override name = "CatalogError";
}

const decodeFile = Schema.decodeUnknownResult(CatalogFileSchema);
const decodeOverrides = Schema.decodeUnknownResult(
  Schema.Record(Schema.String, ModelEntrySchema.mapFields((f) => {
    const { id: _id, context_length: _cl, ...rest } = f;
    return { ...rest, context_length: Schema.optionalKey(f.context_length) };
  })),
);

/** The overrides every model gets (TRIBUTARY_SLOTS, ...: lib/config.ts), as catalog fields. */
function globalOverrides(o: CatalogOverrides): Partial<ModelEntry> {
  const fields = {
    slots: o.slots,
    queue_limit: o.queueLimit,
    threads: o.threads,
    replicas: o.replicas,
    gpu_layers: o.gpuLayers,
    engine: o.engine,
  };
  return Object.fromEntries(Object.entries(fields).filter(([, v]) => v !== undefined)) as Partial<ModelEntry>;
}

/** TRIBUTARY_MODEL_OVERRIDES: {"<model id>": {<catalog fields>}}, checked against the catalog's schema. */
function perModelOverrides(raw: string | undefined): Record<string, Partial<ModelEntry>> {
  if (!raw) return {};
  let json: unknown;
  try {
    json = JSON.parse(raw);
  } catch {
    throw new CatalogError("TRIBUTARY_MODEL_OVERRIDES is not valid JSON");
  }
  const r = decodeOverrides(json, { onExcessProperty: "error" });
  if (r._tag === "Failure") {
    const i = firstIssue(r.failure);
    throw new CatalogError(`TRIBUTARY_MODEL_OVERRIDES: ${i.path || "(root)"}: ${i.message}`);
  }
  return r.success as Record<string, Partial<ModelEntry>>;
}

function resolveSource(source: string | undefined, baseDir: string): string {
  if (!source) return "";
  if (source.startsWith("hf:") || isAbsolute(source)) return source;
  return resolve(baseDir, source);
}

export function toModelSpec(entry: ModelEntry, baseDir: string, created: number): ModelSpec {
  const engine = entry.engine ?? "llama";
  if (engine === "llama" && !entry.source)
    throw new CatalogError(`model ${entry.id}: "source" is required for the llama engine`);
  const maxOutputTokens = entry.max_output_tokens ?? entry.context_length;
  if (maxOutputTokens > entry.context_length)
    throw new CatalogError(`model ${entry.id}: max_output_tokens (${maxOutputTokens}) exceeds context_length (${entry.context_length})`);
  return {
    id: entry.id,
    ownedBy: entry.owned_by ?? MODEL_DEFAULTS.ownedBy,
    engine,
    source: resolveSource(entry.source, baseDir),
    sha256: entry.sha256,
    contextLength: entry.context_length,
    maxOutputTokens,
    slots: entry.slots ?? MODEL_DEFAULTS.slots,
    queueLimit: entry.queue_limit ?? MODEL_DEFAULTS.queueLimit,
    replicas: entry.replicas ?? MODEL_DEFAULTS.replicas,
    threads: entry.threads ?? MODEL_DEFAULTS.threads,
    setInCatalog: { replicas: entry.replicas !== undefined, threads: entry.threads !== undefined },
    gpuLayers: entry.gpu_layers ?? MODEL_DEFAULTS.gpuLayers,
    batchSize: entry.batch_size,
    chatTemplate: entry.chat_template ?? MODEL_DEFAULTS.chatTemplate,
    rateLimits: {
      requestsPerMinute: entry.rate_limits?.requests_per_minute ?? MODEL_DEFAULTS.requestsPerMinute,
      tokensPerMinute: entry.rate_limits?.tokens_per_minute ?? MODEL_DEFAULTS.tokensPerMinute,
    },
    sim: {
      tokensPerSecond: entry.sim?.tokens_per_second ?? MODEL_DEFAULTS.simTokensPerSecond,
      firstTokenLatencyMs: entry.sim?.first_token_latency_ms ?? MODEL_DEFAULTS.simFirstTokenLatencyMs,
    },
    created,
  };
}

/** Parses a catalog document (YAML or JSON text) and applies the overrides (by default: the environment's). */
export function parseCatalog(text: string, origin: string, overrides: CatalogOverrides = readConfig(catalogOverridesConfig), created = 0): ModelSpec[] {
  let doc: unknown;
  try {
    doc = parseYaml(text);
  } catch (err) {
    throw new CatalogError(`${origin}: not valid YAML/JSON: ${(err as Error).message}`);
  }
  const r = decodeFile(doc, { onExcessProperty: "error" });
  if (r._tag === "Failure") {
    const i = firstIssue(r.failure);
    throw new CatalogError(`${origin}: ${i.path || "(root)"}: ${i.message}`);
  }
  const file = r.success;
  const baseDir = file.base_dir ? resolve(repoRoot, file.base_dir) : repoRoot;
  const global = globalOverrides(overrides);
  const perModel = perModelOverrides(overrides.modelOverrides);
  const seen = new Set<string>();
  const specs = file.models.map((entry) => {
    if (seen.has(entry.id)) throw new CatalogError(`${origin}: model id "${entry.id}" appears twice`);
    seen.add(entry.id);
    return toModelSpec({ ...entry, ...global, ...perModel[entry.id] } as ModelEntry, baseDir, created);
  });
  for (const id of Object.keys(perModel))
    if (!seen.has(id)) throw new CatalogError(`TRIBUTARY_MODEL_OVERRIDES names model "${id}", which is not in ${origin}`);
  return specs;
}

export function loadCatalog(path: string, overrides: CatalogOverrides = readConfig(catalogOverridesConfig)): ModelSpec[] {
  let text: string;
  let created: number;
  try {
    text = readFileSync(path, "utf8");
    created = Math.floor(statSync(path).mtimeMs / 1000);
  } catch (err) {
    throw new CatalogError(`cannot read catalog ${path}: ${(err as Error).message}`);
  }
  return parseCatalog(text, path, overrides, created);
}
