import * as Schema from "effect/Schema";

const PositiveInt = Schema.Int.check(Schema.isGreaterThanOrEqualTo(1));
const NonNegativeInt = Schema.Int.check(Schema.isGreaterThanOrEqualTo(0));

export const RateLimitsSchema = Schema.Struct({
  requests_per_minute: Schema.optionalKey(PositiveInt),
  tokens_per_minute: Schema.optionalKey(PositiveInt),
});

export const SimSettingsSchema = Schema.Struct({
  tokens_per_second: Schema.optionalKey(Schema.Number.check(Schema.isGreaterThan(0))),
  first_token_latency_ms: Schema.optionalKey(Schema.Number.check(Schema.isGreaterThanOrEqualTo(0))),
});

/** One model entry of a catalog file, as written by an operator. */
export const ModelEntrySchema = Schema.Struct({
  id: Schema.String.check(Schema.isPattern(/^[A-Za-z0-9][A-Za-z0-9._-]*\/[A-Za-z0-9][A-Za-z0-9._:-]*$/)),
  owned_by: Schema.optionalKey(Schema.String),
  engine: Schema.optionalKey(Schema.Literals(["llama", "sim"])),
  /** Local GGUF path, or "hf:<owner>/<repo>/<file.gguf>[@revision]". Not needed by the sim engine. */
  source: Schema.optionalKey(Schema.String),
  sha256: Schema.optionalKey(Schema.String.check(Schema.isPattern(/^[0-9a-f]{64}$/))),
  context_length: PositiveInt,
  max_output_tokens: Schema.optionalKey(PositiveInt),
  slots: Schema.optionalKey(PositiveInt),
  queue_limit: Schema.optionalKey(NonNegativeInt),
  replicas: Schema.optionalKey(NonNegativeInt),
  threads: Schema.optionalKey(PositiveInt),
  gpu_layers: Schema.optionalKey(Schema.Union([NonNegativeInt, Schema.Literals(["auto", "max"])])),
  batch_size: Schema.optionalKey(PositiveInt),
  chat_template: Schema.optionalKey(Schema.String),
  rate_limits: Schema.optionalKey(RateLimitsSchema),
  sim: Schema.optionalKey(SimSettingsSchema),
});

export const CatalogFileSchema = Schema.Struct({
  /** Directory that relative sources resolve against; default: the Tributary installation root. */
  base_dir: Schema.optionalKey(Schema.String),
  models: Schema.Array(ModelEntrySchema),
});

export type ModelEntry = typeof ModelEntrySchema.Type;
export type CatalogFile = typeof CatalogFileSchema.Type;
