import { resolve } from "node:path";
import { Cause, Config, ConfigProvider, Effect, Exit, Option, Schema } from "effect";
import { repoRoot } from "./paths.js";

// Every environment variable the processes read, with its default. The README lists them.

const str = (name: string, fallback: string) => Config.String(name).pipe(Config.withDefault(fallback));
const int = (name: string, fallback: number) => Config.Int(name).pipe(Config.withDefault(fallback));
/** A variable that may be unset (undefined then). */
const optional = <A>(config: Config.Config<A>) => Config.option(config).pipe(Config.map(Option.getOrUndefined));
const count = (name: string) => Config.schema(Schema.Int.check(Schema.isGreaterThanOrEqualTo(0)), name);

const LOG_LEVELS = ["debug", "info", "warn", "error"] as const;

/** Read by every process when its logger is first used. */
export const logConfig = Config.all({
  /** debug, info, warn or error, in any case; anything else logs at info. */
  level: str("TRIBUTARY_LOG_LEVEL", "info").pipe(
    Config.map((v) => LOG_LEVELS.find((l) => l === v.toLowerCase()) ?? "info"),
  ),
});

/** How JetStream buckets and streams are created (every process that opens one). */
export const jetStreamConfig = Config.all({
  /** Replicas of the buckets and streams Tributary creates: 1 on one server, 3 on a JetStream cluster. */
  replicas: Config.schema(Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 5 })), "TRIBUTARY_JS_REPLICAS").pipe(Config.withDefault(1)),
});

/**
 * Catalog fields set for every model on top of the catalog file (every process that loads the
 * catalog). TRIBUTARY_MODEL_OVERRIDES is checked against the catalog's schema when it loads.
 */
export const catalogOverridesConfig = Config.all({
  slots: optional(count("TRIBUTARY_SLOTS")),
  queueLimit: optional(count("TRIBUTARY_QUEUE_LIMIT")),
  threads: optional(count("TRIBUTARY_THREADS")),
  replicas: optional(count("TRIBUTARY_REPLICAS")),
  /** A number of layers, "auto" or "max". */
  gpuLayers: optional(Config.schema(Schema.Union([Schema.Literals(["auto", "max"]), Schema.Int.check(Schema.isGreaterThanOrEqualTo(0))]), "TRIBUTARY_GPU_LAYERS")),
  engine: optional(Config.schema(Schema.Literals(["llama", "sim"]), "TRIBUTARY_ENGINE")),
  /** JSON: {"<model id>": {<catalog fields>}}. */
  modelOverrides: optional(Config.String("TRIBUTARY_MODEL_OVERRIDES")),
});

export type CatalogOverrides = Partial<ConfigValue<typeof catalogOverridesConfig>>;

export const commonConfig = Config.all({
  /** Existing NATS server(s), comma separated; empty means "start an embedded nats-server" (cli start). */
  natsUrl: str("NATS_URL", ""),
  home: str("TRIBUTARY_HOME", resolve(repoRoot, ".tributary")),
  catalogPath: str("TRIBUTARY_CATALOG", resolve(repoRoot, "catalog", "default.yaml")),
});

/** Read by scripts/bootstrap.mjs (after it compiles this file). */
export const bootstrapConfig = Config.all({
  /**
   * "on": build node-llama-cpp's CPU library from the llama.cpp source it bundles (OpenMP, this
   * CPU's instruction set; needs cmake and a C++ compiler; 13 min of CPU time, once: cached in
   * $TRIBUTARY_HOME/llama-builds). Its prebuilt library spins at every step barrier and makes
   * `threads` > 1 many times slower on a busy machine; the local build does not (bench/README.md).
   */
  llamaSourceBuild: Config.schema(Schema.Literals(["on", "off"]), "TRIBUTARY_LLAMA_SOURCE_BUILD").pipe(Config.withDefault("off" as const)),
});

export const gatewayConfig = Config.all({
  /** 0 picks a free port (the gateway logs the one it got). */
  port: Config.schema(Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 65535 })), "TRIBUTARY_PORT").pipe(Config.withDefault(8080)),
  host: str("TRIBUTARY_HOST", "127.0.0.1"),
  /** A key registered (idempotently) as a key of the local organization: local use and tests. */
  apiKey: Config.option(Config.String("TRIBUTARY_API_KEY")),
  maxBodyBytes: int("TRIBUTARY_MAX_BODY_BYTES", 8 * 1024 * 1024),
  /** Bytes a slow SSE client may leave unread before the stream is ended (deltas coalesce below it). */
  maxPendingStreamBytes: int("TRIBUTARY_MAX_PENDING_STREAM_BYTES", 8 * 1024 * 1024),
  /** The same, summed over every stream of this gateway: the stream that crosses it is ended. */
  maxPendingTotalBytes: int("TRIBUTARY_MAX_PENDING_TOTAL_BYTES", 256 * 1024 * 1024),
  /** Request head: header lines (names + values + request line) past this many bytes are a 431. */
  maxHeaderBytes: int("TRIBUTARY_MAX_HEADER_BYTES", 4096),
  /** Request head: more header lines than this are a 431. */
  maxHeaders: int("TRIBUTARY_MAX_HEADERS", 32),
  /** A JSON request body must have fully arrived this long after its head (408 and close); uploads are exempt. */
  bodyTimeoutMs: int("TRIBUTARY_BODY_TIMEOUT_MS", 30_000),
  /** Connections with a request in progress, in total: past it, 503 and close. */
  maxConnections: int("TRIBUTARY_MAX_CONNECTIONS", 8192),
  /** Connections with a request in progress from one client address: past it, 429 and close (0: no limit). */
  maxConnectionsPerAddress: int("TRIBUTARY_MAX_CONNECTIONS_PER_ADDRESS", 256),
  /** More keys, each mapped to its own project: "key1=proj_a,key2=proj_b" (tests of project isolation). */
  apiKeys: str("TRIBUTARY_API_KEYS", ""),
});

/**
 * How long generations may take and processes may drain: the gateway, the actor host (background
 * responses, batch lines) and the runners read the same values.
 */
export const timeoutsConfig = Config.all({
  /** A runner that sends neither a delta nor a heartbeat for this long is declared lost. */
  runnerTimeoutMs: int("TRIBUTARY_RUNNER_TIMEOUT_MS", 5_000),
  /** How long a caller waits for a runner to admit or reject a request. */
  admissionTimeoutMs: int("TRIBUTARY_ADMISSION_TIMEOUT_MS", 10_000),
  /** Upper bound on one generation, queueing included; the runner abandons it afterwards. */
  requestTimeoutMs: int("TRIBUTARY_REQUEST_TIMEOUT_MS", 600_000),
  /** On shutdown, how long in-flight work may finish (streams, generations, background runs) before it is ended or handed back. */
  drainTimeoutMs: int("TRIBUTARY_DRAIN_TIMEOUT_MS", 30_000),
});

/** Files and batches (read by the gateway and the actor host alike). */
export const filesConfig = Config.all({
  /** Largest file of any purpose (OpenAI: 512 MB). */
  maxFileBytes: int("TRIBUTARY_MAX_FILE_BYTES", 512 * 1024 * 1024),
  /** Largest batch input file (OpenAI: 200 MB). */
  maxBatchFileBytes: int("TRIBUTARY_MAX_BATCH_FILE_BYTES", 200 * 1024 * 1024),
  /** Most request lines in one batch (OpenAI: 50,000). */
  maxBatchRequests: int("TRIBUTARY_BATCH_MAX_REQUESTS", 50_000),
  /** A batch line or job held by a process that died is handed to another after this long. */
  batchAckWaitMs: int("TRIBUTARY_BATCH_ACK_WAIT_MS", 30_000),
  /**
   * Batch lines sent to a runner beyond its free slots, so a freed slot never waits for a round
   * trip; -1 (the default) means four times its slots, at most its queue bound (batch lines have
   * their own bound and are preempted by interactive work, so the depth costs interactive nothing).
   */
  batchQueueMargin: int("TRIBUTARY_BATCH_QUEUE_MARGIN", -1),
  /** How often the actor host deletes expired files. */
  fileSweepMs: int("TRIBUTARY_FILE_SWEEP_MS", 60_000),
});

/** Rate limits (gateways and actor hosts). */
export const rateLimitConfig = Config.all({
  /** "off" admits everything (no budgets, no x-ratelimit headers). */
  enabled: Config.schema(Schema.Literals(["on", "off"]), "TRIBUTARY_RATE_LIMITS").pipe(Config.withDefault("on" as const)),
  /** Whose budget a request draws from, per model. */
  scope: Config.schema(Schema.Literals(["organization", "project", "key"]), "TRIBUTARY_RATE_LIMIT_SCOPE").pipe(Config.withDefault("organization" as const)),
  /** Length of a budget window (a tuning and test knob: the catalog's limits are per window). Read by actor hosts. */
  windowMs: Config.schema(Schema.Int.check(Schema.isBetween({ minimum: 100, maximum: 3_600_000 })), "TRIBUTARY_RATE_LIMIT_WINDOW_MS").pipe(Config.withDefault(60_000)),
  /** How long a request waits for a budget owner (during a failover) before a 503. */
  waitMs: int("TRIBUTARY_RATE_LIMIT_WAIT_MS", 10_000),
});

/** Accounts: the admin service (actor host) and API key bookkeeping (gateway). */
export const accountsConfig = Config.all({
  /** host:port of the admin gRPC service; "off" disables it. Loopback by default. */
  adminAddr: str("TRIBUTARY_ADMIN_ADDR", "127.0.0.1:50051"),
  /** Token the admin service requires; default: made once in $TRIBUTARY_HOME/admin-token. */
  adminToken: Config.option(Config.String("TRIBUTARY_ADMIN_TOKEN")),
  /** How often a gateway writes the last-used times of the keys it saw. */
  keyUsageFlushMs: int("TRIBUTARY_KEY_USAGE_FLUSH_MS", 30_000),
});

/** Stored responses and background runs (read by the gateway and the actor host). */
export const responsesConfig = Config.all({
  /** How long stored responses are kept (OpenAI keeps them 30 days). */
  ttlSeconds: int("TRIBUTARY_RESPONSE_TTL_SECONDS", 30 * 24 * 3600),
  /** Background responses one actor host runs at once. */
  backgroundConcurrency: int("TRIBUTARY_BACKGROUND_CONCURRENCY", 16),
  /** A background run whose worker is silent this long (crashed) is handed to another worker. */
  backgroundAckWaitMs: int("TRIBUTARY_BACKGROUND_ACK_WAIT_MS", 30_000),
  /** Attempts of one background response before it is marked failed. */
  backgroundMaxAttempts: int("TRIBUTARY_BACKGROUND_MAX_ATTEMPTS", 3),
});

/** `tributary start` only. */
export const startConfig = Config.all({
  /** How the processes it starts are placed on CPUs: "auto" (each CPU runner gets `threads` CPUs of its own when some are left over), "off", or a CPU list for the runners. */
  runnerCpus: str("TRIBUTARY_RUNNER_CPUS", "auto"),
  /** Port of the embedded nats-server (when NATS_URL is unset). */
  natsPort: Config.schema(Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 65535 })), "TRIBUTARY_NATS_PORT").pipe(Config.withDefault(4222)),
});

export const runnerConfig = Config.all({
  heartbeatMs: int("TRIBUTARY_HEARTBEAT_MS", 500),
  /** Restrict this runner process to these catalog models (comma separated); empty = all with replicas > 0. */
  models: str("TRIBUTARY_RUNNER_MODELS", ""),
  modelCache: Config.option(Config.String("TRIBUTARY_MODEL_CACHE")),
  hfToken: Config.option(Config.String("HF_TOKEN")),
  /** Hugging Face endpoint, for mirrors and proxies (same variable as huggingface_hub). */
  hfEndpoint: Config.option(Config.String("HF_ENDPOINT")),
  /** Probes and Prometheus metrics over HTTP (/healthz, /readyz, /metrics); 0 disables them. */
  healthPort: int("TRIBUTARY_RUNNER_HEALTH_PORT", 0),
  healthHost: str("TRIBUTARY_RUNNER_HEALTH_HOST", "0.0.0.0"),
});

export class ConfigurationError extends Error {
  override name = "ConfigurationError";
}

export type ConfigValue<C> = C extends Config.Config<infer A> ? A : never;

/**
 * Reads a config from the environment (or from `env`, a record of variables: tests, benchmarks),
 * throwing a readable error naming the variable.
 */
export function readConfig<A>(config: Config.Config<A>, env?: Record<string, string | undefined>): A {
  const exit = Effect.runSyncExit(env ? config.parse(ConfigProvider.fromEnvRecord(env)) : Effect.gen(function* () {
    return yield* config;
  }));
  if (Exit.isSuccess(exit)) return exit.value;
  const detail = Cause.squash(exit.cause);
  throw new ConfigurationError(`invalid configuration: ${detail instanceof Error ? detail.message : String(detail)}`.replace(/\s+/g, " "));
}

export const optionToUndefined = <A>(o: Option.Option<A>): A | undefined => Option.getOrUndefined(o);
