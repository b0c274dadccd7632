import { resolve } from "node:path";
import { Cause, Config, Effect, Exit, Option, Schema } from "effect";
import { repoRoot } from "./paths.js";

// Every environment variable the processes read, with its default. The README lists them.

const str = (name: string, fallback: string) => Config.String(name).pipe(Config.withDefault(fallback));
const int = (name: string, fallback: number) => Config.Int(name).pipe(Config.withDefault(fallback));

export const commonConfig = Config.all({
  /** Existing NATS server(s), comma separated; empty means "start an embedded nats-server" (cli start). */
  natsUrl: str("NATS_URL", ""),
  home: str("TRIBUTARY_HOME", resolve(repoRoot, ".tributary")),
  catalogPath: str("TRIBUTARY_CATALOG", resolve(repoRoot, "catalog", "default.yaml")),
});

export const gatewayConfig = Config.all({
  /** 0 picks a free port (the gateway logs the one it got). */
  port: Config.schema(Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 65535 })), "TRIBUTARY_PORT").pipe(Config.withDefault(8080)),
  host: str("TRIBUTARY_HOST", "127.0.0.1"),
  /** A bearer key the stack accepts (local use and tests). */
  apiKey: Config.option(Config.String("TRIBUTARY_API_KEY")),
  maxBodyBytes: int("TRIBUTARY_MAX_BODY_BYTES", 8 * 1024 * 1024),
  /** A runner that sends neither a delta nor a heartbeat for this long is declared lost. */
  runnerTimeoutMs: int("TRIBUTARY_RUNNER_TIMEOUT_MS", 5_000),
  /** How long a gateway waits for a runner to admit or reject a request. */
  admissionTimeoutMs: int("TRIBUTARY_ADMISSION_TIMEOUT_MS", 10_000),
  /** Upper bound on one generation, queueing included; the runner abandons it afterwards. */
  requestTimeoutMs: int("TRIBUTARY_REQUEST_TIMEOUT_MS", 600_000),
  drainTimeoutMs: int("TRIBUTARY_DRAIN_TIMEOUT_MS", 30_000),
  /** Bytes a slow SSE client may leave unread before the stream is ended (deltas coalesce below it). */
  maxPendingStreamBytes: int("TRIBUTARY_MAX_PENDING_STREAM_BYTES", 8 * 1024 * 1024),
  /** More keys, each mapped to its own project: "key1=proj_a,key2=proj_b" (tests of project isolation). */
  apiKeys: str("TRIBUTARY_API_KEYS", ""),
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
  /** Same meanings as the gateway's variables of the same names, for the worker's generations. */
  requestTimeoutMs: int("TRIBUTARY_REQUEST_TIMEOUT_MS", 600_000),
  admissionTimeoutMs: int("TRIBUTARY_ADMISSION_TIMEOUT_MS", 10_000),
  runnerTimeoutMs: int("TRIBUTARY_RUNNER_TIMEOUT_MS", 5_000),
  /** On shutdown, how long running background responses may finish before they are handed back. */
  drainTimeoutMs: int("TRIBUTARY_DRAIN_TIMEOUT_MS", 30_000),
});

export const runnerConfig = Config.all({
  heartbeatMs: int("TRIBUTARY_HEARTBEAT_MS", 500),
  drainTimeoutMs: int("TRIBUTARY_DRAIN_TIMEOUT_MS", 30_000),
  /** Restrict this runner process to these catalog models (comma separated); empty = all with replicas > 0. */
  models: str("TRIBUTARY_RUNNER_MODELS", ""),
  modelCache: Config.option(Config.String("TRIBUTARY_MODEL_CACHE")),
  hfToken: Config.option(Config.String("HF_TOKEN")),
});

export class ConfigurationError extends Error {
  override name = "ConfigurationError";
}

/** Reads a config from the environment, throwing a readable error naming the variable. */
export function readConfig<A>(config: Config.Config<A>): A {
  const exit = Effect.runSyncExit(Effect.gen(function* () {
    return yield* config;
  }));
  if (Exit.isSuccess(exit)) return exit.value;
  const detail = Cause.squash(exit.cause);
  throw new ConfigurationError(`invalid configuration: ${detail instanceof Error ? detail.message : String(detail)}`.replace(/\s+/g, " "));
}

export const optionToUndefined = <A>(o: Option.Option<A>): A | undefined => Option.getOrUndefined(o);
