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

/**
 * How a process authenticates to NATS and checks its server (every process). On one machine
 * `tributary start` sets the nkey file of each process's identity; in a cluster the
 * user/password come from a Secret. Unset: no credentials (a server without authorization).
 */
export const natsAuthConfig = Config.all({
  /** File holding the nkey seed (SU...) of this process's identity. */
  nkeyFile: optional(Config.String("TRIBUTARY_NATS_NKEY_FILE")),
  user: optional(Config.String("TRIBUTARY_NATS_USER")),
  password: optional(Config.String("TRIBUTARY_NATS_PASSWORD")),
  /** CA bundle that signed the servers' certificates: set it to require TLS. */
  tlsCaFile: optional(Config.String("TRIBUTARY_NATS_TLS_CA")),
  /** Client certificate and key, when the servers verify clients. */
  tlsCertFile: optional(Config.String("TRIBUTARY_NATS_TLS_CERT")),
  tlsKeyFile: optional(Config.String("TRIBUTARY_NATS_TLS_KEY")),
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
  /** Connections answered while a body too large to drain still arrives, held unread at once: past it, closed at once. */
  maxHeldConnections: int("TRIBUTARY_MAX_HELD_CONNECTIONS", 64),
  /** Connections with a request in progress, in total: past it, 503 and close. */
  maxConnections: int("TRIBUTARY_MAX_CONNECTIONS", 8192),
  /** Connections with a request in progress from one client address: past it, 429 and close (0: no limit). */
  maxConnectionsPerAddress: int("TRIBUTARY_MAX_CONNECTIONS_PER_ADDRESS", 256),
  /** More keys, each mapped to its own project: "key1=proj_a,key2=proj_b" (tests of project isolation). */
  apiKeys: str("TRIBUTARY_API_KEYS", ""),
});

/**
 * Bounds of a request body's content, checked before any work is done for it (by the gateway,
 * and by the actor host for batch lines and stored requests): what one request can make a
 * process hold, walk or render. Each is a 400 naming the parameter beyond it.
 */
export const requestLimitsConfig = Config.all({
  /** Nesting of arrays and objects in a JSON body ({"a": 1} is 1 deep). */
  maxJsonDepth: int("TRIBUTARY_MAX_JSON_DEPTH", 64),
  /** Values (objects, arrays, strings, numbers, booleans, nulls) in a JSON body. */
  maxJsonElements: int("TRIBUTARY_MAX_JSON_ELEMENTS", 200_000),
  /** Nesting inside one JSON schema (a tool's parameters, a response format's schema). */
  maxSchemaDepth: int("TRIBUTARY_MAX_SCHEMA_DEPTH", 32),
  /** Characters of one JSON schema, serialized. */
  maxSchemaChars: int("TRIBUTARY_MAX_SCHEMA_CHARS", 131_072),
  /** Tools of one request. */
  maxTools: int("TRIBUTARY_MAX_TOOLS", 128),
  /** Characters of a request's tool definitions together, serialized. */
  maxToolsChars: int("TRIBUTARY_MAX_TOOLS_CHARS", 1_048_576),
  /** Choices of one chat completion (`n`). */
  maxChoices: int("TRIBUTARY_MAX_CHOICES", 128),
  /** `max_tool_calls` of a response. */
  maxToolCalls: int("TRIBUTARY_MAX_TOOL_CALLS", 1024),
  /** Entries of `logit_bias`. */
  maxLogitBias: int("TRIBUTARY_MAX_LOGIT_BIAS", 1024),
  /** Stop sequences of one request (OpenAI: 4). */
  maxStopSequences: int("TRIBUTARY_MAX_STOP_SEQUENCES", 4),
  /** Characters of one stop sequence. */
  maxStopChars: int("TRIBUTARY_MAX_STOP_CHARS", 256),
  /** Characters a prompt template may render to (instructions and input), computed before rendering. */
  maxTemplateRenderChars: int("TRIBUTARY_MAX_TEMPLATE_RENDER_CHARS", 8 * 1024 * 1024),
});

export type RequestLimits = ConfigValue<typeof requestLimitsConfig>;

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

/** How requests are spread over the runners of a model (the gateway and the actor host: background responses, batch lines). */
export const routingConfig = Config.all({
  /**
   * "prefix": requests sharing a prefix (system prompt and tools, a conversation's first turn) go
   * to the runner whose cache holds it while it has room; "load": to the least loaded runner.
   */
  mode: Config.schema(Schema.Literals(["prefix", "load"]), "TRIBUTARY_ROUTING").pipe(Config.withDefault("prefix" as const)),
  /** Prefix routing keeps a runner while it has a free slot, then until it has this many times its share of the work in flight (>= 1). */
  loadFactor: Config.schema(Schema.Number.check(Schema.isBetween({ minimum: 1, maximum: 100 })), "TRIBUTARY_ROUTING_LOAD_FACTOR").pipe(Config.withDefault(1.25)),
  /** Prefix routing: a prefix not seen for this long no longer holds one of its runner's slots against new prefixes. */
  prefixIdleMs: Config.schema(Schema.Int.check(Schema.isBetween({ minimum: 1_000, maximum: 86_400_000 })), "TRIBUTARY_ROUTING_PREFIX_IDLE_MS").pipe(Config.withDefault(120_000)),
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

/**
 * Artifacts and multipart uploads (gateway: the bounds of every upload; actor host: expiry of
 * unfinished uploads). Sizes are bytes.
 */
export const artifactsConfig = Config.all({
  /** Largest artifact, declared or sent (multipart uploads). */
  maxBytes: int("TRIBUTARY_ARTIFACT_MAX_BYTES", 5 * 1024 ** 3),
  /**
   * Largest single-shot upload (POST /v1/artifacts); larger ones go in parts. uWebSockets.js
   * resets a request whose Content-Length has more than 9 digits (1e9 bytes and up), so above
   * about 950 MiB a single-shot upload cannot arrive whatever this says.
   */
  maxSingleUploadBytes: int("TRIBUTARY_ARTIFACT_MAX_SINGLE_UPLOAD_BYTES", 512 * 1024 ** 2),
  /** The part size offered to a multipart upload (larger when the declared size needs more than the most parts). */
  partBytes: int("TRIBUTARY_ARTIFACT_PART_BYTES", 16 * 1024 ** 2),
  /** Smallest part that is not the last. */
  minPartBytes: int("TRIBUTARY_ARTIFACT_MIN_PART_BYTES", 5 * 1024 ** 2),
  /** Largest part. */
  maxPartBytes: int("TRIBUTARY_ARTIFACT_MAX_PART_BYTES", 64 * 1024 ** 2),
  /** Highest part number (parts are numbered from 1). */
  maxParts: int("TRIBUTARY_ARTIFACT_MAX_PARTS", 10_000),
  /** Longest filename, in UTF-8 bytes. */
  maxFilenameBytes: int("TRIBUTARY_ARTIFACT_MAX_FILENAME_BYTES", 255),
  /** Largest manifest text attached to an artifact. */
  maxManifestBytes: int("TRIBUTARY_ARTIFACT_MAX_MANIFEST_BYTES", 64 * 1024),
  /** Unfinished multipart uploads a project may hold at once. */
  maxOpenUploads: int("TRIBUTARY_ARTIFACT_MAX_OPEN_UPLOADS", 64),
  /** An unfinished multipart upload expires this long after it was created; its parts are then swept. */
  uploadTtlS: int("TRIBUTARY_ARTIFACT_UPLOAD_TTL_S", 3600),
  /** How often the actor host sweeps expired uploads and the leftovers of interrupted ones. */
  sweepMs: int("TRIBUTARY_ARTIFACT_SWEEP_MS", 60_000),
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

/** Traces of `log: true` requests (gateways and actor hosts write them; the stream's limits are set by whoever opens it). */
export const tracesConfig = Config.all({
  /** Traces older than this expire (whole messages, oldest first). */
  retentionSeconds: Config.schema(Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 10 * 365 * 24 * 3600 })), "TRIBUTARY_TRACE_RETENTION_SECONDS").pipe(Config.withDefault(30 * 24 * 3600)),
  /** Bytes the trace stream may hold; past it the oldest traces go first (-1: no limit). */
  maxStreamBytes: Config.schema(Schema.Int.check(Schema.isGreaterThanOrEqualTo(-1)), "TRIBUTARY_TRACE_MAX_STREAM_BYTES").pipe(Config.withDefault(10 * 1024 * 1024 * 1024)),
  /** Each recorded body (request, response, prompt) is cut at this many bytes, with `truncated: true`. */
  maxBodyBytes: Config.schema(Schema.Int.check(Schema.isBetween({ minimum: 256, maximum: 262_144 })), "TRIBUTARY_TRACE_MAX_BODY_BYTES").pipe(Config.withDefault(65_536)),
  /** Traces waiting to be written, per process; past it new traces are dropped (and counted). */
  bufferTraces: Config.schema(Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 1_000_000 })), "TRIBUTARY_TRACE_BUFFER").pipe(Config.withDefault(10_000)),
  /** How often the buffer is written out. */
  flushMs: Config.schema(Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 60_000 })), "TRIBUTARY_TRACE_FLUSH_MS").pipe(Config.withDefault(200)),
});

/** Usage rollups: how often processes publish their per-minute counts, how long the buckets are kept. */
export const usageConfig = Config.all({
  /** How often a gateway or actor host publishes the counts it gathered (the usage API is at most this much behind, plus the fold). */
  flushMs: Config.schema(Schema.Int.check(Schema.isBetween({ minimum: 10, maximum: 60_000 })), "TRIBUTARY_USAGE_FLUSH_MS").pipe(Config.withDefault(5_000)),
  /** Minute buckets are kept this long; hour and day buckets 400 days. */
  minuteRetentionSeconds: int("TRIBUTARY_USAGE_MINUTE_RETENTION_SECONDS", 8 * 24 * 3600),
});

/** Prometheus metrics of the actor host (the gateway serves /metrics on its own port). */
export const metricsConfig = Config.all({
  /** Port of the actor host's /metrics (0: off). */
  actorsPort: int("TRIBUTARY_ACTORS_METRICS_PORT", 0),
  actorsHost: str("TRIBUTARY_ACTORS_METRICS_HOST", "0.0.0.0"),
});

/** The dashboard: sign-in sessions. */
export const dashboardConfig = Config.all({
  /** A session ends this long after sign-in. */
  sessionTtlSeconds: Config.schema(Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 30 * 24 * 3600 })), "TRIBUTARY_SESSION_TTL_SECONDS").pipe(Config.withDefault(12 * 3600)),
  /** Failed sign-ins allowed per account and per address in 15 minutes before they are refused. */
  signInAttempts: int("TRIBUTARY_SIGNIN_ATTEMPTS", 10),
  /** "auto": Secure cookies when the request came over TLS (x-forwarded-proto: https); "on", "off". */
  secureCookies: Config.schema(Schema.Literals(["auto", "on", "off"]), "TRIBUTARY_SECURE_COOKIES").pipe(Config.withDefault("auto" as const)),
});

/** `tributary start` only. */
export const startConfig = Config.all({
  /** How the processes it starts are placed on CPUs: "auto" (each CPU runner gets `threads` CPUs of its own when some are left over), "off", or a CPU list for the runners. */
  runnerCpus: str("TRIBUTARY_RUNNER_CPUS", "auto"),
  /** Port of the embedded nats-server (when NATS_URL is unset). */
  natsPort: Config.schema(Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 65535 })), "TRIBUTARY_NATS_PORT").pipe(Config.withDefault(4222)),
  /** "on" starts one sandbox host next to the runners; "off" leaves sandboxes unavailable. */
  sandboxHost: Config.schema(Schema.Literals(["on", "off"]), "TRIBUTARY_START_SANDBOX_HOST").pipe(Config.withDefault("on" as const)),
  /** libgomp's own settings, when the user set them: they replace the spin count `start` gives runners of threads > 1. */
  openMpWaitPolicy: Config.option(Config.String("OMP_WAIT_POLICY")),
  openMpSpinCount: Config.option(Config.String("GOMP_SPINCOUNT")),
  /** libuv's, when the user set it: it replaces the one-thread pool `start` gives runners decoding on the CPU. */
  libuvPoolSize: Config.option(Config.String("UV_THREADPOOL_SIZE")),
});

export const runnerConfig = Config.all({
  heartbeatMs: int("TRIBUTARY_HEARTBEAT_MS", 500),
  /** llama engine: after a decode step in which a request ended, how long (ms, at most) the next step waits for a new request's prompt to join it; 0: never. */
  decodeLingerMaxMs: Config.schema(Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 1000 })), "TRIBUTARY_DECODE_LINGER_MAX_MS").pipe(Config.withDefault(10)),
  /** libuv's own: the size of the thread pool native work runs on (read by libuv at start; one thread lets a decode step queue its samples with its decode). */
  libuvPoolSize: Config.option(Config.String("UV_THREADPOOL_SIZE")),
  /**
   * llama engine, CPU runners of threads > 1: "on" picks each step's decode threads (1 up to
   * `threads`) from the steps it serves (ThreadTuner); "off" (the default) always decodes on
   * `threads`. Off since one OpenMP team leads every step: tuning then lost 13-15% of tokens/s on
   * ~500M (bench/results/vs-llama-server-fixed-500m-tune.md).
   */
  decodeThreadsTune: Config.schema(Schema.Literals(["on", "off"]), "TRIBUTARY_DECODE_THREADS_TUNE").pipe(Config.withDefault("off" as const)),
  /**
   * llama engine: flash attention (attention as one fused graph node). "auto": on for models
   * decoding on the CPU, as llama.cpp's own default enables it where the backend supports it
   * (llama-server's -fa auto), node-llama-cpp's default (off) on a GPU; "on"/"off" everywhere.
   */
  flashAttention: Config.schema(Schema.Literals(["auto", "on", "off"]), "TRIBUTARY_FLASH_ATTENTION").pipe(Config.withDefault("auto" as const)),
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

/** The sandbox host process (sandbox-host/): its capacity, the uids it runs sandboxes as, its limits. */
export const sandboxHostConfig = Config.all({
  heartbeatMs: int("TRIBUTARY_SANDBOX_HEARTBEAT_MS", 1_000),
  /** Sandboxes this host runs at once (also the size of its uid range). */
  maxSandboxes: int("TRIBUTARY_SANDBOX_MAX", 64),
  /** CPU this host offers, in MHz-like units (one core = TRIBUTARY_SANDBOX_CORE_MHZ); 0: cores x core MHz. */
  cpuMhz: int("TRIBUTARY_SANDBOX_CPU_MHZ", 0),
  coreMhz: int("TRIBUTARY_SANDBOX_CORE_MHZ", 1_000),
  /** Memory this host offers to sandboxes (memory plus workspace, both in RAM); 0: half the machine's. */
  memoryMb: int("TRIBUTARY_SANDBOX_MEMORY_MB", 0),
  /** First host uid of the per-sandbox uid range (used when the host runs as root). */
  uidBase: int("TRIBUTARY_SANDBOX_UID_BASE", 200_000),
  /** "auto" (use cgroups when writable), "off", or "required" (refuse to start without them). */
  cgroups: Config.schema(Schema.Literals(["auto", "off", "required"]), "TRIBUTARY_SANDBOX_CGROUPS").pipe(Config.withDefault("auto" as const)),
  /** Parent cgroup name under each controller (v1) or under the host's own cgroup (v2). */
  cgroupName: str("TRIBUTARY_SANDBOX_CGROUP", "tributary-sandboxes"),
  /** The bubblewrap binary. */
  bwrap: str("TRIBUTARY_SANDBOX_BWRAP", "bwrap"),
  /** Python for the in-sandbox agent (read-only from the host's /usr). */
  python: str("TRIBUTARY_SANDBOX_PYTHON", "/usr/bin/python3"),
  /** Network egress for sandboxes that ask: "auto" (offer it when slirp4netns works here), "on" (refuse to start without it), "off". */
  egress: Config.schema(Schema.Literals(["auto", "on", "off"]), "TRIBUTARY_SANDBOX_EGRESS").pipe(Config.withDefault("auto" as const)),
  /** IPv4 CIDRs egress sandboxes never reach, comma-separated; "default" stands for the built-in list (private, link-local, loopback, ...). */
  egressDeny: str("TRIBUTARY_SANDBOX_EGRESS_DENY", "default"),
  /** "on": this machine's own addresses are denied too (services bound to 0.0.0.0 stay out of reach). */
  egressDenyHost: Config.schema(Schema.Literals(["on", "off"]), "TRIBUTARY_SANDBOX_EGRESS_DENY_HOST").pipe(Config.withDefault("on" as const)),
  /** The slirp4netns binary (the user-mode network stack of egress sandboxes). */
  slirp4netns: str("TRIBUTARY_SANDBOX_SLIRP4NETNS", "slirp4netns"),
  /** Where the host keeps its sandboxes' read-only inputs (a directory of its own is made below it); empty: the OS's temp dir. */
  workDir: str("TRIBUTARY_SANDBOX_WORK_DIR", ""),
});

/** Sandboxes as the gateway and the actor host see them (validation bounds, placement, sweeping). */
export const sandboxesConfig = Config.all({
  /** Largest memory_mb, disk_mb and cpu_mhz one sandbox may ask for (a host may offer less). */
  maxMemoryMb: int("TRIBUTARY_SANDBOX_MAX_MEMORY_MB", 4_096),
  maxDiskMb: int("TRIBUTARY_SANDBOX_MAX_DISK_MB", 4_096),
  maxCpuMhz: int("TRIBUTARY_SANDBOX_MAX_CPU_MHZ", 4_000),
  /** Sandboxes not yet stopped per project. */
  maxPerProject: int("TRIBUTARY_SANDBOX_MAX_PER_PROJECT", 100),
  /** Output kept per stream of a non-streamed exec. */
  execOutputBytes: int("TRIBUTARY_SANDBOX_EXEC_OUTPUT_BYTES", 256 * 1024),
  /** Output of a streamed exec before it is cut (and the command killed). */
  streamOutputBytes: int("TRIBUTARY_SANDBOX_STREAM_OUTPUT_BYTES", 64 * 1024 * 1024),
  /** Largest file upload into a sandbox's workspace. */
  maxFileBytes: int("TRIBUTARY_SANDBOX_MAX_FILE_BYTES", 64 * 1024 * 1024),
  /** A host silent this long is lost: its sandboxes end as failed, host_lost. */
  hostTimeoutMs: int("TRIBUTARY_SANDBOX_HOST_TIMEOUT_MS", 5_000),
  /** How often the actor host checks sandbox records for expiry and lost hosts. */
  sweepMs: int("TRIBUTARY_SANDBOX_SWEEP_MS", 2_000),
  /** Jobs one actor host runs at once. */
  jobConcurrency: int("TRIBUTARY_JOB_CONCURRENCY", 8),
  /** A job whose worker went silent this long (its actor host died) is handed to another worker. */
  jobAckWaitMs: int("TRIBUTARY_JOB_ACK_WAIT_MS", 30_000),
  /** Job records one project holds (they are kept 7 days): past it, POST /v1/jobs is refused (too_many_jobs). */
  maxJobsPerProject: int("TRIBUTARY_JOB_MAX_PER_PROJECT", 10_000),
});

/** Hosted apps as the gateway sees them: the hosted addresses, bounds of an exchange, app host liveness. */
export const appsConfig = Config.all({
  /** Hosted addresses are `<project slug>.<organization slug>.<this domain>` (the Host header). */
  domain: str("TRIBUTARY_APPS_DOMAIN", "apps.localhost"),
  /** Scheme and port of hosted_url (what clients reach the gateway on); port 0: the gateway's own. */
  publicScheme: Config.schema(Schema.Literals(["http", "https"]), "TRIBUTARY_APPS_PUBLIC_SCHEME").pipe(Config.withDefault("http" as const)),
  publicPort: int("TRIBUTARY_APPS_PUBLIC_PORT", 0),
  /** Largest request body sent to a hosted app. */
  maxBodyBytes: int("TRIBUTARY_APPS_MAX_BODY_BYTES", 16 * 1024 * 1024),
  /** Longest wait for a hosted app's response head (a 504 after it). */
  headTimeoutMs: int("TRIBUTARY_APPS_HEAD_TIMEOUT_MS", 60_000),
  /** An app host silent this long is lost: its exchanges end with a 502. */
  hostTimeoutMs: int("TRIBUTARY_APP_HOST_TIMEOUT_MS", 5_000),
});

/** The app host inside the sandbox host process: capacity, where the platform is, instance supervision. */
export const appHostConfig = Config.all({
  /** "on" runs an app host in each sandbox host; "off" does not. */
  enabled: Config.schema(Schema.Literals(["on", "off"]), "TRIBUTARY_APP_HOST").pipe(Config.withDefault("on" as const)),
  /** CPU (MHz-like units, as sandboxes) and memory offered to app instances; 0: the sandbox host's. */
  cpuMhz: int("TRIBUTARY_APP_CPU_MHZ", 0),
  memoryMb: int("TRIBUTARY_APP_MEMORY_MB", 0),
  /** GPUs app instances may have (0: CPU-only apps). */
  gpus: int("TRIBUTARY_APP_GPUS", 0),
  /** The gateway an instance's platform socket forwards to. */
  platformUrl: str("TRIBUTARY_APP_PLATFORM_URL", "http://127.0.0.1:8080"),
  /** How long an instance may take to answer its first request. */
  healthTimeoutMs: int("TRIBUTARY_APP_HEALTH_TIMEOUT_MS", 30_000),
  /** Restarts within a minute before a crashing deployment fails. */
  maxRestarts: int("TRIBUTARY_APP_MAX_RESTARTS", 3),
  /** After a redeploy's switch: how long the old instance still takes requests, then how long its exchanges get to finish. */
  switchDelayMs: int("TRIBUTARY_APP_SWITCH_DELAY_MS", 1_000),
  drainMs: int("TRIBUTARY_APP_DRAIN_MS", 30_000),
  /** uvicorn's grace after SIGTERM (it closes idle connections, finishes the rest) before the instance is killed. */
  graceMs: int("TRIBUTARY_APP_GRACE_MS", 10_000),
  /**
   * Requests one app instance serves at once (each holds a connection, a descriptor of the host
   * every tenant's instances share); one more gets a 503 with Retry-After.
   */
  maxConcurrentPerInstance: Config.schema(Schema.Int.check(Schema.isGreaterThanOrEqualTo(1)), "TRIBUTARY_APPS_MAX_CONCURRENT_PER_INSTANCE").pipe(Config.withDefault(256)),
});

/** Secrets (gateway, sandbox hosts, `tributary admin secrets`). */
export const secretsConfig = Config.all({
  /** The master key: "<key id>:<32 bytes, base64>" (or just the base64); default: $TRIBUTARY_HOME/secrets-key (0600, made once). */
  masterKey: optional(Config.String("TRIBUTARY_SECRETS_KEY")),
  /** Earlier master keys still able to unwrap data keys during a rotation: "<id>:<base64>,...". */
  previousKeys: str("TRIBUTARY_SECRETS_PREVIOUS_KEYS", ""),
  maxPerProject: int("TRIBUTARY_SECRETS_MAX_PER_PROJECT", 100),
  maxValueBytes: int("TRIBUTARY_SECRETS_MAX_VALUE_BYTES", 32 * 1024),
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
