import { resolve } from "node:path";
import * as Cause from "effect/Cause";
import * as Config from "effect/Config";
import * as ConfigProvider from "effect/ConfigProvider";
import * as Effect from "effect/Effect";
import * as Exit from "effect/Exit";
import * as Option from "effect/Option";
import * as Schema from "effect/Schema";
import { repoRoot } from "./paths.js";

// Every environment variable the processes read, with its default. docs/configuration.md is
// generated from this file (`node scripts/config-doc.mjs`): each block's comment gives its
// section (first line: the title), each variable's comment its meaning (markdown; links are
// relative to docs/). test/unit/config-doc.test.ts fails when the page is stale.

const str = (name: string, fallback: string) => Config.String(name).pipe(Config.withDefault(fallback));
const int = (name: string, fallback: number) => Config.Int(name).pipe(Config.withDefault(fallback));
/** A variable that may be unset (undefined then). */
const optional = <A>(config: Config.Config<A>) => Config.option(config).pipe(Config.map(Option.getOrUndefined));
const count = (name: string) => Config.schema(Schema.Int.check(Schema.isGreaterThanOrEqualTo(0)), name);

const LOG_LEVELS = ["debug", "info", "warn", "error"] as const;

/**
 * Where things are
 * Every process reads these.
 */
export const commonConfig = Config.all({
  /** Existing NATS server(s), comma separated. Empty: `tributary start` starts an embedded nats-server. */
  natsUrl: str("NATS_URL", ""),
  /** State of a one-machine stack: the NATS JetStream store, the model cache, the local API key, the admin token, the secrets key. */
  home: str("TRIBUTARY_HOME", resolve(repoRoot, ".tributary")),
  /** The model catalog file (see [the model catalog](operations.md#the-model-catalog)); `catalog/test.yaml` serves the tiny test model. */
  catalogPath: str("TRIBUTARY_CATALOG", resolve(repoRoot, "catalog", "default.yaml")),
});

/**
 * Logging
 * Every process logs on stderr: one JSON object per line, or one readable line per event on a
 * terminal. `tributary start` reads its processes' JSON lines and shows them in its own format.
 */
export const logConfig = Config.all({
  /** `debug`, `info`, `warn` or `error`, in any case; anything else logs at `info`. */
  level: str("TRIBUTARY_LOG_LEVEL", "info").pipe(
    Config.map((v) => LOG_LEVELS.find((l) => l === v.toLowerCase()) ?? "info"),
  ),
  /**
   * `pretty` (a line per event: time, process, level, message, fields; an error's stack only at
   * `debug`), `json` (one JSON object per line, stacks included) or `auto`: pretty when stderr is a
   * terminal, else JSON.
   */
  format: Config.schema(Schema.Literals(["pretty", "json", "auto"]), "TRIBUTARY_LOG_FORMAT").pipe(Config.withDefault("auto" as const)),
  /** Set and not empty: pretty lines without colours ([no-color.org](https://no-color.org)). */
  noColor: str("NO_COLOR", ""),
  /** Set and not empty: pretty lines in colour even when stderr is not a terminal; `0` or `false`: never in colour. Wins over `NO_COLOR`. */
  forceColor: str("FORCE_COLOR", ""),
});

/**
 * Process lifecycle
 * How a process ends together with the one that started it (every process).
 */
export const lifecycleConfig = Config.all({
  /**
   * `stdin`: stdin is a pipe that only the parent holds open; when it closes (the parent ended,
   * a kill -9 included) the process stops as on SIGTERM, its drain cut short after 5 s.
   * `tributary start` sets it for its children. `off`: stdin is not read.
   */
  parentPipe: Config.schema(Schema.Literals(["off", "stdin"]), "TRIBUTARY_PARENT_PIPE").pipe(Config.withDefault("off" as const)),
});

/**
 * JetStream
 * How the buckets and streams Tributary creates are made (every process that opens one).
 */
export const jetStreamConfig = Config.all({
  /** Replicas of the buckets and streams Tributary creates, 1-5: 1 on one server, 3 on a JetStream cluster. */
  replicas: Config.schema(Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 5 })), "TRIBUTARY_JS_REPLICAS").pipe(Config.withDefault(1)),
});

/**
 * Catalog overrides
 * Catalog fields set for every model on top of the catalog file (every process that loads the
 * catalog). `TRIBUTARY_MODEL_OVERRIDES` is checked against the catalog's schema when it loads.
 */
export const catalogOverridesConfig = Config.all({
  /** The catalog's `slots` (sequences decoded together) for every model. */
  slots: optional(count("TRIBUTARY_SLOTS")),
  /** The catalog's `queue_limit` (waiting requests per runner before a 503) for every model. */
  queueLimit: optional(count("TRIBUTARY_QUEUE_LIMIT")),
  /** The catalog's `threads` (CPU threads per runner) for every model. */
  threads: optional(count("TRIBUTARY_THREADS")),
  /** The catalog's `replicas` (runner processes `tributary start` launches) for every model. */
  replicas: optional(count("TRIBUTARY_REPLICAS")),
  /** The catalog's `gpu_layers` for every model: a number of layers, `auto` or `max`. */
  gpuLayers: optional(Config.schema(Schema.Union([Schema.Literals(["auto", "max"]), Schema.Int.check(Schema.isGreaterThanOrEqualTo(0))]), "TRIBUTARY_GPU_LAYERS")),
  /** The catalog's `engine` for every model: `llama` or `sim`. */
  engine: optional(Config.schema(Schema.Literals(["llama", "sim"]), "TRIBUTARY_ENGINE")),
  /** JSON `{"<model id>": {<catalog fields>}}` applied on top of the catalog. */
  modelOverrides: optional(Config.String("TRIBUTARY_MODEL_OVERRIDES")),
});

export type CatalogOverrides = Partial<ConfigValue<typeof catalogOverridesConfig>>;

/**
 * NATS identity and TLS
 * How a process authenticates to NATS and checks its server (every process). On one machine
 * `tributary start` sets the nkey file of each process's identity; in a cluster the user and
 * password come from a Secret. Unset: no credentials (a server without authorization). See
 * [NATS security](operations.md#nats-security).
 */
export const natsAuthConfig = Config.all({
  /** File holding the nkey seed (`SU...`) of this process's NATS identity; `tributary start` sets it for each process. */
  nkeyFile: optional(Config.String("TRIBUTARY_NATS_NKEY_FILE")),
  /** User of this process's NATS identity, instead of an nkey (Kubernetes: from the `tributary-nats-auth` Secret). */
  user: optional(Config.String("TRIBUTARY_NATS_USER")),
  /** Password of that user. */
  password: optional(Config.String("TRIBUTARY_NATS_PASSWORD")),
  /** CA bundle of the NATS servers' certificates: setting it makes the connection TLS and verifies the server. */
  tlsCaFile: optional(Config.String("TRIBUTARY_NATS_TLS_CA")),
  /** Client certificate, for servers that verify clients. */
  tlsCertFile: optional(Config.String("TRIBUTARY_NATS_TLS_CERT")),
  /** Client certificate's key. */
  tlsKeyFile: optional(Config.String("TRIBUTARY_NATS_TLS_KEY")),
});

/**
 * Bootstrap
 * Read by `scripts/bootstrap.mjs` (so by `npm start` and `npm test`), after it compiles this file.
 */
export const bootstrapConfig = Config.all({
  /**
   * `on`: build node-llama-cpp's CPU library once from its bundled llama.cpp source, with OpenMP
   * (needs `cmake` and `g++`), cached in `$TRIBUTARY_HOME/llama-builds`. Needed for catalog
   * `threads` > 1: see [the llama library](operations.md#the-llama-library).
   */
  llamaSourceBuild: Config.schema(Schema.Literals(["on", "off"]), "TRIBUTARY_LLAMA_SOURCE_BUILD").pipe(Config.withDefault("off" as const)),
});

/**
 * Gateway
 * The HTTP edge: where it listens, its keys, and the bounds on connections and requests (see
 * [bounds at the edge](architecture.md#bounds-at-the-edge)).
 */
export const gatewayConfig = Config.all({
  /** Gateway port; `0` picks a free one (the gateway logs the one it got). */
  port: Config.schema(Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 65535 })), "TRIBUTARY_PORT").pipe(Config.withDefault(8080)),
  /** Gateway bind address (`0.0.0.0` in a cluster). */
  host: str("TRIBUTARY_HOST", "127.0.0.1"),
  /**
   * A key registered (idempotently) as a key of the local organization's default project
   * `proj-local`. Unset, `tributary start` makes one in `$TRIBUTARY_HOME/api-key`. Revoking it
   * sticks across restarts. The `tributary` client commands send it (see `TRIBUTARY_URL`).
   */
  apiKey: Config.option(Config.String("TRIBUTARY_API_KEY")),
  /** Largest request body (413 beyond). */
  maxBodyBytes: int("TRIBUTARY_MAX_BODY_BYTES", 8 * 1024 * 1024),
  /** Unsent bytes a slow SSE client may leave before its stream is dropped (connection closed, generation cancelled). */
  maxPendingStreamBytes: int("TRIBUTARY_MAX_PENDING_STREAM_BYTES", 8 * 1024 * 1024),
  /** The same summed over every stream of a gateway: past it, the streams holding the most are dropped. */
  maxPendingTotalBytes: int("TRIBUTARY_MAX_PENDING_TOTAL_BYTES", 256 * 1024 * 1024),
  /** Largest request head (request line and header lines): 431 beyond. uWebSockets.js closes a head over 4 KiB that arrives in pieces whatever this says. */
  maxHeaderBytes: int("TRIBUTARY_MAX_HEADER_BYTES", 4096),
  /** Most header lines in a request: 431 beyond (uWebSockets.js closes a request of 48 or more unanswered). */
  maxHeaders: int("TRIBUTARY_MAX_HEADERS", 32),
  /** A request body (not a file upload) must have arrived this long after its head: 408 and closed beyond (`0` disables). */
  bodyTimeoutMs: int("TRIBUTARY_BODY_TIMEOUT_MS", 30_000),
  /**
   * Connections answered while a body too large to drain still arrives, held unread until uWS
   * closes them (8-12 s); beyond, such an answer closes its connection at once (`0`: never hold).
   */
  maxHeldConnections: int("TRIBUTARY_MAX_HELD_CONNECTIONS", 64),
  /** Connections with a request in progress, per gateway: 503 `server_overloaded` and closed beyond. */
  maxConnections: int("TRIBUTARY_MAX_CONNECTIONS", 8192),
  /** The same per client IP address: 429 `too_many_connections` beyond (`0` disables; behind a proxy every client has the proxy's address). */
  maxConnectionsPerAddress: int("TRIBUTARY_MAX_CONNECTIONS_PER_ADDRESS", 256),
  /** More keys, each in its own project of the local organization: `key1=proj_a,key2=proj_b`. */
  apiKeys: str("TRIBUTARY_API_KEYS", ""),
});

/**
 * Request contents
 * Bounds of a request body's content, checked before any work is done for it (by the gateway,
 * and by the actor host for batch lines and stored requests). Beyond each, a 400 names the
 * parameter.
 */
export const requestLimitsConfig = Config.all({
  /** Nesting of arrays and objects in a JSON body (`{"a": 1}` is 1 deep): 400 `json_too_deep`. */
  maxJsonDepth: int("TRIBUTARY_MAX_JSON_DEPTH", 64),
  /** Values (objects, arrays and scalars) in a JSON body: 400 `json_too_large`. */
  maxJsonElements: int("TRIBUTARY_MAX_JSON_ELEMENTS", 200_000),
  /** Nesting inside one JSON schema (a tool's parameters, a response format's schema): 400 `schema_too_deep`. */
  maxSchemaDepth: int("TRIBUTARY_MAX_SCHEMA_DEPTH", 32),
  /** Characters of one such schema, serialized: 400 `schema_too_large`. */
  maxSchemaChars: int("TRIBUTARY_MAX_SCHEMA_CHARS", 131_072),
  /** Tools of one request (OpenAI: 128). */
  maxTools: int("TRIBUTARY_MAX_TOOLS", 128),
  /** Characters of a request's tool definitions together, serialized: 400 `tools_too_large`. */
  maxToolsChars: int("TRIBUTARY_MAX_TOOLS_CHARS", 1_048_576),
  /** Largest `n` of a chat completion (OpenAI: 128). */
  maxChoices: int("TRIBUTARY_MAX_CHOICES", 128),
  /** Largest `max_tool_calls` of a response. */
  maxToolCalls: int("TRIBUTARY_MAX_TOOL_CALLS", 1024),
  /** Entries of `logit_bias` (token ids must be integers up to 2^31-1). */
  maxLogitBias: int("TRIBUTARY_MAX_LOGIT_BIAS", 1024),
  /** Stop sequences of one request (OpenAI: 4). */
  maxStopSequences: int("TRIBUTARY_MAX_STOP_SEQUENCES", 4),
  /** Characters of one stop sequence. */
  maxStopChars: int("TRIBUTARY_MAX_STOP_CHARS", 256),
  /** Characters a prompt template may render to with one call's inputs, computed before rendering: 400 `template_too_large`. */
  maxTemplateRenderChars: int("TRIBUTARY_MAX_TEMPLATE_RENDER_CHARS", 8 * 1024 * 1024),
});

export type RequestLimits = ConfigValue<typeof requestLimitsConfig>;

/**
 * Timeouts
 * How long generations may take and processes may drain: the gateway, the actor host (background
 * responses, batch lines) and the runners read the same values.
 */
export const timeoutsConfig = Config.all({
  /** A runner silent this long (no delta, no heartbeat) is declared lost: its streams end with an error. */
  runnerTimeoutMs: int("TRIBUTARY_RUNNER_TIMEOUT_MS", 5_000),
  /** How long a caller waits for a runner to admit a request (a runner declared lost meanwhile is given up at once and the next tried). */
  admissionTimeoutMs: int("TRIBUTARY_ADMISSION_TIMEOUT_MS", 10_000),
  /** Deadline of one generation, queueing included. */
  requestTimeoutMs: int("TRIBUTARY_REQUEST_TIMEOUT_MS", 600_000),
  /** On shutdown, how long in-flight work (streams, generations, background runs) may finish before it is ended or handed back. */
  drainTimeoutMs: int("TRIBUTARY_DRAIN_TIMEOUT_MS", 30_000),
});

/**
 * Routing
 * How requests are spread over the runners of a model (the gateway, and the actor host for
 * background responses and batch lines). See [routing that knows the cache](architecture.md#routing-that-knows-the-cache).
 */
export const routingConfig = Config.all({
  /** `prefix`: requests sharing a prefix (system prompt and tools, a conversation's first turn) go to the runner whose cache holds it while it has room; `load`: the least loaded runner. */
  mode: Config.schema(Schema.Literals(["prefix", "load"]), "TRIBUTARY_ROUTING").pipe(Config.withDefault("prefix" as const)),
  /** Prefix routing keeps a prefix's runner while it has a free slot, then until it would hold more than this many times its share (by slots) of the work in flight (1-100). */
  loadFactor: Config.schema(Schema.Number.check(Schema.isBetween({ minimum: 1, maximum: 100 })), "TRIBUTARY_ROUTING_LOAD_FACTOR").pipe(Config.withDefault(1.25)),
  /** Prefix routing: a prefix not seen for this long no longer holds one of its runner's slots against new prefixes (1,000 to 86,400,000). */
  prefixIdleMs: Config.schema(Schema.Int.check(Schema.isBetween({ minimum: 1_000, maximum: 86_400_000 })), "TRIBUTARY_ROUTING_PREFIX_IDLE_MS").pipe(Config.withDefault(120_000)),
});

/**
 * Files and batches
 * Read by the gateway and the actor host alike.
 */
export const filesConfig = Config.all({
  /** Largest file of any purpose (OpenAI: 512 MB). */
  maxFileBytes: int("TRIBUTARY_MAX_FILE_BYTES", 512 * 1024 * 1024),
  /** Largest batch input file (OpenAI: 200 MB). */
  maxBatchFileBytes: int("TRIBUTARY_MAX_BATCH_FILE_BYTES", 200 * 1024 * 1024),
  /** Most request lines in one batch (OpenAI: 50,000). */
  maxBatchRequests: int("TRIBUTARY_BATCH_MAX_REQUESTS", 50_000),
  /** A batch line or batch job held by a process that died is handed to another after this long. */
  batchAckWaitMs: int("TRIBUTARY_BATCH_ACK_WAIT_MS", 30_000),
  /**
   * Batch lines sent to a runner beyond its free slots, so a freed slot never waits for a round
   * trip; `-1`: four times its slots, at most its queue bound (batch lines have their own bound
   * and are preempted by interactive work).
   */
  batchQueueMargin: int("TRIBUTARY_BATCH_QUEUE_MARGIN", -1),
  /** How often the actor host deletes expired files and leftovers of interrupted uploads. */
  fileSweepMs: int("TRIBUTARY_FILE_SWEEP_MS", 60_000),
});

/**
 * Artifacts and multipart uploads
 * The gateway checks every upload against these; the actor host expires unfinished uploads. See
 * [artifacts](platform.md#artifacts-and-multipart-uploads).
 */
export const artifactsConfig = Config.all({
  /** Largest artifact, declared or sent. */
  maxBytes: int("TRIBUTARY_ARTIFACT_MAX_BYTES", 5 * 1024 ** 3),
  /**
   * Largest single-shot `POST /v1/artifacts` upload; larger ones go in parts. uWebSockets.js
   * resets a request whose `Content-Length` has 10 digits or more, so about 950 MiB is the most
   * this can usefully be.
   */
  maxSingleUploadBytes: int("TRIBUTARY_ARTIFACT_MAX_SINGLE_UPLOAD_BYTES", 512 * 1024 ** 2),
  /** The part size offered by `POST /v1/multipart` (larger when the declared size needs more than the most parts). */
  partBytes: int("TRIBUTARY_ARTIFACT_PART_BYTES", 16 * 1024 ** 2),
  /** Smallest part other than the last. */
  minPartBytes: int("TRIBUTARY_ARTIFACT_MIN_PART_BYTES", 5 * 1024 ** 2),
  /** Largest part. */
  maxPartBytes: int("TRIBUTARY_ARTIFACT_MAX_PART_BYTES", 64 * 1024 ** 2),
  /** Highest part number (parts are numbered from 1). */
  maxParts: int("TRIBUTARY_ARTIFACT_MAX_PARTS", 10_000),
  /** Longest artifact filename, in UTF-8 bytes. */
  maxFilenameBytes: int("TRIBUTARY_ARTIFACT_MAX_FILENAME_BYTES", 255),
  /** Largest manifest text attached to an artifact. */
  maxManifestBytes: int("TRIBUTARY_ARTIFACT_MAX_MANIFEST_BYTES", 64 * 1024),
  /** Unfinished multipart uploads one project may hold. */
  maxOpenUploads: int("TRIBUTARY_ARTIFACT_MAX_OPEN_UPLOADS", 64),
  /** An unfinished multipart upload expires this long after it was created; its parts are then swept. */
  uploadTtlS: int("TRIBUTARY_ARTIFACT_UPLOAD_TTL_S", 3600),
  /** How often the actor host sweeps expired uploads and the leftovers of interrupted ones. */
  sweepMs: int("TRIBUTARY_ARTIFACT_SWEEP_MS", 60_000),
});

/**
 * Rate limits
 * Gateways and actor hosts. See [rate limits](operations.md#rate-limits).
 */
export const rateLimitConfig = Config.all({
  /** `off` admits everything: no budgets, no `x-ratelimit-*` headers. */
  enabled: Config.schema(Schema.Literals(["on", "off"]), "TRIBUTARY_RATE_LIMITS").pipe(Config.withDefault("on" as const)),
  /** Whose budget a request draws from, per model: `organization`, `project` or `key`. */
  scope: Config.schema(Schema.Literals(["organization", "project", "key"]), "TRIBUTARY_RATE_LIMIT_SCOPE").pipe(Config.withDefault("organization" as const)),
  /** Length of a budget window (actor hosts): a tuning and test knob; the catalog's limits apply per window. */
  windowMs: Config.schema(Schema.Int.check(Schema.isBetween({ minimum: 100, maximum: 3_600_000 })), "TRIBUTARY_RATE_LIMIT_WINDOW_MS").pipe(Config.withDefault(60_000)),
  /** How long a request may wait for a budget owner (an actor host failing over) before a 503. */
  waitMs: int("TRIBUTARY_RATE_LIMIT_WAIT_MS", 10_000),
});

/**
 * Accounts
 * The admin service (actor host) and API key bookkeeping (gateway). See
 * [accounts and API keys](operations.md#accounts-and-api-keys).
 */
export const accountsConfig = Config.all({
  /** Where the actor host serves the admin gRPC service (`off` disables it). Keep it on loopback or a private network: the traffic is not encrypted. */
  adminAddr: str("TRIBUTARY_ADMIN_ADDR", "127.0.0.1:50051"),
  /** Token the admin service requires (`authorization: Bearer ...`). Unset, the actor host makes one in `$TRIBUTARY_HOME/admin-token`, which `tributary admin` on the same machine reads. */
  adminToken: Config.option(Config.String("TRIBUTARY_ADMIN_TOKEN")),
  /** How often a gateway writes the last-used times of the keys it saw (a key's last-used time is at most this much behind). */
  keyUsageFlushMs: int("TRIBUTARY_KEY_USAGE_FLUSH_MS", 30_000),
});

/**
 * Responses
 * Stored responses and background runs (the gateway and the actor host).
 */
export const responsesConfig = Config.all({
  /** How long stored responses are kept (OpenAI keeps them 30 days). */
  ttlSeconds: int("TRIBUTARY_RESPONSE_TTL_SECONDS", 30 * 24 * 3600),
  /** Background responses one actor host runs at once. */
  backgroundConcurrency: int("TRIBUTARY_BACKGROUND_CONCURRENCY", 16),
  /** A background run whose actor host went silent this long is handed to another host. */
  backgroundAckWaitMs: int("TRIBUTARY_BACKGROUND_ACK_WAIT_MS", 30_000),
  /** Runs of one background response (hosts that died mid-run, runners lost) before it is marked failed. */
  backgroundMaxAttempts: int("TRIBUTARY_BACKGROUND_MAX_ATTEMPTS", 3),
});

/**
 * Traces
 * Traces of `log: true` requests: gateways and actor hosts write them; the stream's limits are set
 * by whoever opens it. See [traces](api.md#traces).
 */
export const tracesConfig = Config.all({
  /** Traces are kept this long: the trace stream's `max_age`; whole messages expire, oldest first. */
  retentionSeconds: Config.schema(Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 10 * 365 * 24 * 3600 })), "TRIBUTARY_TRACE_RETENTION_SECONDS").pipe(Config.withDefault(30 * 24 * 3600)),
  /** Bytes the trace stream may hold (`-1`: no limit); past it the oldest traces expire first. */
  maxStreamBytes: Config.schema(Schema.Int.check(Schema.isGreaterThanOrEqualTo(-1)), "TRIBUTARY_TRACE_MAX_STREAM_BYTES").pipe(Config.withDefault(10 * 1024 * 1024 * 1024)),
  /** Each recorded body (request, response, prompt) is cut at this many bytes (256 to 262,144), with `truncated: true`. */
  maxBodyBytes: Config.schema(Schema.Int.check(Schema.isBetween({ minimum: 256, maximum: 262_144 })), "TRIBUTARY_TRACE_MAX_BODY_BYTES").pipe(Config.withDefault(65_536)),
  /** Traces waiting to be written, per process; past it new traces are dropped and counted in `tributary_traces_dropped_total`. */
  bufferTraces: Config.schema(Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 1_000_000 })), "TRIBUTARY_TRACE_BUFFER").pipe(Config.withDefault(10_000)),
  /** How often buffered traces are written to the trace stream. */
  flushMs: Config.schema(Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 60_000 })), "TRIBUTARY_TRACE_FLUSH_MS").pipe(Config.withDefault(200)),
});

/**
 * Usage
 * How often processes publish their per-minute counts, and how long the buckets are kept. See
 * [usage](api.md#usage).
 */
export const usageConfig = Config.all({
  /** How often gateways and actor hosts publish their usage rows (the usage API lags by about this much). */
  flushMs: Config.schema(Schema.Int.check(Schema.isBetween({ minimum: 10, maximum: 60_000 })), "TRIBUTARY_USAGE_FLUSH_MS").pipe(Config.withDefault(5_000)),
  /** Minute usage buckets are kept this long; hour and day buckets 400 days. */
  minuteRetentionSeconds: int("TRIBUTARY_USAGE_MINUTE_RETENTION_SECONDS", 8 * 24 * 3600),
});

/**
 * Actor host metrics
 * The actor host's Prometheus port (the gateway serves `/metrics` on its own port). See
 * [metrics and probes](operations.md#metrics-and-probes).
 */
export const metricsConfig = Config.all({
  /** The actor host's `/metrics`, `/healthz` (liveness) and `/readyz` (readiness) port (`0`: off). */
  actorsPort: int("TRIBUTARY_ACTORS_METRICS_PORT", 0),
  /** Bind address of that port. */
  actorsHost: str("TRIBUTARY_ACTORS_METRICS_HOST", "0.0.0.0"),
});

/**
 * Dashboard
 * Sign-in sessions and sign-in links of the dashboard. See [the dashboard](operations.md#the-dashboard).
 */
export const dashboardConfig = Config.all({
  /** A dashboard session ends this long after sign-in. */
  sessionTtlSeconds: Config.schema(Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 30 * 24 * 3600 })), "TRIBUTARY_SESSION_TTL_SECONDS").pipe(Config.withDefault(12 * 3600)),
  /** Failed sign-ins allowed per account in 15 minutes (five times as many per client address), per gateway; beyond, sign-in is refused until the window passes. */
  signInAttempts: int("TRIBUTARY_SIGNIN_ATTEMPTS", 10),
  /** `Secure` on the session cookie: `auto` when the request came over TLS (`x-forwarded-proto: https`), `on`, `off`. */
  secureCookies: Config.schema(Schema.Literals(["auto", "on", "off"]), "TRIBUTARY_SECURE_COOKIES").pipe(Config.withDefault("auto" as const)),
  /** A sign-in link of the local organization's owner (`tributary start` prints one, `tributary admin sign-in-link` makes another) works once, within this long. Read by the actor host. */
  signInLinkTtlSeconds: Config.schema(Schema.Int.check(Schema.isBetween({ minimum: 60, maximum: 30 * 24 * 3600 })), "TRIBUTARY_SIGN_IN_LINK_TTL_SECONDS").pipe(Config.withDefault(24 * 3600)),
});

/**
 * `tributary start`
 * Read by the one-machine supervisor only. See [runner layout](operations.md#runner-layout).
 */
export const startConfig = Config.all({
  /**
   * CPU placement (uses `taskset`). `auto`: each runner of a CPU llama model gets `threads` CPUs of
   * its own when at least one CPU is left for the other processes; `own`: pinned even when none is
   * left; a CPU list (`2-7`): shared by the CPU runners; `off`: everything floats.
   */
  runnerCpus: str("TRIBUTARY_RUNNER_CPUS", "auto"),
  /** Port of the embedded nats-server (when `NATS_URL` is unset). */
  natsPort: Config.schema(Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 65535 })), "TRIBUTARY_NATS_PORT").pipe(Config.withDefault(4222)),
  /** `on` starts one sandbox host; `off`: sandboxes unavailable. Where bubblewrap cannot create namespaces the host exits with a clear error and is restarted with backoff. */
  sandboxHost: Config.schema(Schema.Literals(["on", "off"]), "TRIBUTARY_START_SANDBOX_HOST").pipe(Config.withDefault("on" as const)),
  /** libgomp's own. When it or `GOMP_SPINCOUNT` is set it reaches the runners as set; otherwise runners of `threads` > 1 get `GOMP_SPINCOUNT=10000`. */
  openMpWaitPolicy: Config.option(Config.String("OMP_WAIT_POLICY")),
  /** libgomp's own spin count; unset, `tributary start` gives runners of `threads` > 1 `10000` (see `OMP_WAIT_POLICY`). */
  openMpSpinCount: Config.option(Config.String("GOMP_SPINCOUNT")),
  /** libuv's own thread pool size. Unset, `tributary start` gives runners decoding on the CPU one pool thread (a step then queues its samples with its decode); set, it reaches them as set. */
  libuvPoolSize: Config.option(Config.String("UV_THREADPOOL_SIZE")),
});

/**
 * Command-line clients
 * The `tributary` commands that call a gateway (`sandbox`, `jobs`, `secrets`, `apps`, `deploy`). A
 * flag (`--url`, `--api-key`) wins over these.
 */
export const clientConfig = Config.all({
  /** The gateway they call (`http://host:port`). Unset: the address `tributary start` records in `$TRIBUTARY_HOME/gateway-url` while it runs, else `http://127.0.0.1:8080`. */
  url: Config.option(Config.String("TRIBUTARY_URL")),
  /** Read as the key when `TRIBUTARY_API_KEY` is unset (the OpenAI SDKs' variable); unset too: `$TRIBUTARY_HOME/api-key`. */
  openaiApiKey: Config.option(Config.String("OPENAI_API_KEY")),
  apiKey: Config.option(Config.String("TRIBUTARY_API_KEY")),
});

/**
 * Runners
 * The runner process: its heartbeat, the llama engine's settings, the model cache and its probes.
 */
export const runnerConfig = Config.all({
  /** Runner heartbeat period. */
  heartbeatMs: int("TRIBUTARY_HEARTBEAT_MS", 500),
  /** llama engine: after a step in which a request ended, the next step waits up to a tenth of a step (at most this, 0-1000) for a new request's prompt; `0` never waits. See [decode steps](architecture.md#decode-steps). */
  decodeLingerMaxMs: Config.schema(Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 1000 })), "TRIBUTARY_DECODE_LINGER_MAX_MS").pipe(Config.withDefault(10)),
  /** libuv's own (`startConfig` documents it): the size of the thread pool native work runs on, read by libuv at start. */
  libuvPoolSize: Config.option(Config.String("UV_THREADPOOL_SIZE")),
  /**
   * llama engine, CPU runners of `threads` > 1: `on` picks each step's decode threads from the
   * steps the runner serves; `off` decodes every step on `threads`. Off since one OpenMP team
   * leads every step: tuning then cost 13-15% of tokens/s on ~500M. See
   * [threads per step](architecture.md#threads-per-step-chosen-while-serving).
   */
  decodeThreadsTune: Config.schema(Schema.Literals(["on", "off"]), "TRIBUTARY_DECODE_THREADS_TUNE").pipe(Config.withDefault("off" as const)),
  /**
   * llama engine: flash attention. `auto`: on for models decoding on the CPU (as llama-server's
   * `-fa auto`), node-llama-cpp's default (off) on a GPU; `on` / `off` everywhere.
   */
  flashAttention: Config.schema(Schema.Literals(["auto", "on", "off"]), "TRIBUTARY_FLASH_ATTENTION").pipe(Config.withDefault("auto" as const)),
  /** Models this runner process serves, comma separated; empty: every model with replicas > 0 (`tributary start` sets one per process). */
  models: str("TRIBUTARY_RUNNER_MODELS", ""),
  /** Where Hugging Face downloads go; unset: `$TRIBUTARY_HOME/models`. */
  modelCache: Config.option(Config.String("TRIBUTARY_MODEL_CACHE")),
  /** Token for gated or private Hugging Face models. */
  hfToken: Config.option(Config.String("HF_TOKEN")),
  /** Hugging Face endpoint (a mirror or proxy; the same variable as huggingface_hub's); unset: `https://huggingface.co`. */
  hfEndpoint: Config.option(Config.String("HF_ENDPOINT")),
  /** The runner's `/healthz`, `/readyz` and Prometheus `/metrics` port (`0`: off). */
  healthPort: int("TRIBUTARY_RUNNER_HEALTH_PORT", 0),
  /** Bind address of that port. */
  healthHost: str("TRIBUTARY_RUNNER_HEALTH_HOST", "0.0.0.0"),
});

/**
 * Sandbox hosts
 * The sandbox host process (`sandbox-host/`): its capacity, the uids it runs sandboxes as, its
 * walls. See [sandboxes](platform.md#sandboxes).
 */
export const sandboxHostConfig = Config.all({
  /** Sandbox host heartbeat period (capacity, sandboxes running). */
  heartbeatMs: int("TRIBUTARY_SANDBOX_HEARTBEAT_MS", 1_000),
  /** Sandboxes one host runs at once (also the size of its uid range). */
  maxSandboxes: int("TRIBUTARY_SANDBOX_MAX", 64),
  /** The host's CPU, in MHz-like units (`TRIBUTARY_SANDBOX_CORE_MHZ` per core); `0`: cores × core MHz. One sandbox's `cpu_mhz` is at most this. */
  cpuMhz: int("TRIBUTARY_SANDBOX_CPU_MHZ", 0),
  /**
   * CPU over-commit: the `cpu_mhz` of a host's sandboxes may add up to this many times its CPU.
   * `cpu_mhz` is each sandbox's quota and weight, not a reservation (idle sandboxes use none);
   * memory is never over-committed. See [admission](platform.md#admission-what-a-host-takes).
   */
  cpuOvercommit: Config.schema(Schema.Int.check(Schema.isGreaterThanOrEqualTo(1)), "TRIBUTARY_SANDBOX_CPU_OVERCOMMIT").pipe(Config.withDefault(16)),
  /** What one core is worth in those units (`cpu_mhz: 1000` is one core's quota). */
  coreMhz: int("TRIBUTARY_SANDBOX_CORE_MHZ", 1_000),
  /** Memory a host offers, a hard limit: a sandbox reserves `memory_mb + disk_mb` of it (its workspace is a tmpfs). `0`: half the RAM. */
  memoryMb: int("TRIBUTARY_SANDBOX_MEMORY_MB", 0),
  /** First host uid of the per-sandbox uids: a host running as root gives sandbox slot N uid base + N. */
  uidBase: int("TRIBUTARY_SANDBOX_UID_BASE", 200_000),
  /** `auto`: a cgroup per sandbox when the hierarchy is writable (v1 or v2); `off`; `required`: refuse to start without. */
  cgroups: Config.schema(Schema.Literals(["auto", "off", "required"]), "TRIBUTARY_SANDBOX_CGROUPS").pipe(Config.withDefault("auto" as const)),
  /** Parent cgroup of the sandboxes (under each v1 controller, or under the host's own v2 group). */
  cgroupName: str("TRIBUTARY_SANDBOX_CGROUP", "tributary-sandboxes"),
  /** The bubblewrap binary. */
  bwrap: str("TRIBUTARY_SANDBOX_BWRAP", "bwrap"),
  /** The Python that runs the in-sandbox agent (Debian's, from the read-only `/usr`). */
  python: str("TRIBUTARY_SANDBOX_PYTHON", "/usr/bin/python3"),
  /** `network: "egress"` on this host: `auto` (offered when a probe sandbox's network comes up at start), `on` (refuse to start without it), `off`. See [network egress](platform.md#network-egress). */
  egress: Config.schema(Schema.Literals(["auto", "on", "off"]), "TRIBUTARY_SANDBOX_EGRESS").pipe(Config.withDefault("auto" as const)),
  /** IPv4 CIDRs egress sandboxes never reach, comma separated; `default` stands for the built-in list (private, shared, link-local, loopback, multicast, reserved). */
  egressDeny: str("TRIBUTARY_SANDBOX_EGRESS_DENY", "default"),
  /** `on`: this machine's own addresses are denied too (/32s, read at start). */
  egressDenyHost: Config.schema(Schema.Literals(["on", "off"]), "TRIBUTARY_SANDBOX_EGRESS_DENY_HOST").pipe(Config.withDefault("on" as const)),
  /** The slirp4netns binary (Debian package `slirp4netns`), the user-mode network stack of egress sandboxes. */
  slirp4netns: str("TRIBUTARY_SANDBOX_SLIRP4NETNS", "slirp4netns"),
  /** Where a host keeps its sandboxes' read-only inputs and egress `resolv.conf` (a 0711 directory of its own, removed when it stops); empty: the OS's temp dir. */
  workDir: str("TRIBUTARY_SANDBOX_WORK_DIR", ""),
});

/**
 * Sandboxes and jobs
 * Sandboxes and jobs as the gateway and the actor host see them: validation bounds, placement,
 * sweeping. See [sandboxes](platform.md#sandboxes) and [jobs](platform.md#jobs).
 */
export const sandboxesConfig = Config.all({
  /** Largest `memory_mb` a sandbox may ask for (a host may offer less: then a 400 names the field). */
  maxMemoryMb: int("TRIBUTARY_SANDBOX_MAX_MEMORY_MB", 4_096),
  /** Largest `disk_mb` a sandbox may ask for. */
  maxDiskMb: int("TRIBUTARY_SANDBOX_MAX_DISK_MB", 4_096),
  /** Largest `cpu_mhz` a sandbox may ask for. */
  maxCpuMhz: int("TRIBUTARY_SANDBOX_MAX_CPU_MHZ", 4_000),
  /** Sandboxes not yet stopped per project (job runs' sandboxes included). */
  maxPerProject: int("TRIBUTARY_SANDBOX_MAX_PER_PROJECT", 100),
  /** Output kept per stream (stdout, stderr) of a non-streamed exec (`truncated: true` beyond). */
  execOutputBytes: int("TRIBUTARY_SANDBOX_EXEC_OUTPUT_BYTES", 256 * 1024),
  /** Output of a streamed exec before the command is killed and `truncated`. */
  streamOutputBytes: int("TRIBUTARY_SANDBOX_STREAM_OUTPUT_BYTES", 64 * 1024 * 1024),
  /** Largest upload into a workspace (413 beyond); also the largest output file of a job. */
  maxFileBytes: int("TRIBUTARY_SANDBOX_MAX_FILE_BYTES", 64 * 1024 * 1024),
  /** A sandbox host silent this long is lost: its sandboxes end as `failed`, `host_lost`. */
  hostTimeoutMs: int("TRIBUTARY_SANDBOX_HOST_TIMEOUT_MS", 5_000),
  /** How often actor hosts check sandbox records for lost hosts and missed deadlines. */
  sweepMs: int("TRIBUTARY_SANDBOX_SWEEP_MS", 2_000),
  /** Jobs one actor host runs at once. */
  jobConcurrency: int("TRIBUTARY_JOB_CONCURRENCY", 8),
  /** A job whose actor host went silent this long is handed to another (as its next attempt). */
  jobAckWaitMs: int("TRIBUTARY_JOB_ACK_WAIT_MS", 30_000),
  /** Jobs one project may create in 7 days (how long records are kept): past it `POST /v1/jobs` answers 400 `too_many_jobs`, exact under parallel creates. */
  maxJobsPerProject: int("TRIBUTARY_JOB_MAX_PER_PROJECT", 10_000),
});

/**
 * Hosted apps (gateway)
 * Hosted apps as the gateway sees them: the hosted addresses, bounds of an exchange, app host
 * liveness. See [hosted apps](platform.md#hosted-apps).
 */
export const appsConfig = Config.all({
  /** Hosted addresses are `<project slug>.<organization slug>.<this domain>` (the `Host` header the gateway routes on). */
  domain: str("TRIBUTARY_APPS_DOMAIN", "apps.localhost"),
  /** Scheme of a deployment's `hosted_url`. */
  publicScheme: Config.schema(Schema.Literals(["http", "https"]), "TRIBUTARY_APPS_PUBLIC_SCHEME").pipe(Config.withDefault("http" as const)),
  /** Port of a deployment's `hosted_url` (`0`: the gateway's own). */
  publicPort: int("TRIBUTARY_APPS_PUBLIC_PORT", 0),
  /** Largest request body relayed to a hosted app (413 beyond). */
  maxBodyBytes: int("TRIBUTARY_APPS_MAX_BODY_BYTES", 16 * 1024 * 1024),
  /**
   * A deployment's wait for its app's response head, from the request's head on (upload included),
   * when its manifest sets no `timeouts.request_seconds`: a 504 `app_timeout` past it. 1-3,600;
   * fixed in the deployment when it is created.
   */
  requestTimeoutSeconds: Config.schema(Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 3600 })), "TRIBUTARY_APPS_REQUEST_TIMEOUT_S").pipe(Config.withDefault(60)),
  /**
   * A deployment's wait for the next bytes of a response body when its manifest sets no
   * `timeouts.idle_seconds`: past it the response is cut off (its connection closed). Long, for
   * server-sent events that go quiet between events. 1-3,600; fixed in the deployment when it is created.
   */
  idleTimeoutSeconds: Config.schema(Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 3600 })), "TRIBUTARY_APPS_IDLE_TIMEOUT_S").pipe(Config.withDefault(300)),
  /** An app host silent this long is lost: its exchanges end (502 before the response head, a dropped connection after). */
  hostTimeoutMs: int("TRIBUTARY_APP_HOST_TIMEOUT_MS", 5_000),
});

/**
 * App hosts
 * The app host inside the sandbox host process: capacity, where the platform is, how instances
 * are supervised.
 */
export const appHostConfig = Config.all({
  /** Run an app host inside each sandbox host (`off`: none). */
  enabled: Config.schema(Schema.Literals(["on", "off"]), "TRIBUTARY_APP_HOST").pipe(Config.withDefault("on" as const)),
  /** CPU an app host offers to app instances (MHz-like units, `TRIBUTARY_SANDBOX_CORE_MHZ` per core); `0`: the sandbox host's. */
  cpuMhz: int("TRIBUTARY_APP_CPU_MHZ", 0),
  /** Memory an app host offers to app instances; `0`: the sandbox host's. */
  memoryMb: int("TRIBUTARY_APP_MEMORY_MB", 0),
  /**
   * Bytes one bundle's files may hold together once unpacked. Checked entry by entry while it
   * unpacks: the first file that would cross it fails the deployment (`bundle_too_large`) before
   * a byte of it is written, and what was unpacked is removed.
   */
  bundleMaxBytes: Config.schema(Schema.Int.check(Schema.isGreaterThanOrEqualTo(1)), "TRIBUTARY_APP_BUNDLE_MAX_BYTES").pipe(Config.withDefault(1024 ** 3)),
  /** Files, directories and links one bundle may hold, checked the same way (`bundle_too_large`). */
  bundleMaxFiles: Config.schema(Schema.Int.check(Schema.isGreaterThanOrEqualTo(1)), "TRIBUTARY_APP_BUNDLE_MAX_FILES").pipe(Config.withDefault(20_000)),
  /** GPUs an app host offers (`0`: a manifest with `gpu_count > 0` is refused). */
  gpus: int("TRIBUTARY_APP_GPUS", 0),
  /** The gateway an instance's platform socket forwards to (`tributary start` sets its own gateway's address). */
  platformUrl: str("TRIBUTARY_APP_PLATFORM_URL", "http://127.0.0.1:8080"),
  /** How long an instance may take to answer its first request (else the deployment fails, `health_check_timeout`). */
  healthTimeoutMs: int("TRIBUTARY_APP_HEALTH_TIMEOUT_MS", 30_000),
  /** Restarts of a crashing instance within a minute (backoff 0.5 s doubling to 8 s) before the deployment fails, `crash_loop`. */
  maxRestarts: int("TRIBUTARY_APP_MAX_RESTARTS", 3),
  /** After a redeploy switched the address, how long the old instance still takes requests (gateways' route caches catch up). */
  switchDelayMs: int("TRIBUTARY_APP_SWITCH_DELAY_MS", 1_000),
  /** Then how long its requests in progress get to finish before it is stopped. */
  drainMs: int("TRIBUTARY_APP_DRAIN_MS", 30_000),
  /** uvicorn's grace after SIGTERM (it finishes open requests) before the instance is killed. */
  graceMs: int("TRIBUTARY_APP_GRACE_MS", 10_000),
  /**
   * Requests one app instance serves at once (each holds a Unix-socket connection on the app
   * host, whose descriptors all tenants share); one more gets an immediate 503 `app_overloaded`
   * with `Retry-After: 1`.
   */
  maxConcurrentPerInstance: Config.schema(Schema.Int.check(Schema.isGreaterThanOrEqualTo(1)), "TRIBUTARY_APPS_MAX_CONCURRENT_PER_INSTANCE").pipe(Config.withDefault(256)),
});

/**
 * Hosted apps: instances and scaling
 * The reconciler on the actor hosts (one at a time) places, replaces and scales deployments'
 * instances; gateways hold a request while an instance starts. See
 * [desired state](platform.md#desired-state-instances-and-scaling).
 */
export const appScalingConfig = Config.all({
  /** How often the reconciler compares every deployment with what the app hosts run (it also acts at once on a new deployment, and on a request waiting for an instance). */
  reconcileMs: int("TRIBUTARY_APP_RECONCILE_MS", 1_000),
  /**
   * Scaling down waits this long: a deployment runs the most instances its load asked for over
   * this window (a scale-to-zero app stops its last instance after this long without a request).
   */
  scaleDownDelayMs: int("TRIBUTARY_APP_SCALE_DOWN_DELAY_MS", 60_000),
  /** Longest a gateway holds a request for an app with no instance serving (scaled to zero, or all lost) while one starts; then a 502 `app_not_running`. */
  coldStartTimeoutMs: int("TRIBUTARY_APPS_COLD_START_TIMEOUT_MS", 60_000),
});

/**
 * Secrets
 * Gateways, sandbox hosts and `tributary admin secrets`. See [secrets](platform.md#secrets).
 */
export const secretsConfig = Config.all({
  /**
   * The secrets master key: `<key id>:<32 bytes base64>` (or only the base64; its id is then a
   * hash of it). Unset: `$TRIBUTARY_HOME/secrets-key`, a 0600 file made once. Gateways and sandbox
   * hosts need it; nothing else should have it.
   */
  masterKey: optional(Config.String("TRIBUTARY_SECRETS_KEY")),
  /** Earlier master keys (`id:base64,...`) still accepted for unwrapping during a rotation. */
  previousKeys: str("TRIBUTARY_SECRETS_PREVIOUS_KEYS", ""),
  /** Secrets per project; past it a create of a new name answers 400 `secret_limit_reached`, exact under parallel creates. */
  maxPerProject: int("TRIBUTARY_SECRETS_MAX_PER_PROJECT", 100),
  /** Largest secret value. */
  maxValueBytes: int("TRIBUTARY_SECRETS_MAX_VALUE_BYTES", 32 * 1024),
});

export class ConfigurationError extends Error {
  override name = "ConfigurationError";
}

export type ConfigValue<C> = C extends Config.Config<infer A> ? A : never;

/**
 * Reads a config from the environment (or from `env`, a record of variables: tests, benchmarks),
 * throwing a readable error naming the variable. The environment is read as it is now: Effect's
 * default provider keeps the first value it read of each variable, so a process that sets one
 * after an import read it (a test, a benchmark) would read the old value.
 */
export function readConfig<A>(config: Config.Config<A>, env: Record<string, string | undefined> = process.env): A {
  const exit = Effect.runSyncExit(config.parse(ConfigProvider.fromEnvRecord(env)));
  if (Exit.isSuccess(exit)) return exit.value;
  const detail = Cause.squash(exit.cause);
  throw new ConfigurationError(`invalid configuration: ${detail instanceof Error ? detail.message : String(detail)}`.replace(/\s+/g, " "));
}

export const optionToUndefined = <A>(o: Option.Option<A>): A | undefined => Option.getOrUndefined(o);
