import type { NatsConnection } from "@nats-io/transport-node";
import { loadCatalog, type ModelSpec } from "../modules/catalog/mod.js";
import {
  AccountAuthenticator,
  AccountDirectory,
  AccountStore,
  LastUsedRecorder,
  LOCAL_PROJECT_ID,
  MemberStore,
  parseConfiguredKeys,
  registerConfiguredKeys,
} from "../modules/accounts/mod.js";
import {
  accountsConfig,
  appsConfig,
  appScalingConfig,
  catalogOverridesConfig,
  artifactsConfig,
  commonConfig,
  dashboardConfig,
  filesConfig,
  gatewayConfig,
  optionToUndefined,
  rateLimitConfig,
  readConfig,
  responsesConfig,
  routingConfig,
  sandboxesConfig,
  secretsConfig,
  timeoutsConfig,
  tracesConfig,
  usageConfig,
} from "../lib/config.js";
import type { Logger } from "../lib/log.js";
import { connectionState } from "../lib/nats/connection.js";
import { retryJetStreamSetup } from "../lib/nats/setup-retry.js";
import { METRICS_CONTENT_TYPE } from "../lib/metrics.js";
import { SandboxHostClient, SandboxHostDirectory, SandboxService, SandboxStore } from "../modules/sandboxes/mod.js";
import { AppBalancer, AppExchangeClient, AppHostDirectory, AppService, DeploymentStore, PATH_ADDRESS_SEGMENT } from "../modules/apps/mod.js";
import { loadKeyRing, SecretStore } from "../modules/secrets/mod.js";
import { JobStore } from "../modules/jobs/mod.js";
import { FileStore } from "../modules/files/mod.js";
import { ArtifactStore } from "../modules/artifacts/mod.js";
import { ShuttingDown } from "../modules/errors/mod.js";
import { GenerationClient, prefixRoutingOption, RunnerDirectory, type GenerationSource } from "../modules/inference/mod.js";
import { BatchStore } from "../modules/batches/mod.js";
import { BudgetClient, BudgetReader, ClusterRateLimiter, UnlimitedRateLimiter, type RateLimiter } from "../modules/ratelimit/mod.js";
import { BackgroundLifecycle, BackgroundQueue, ConversationStore, PromptStore, ResponseEventLog, ResponseService, ResponseStore } from "../modules/responses/mod.js";
import { TraceStore, TraceWriter } from "../modules/traces/mod.js";
import { UsageRecorder, UsageStore } from "../modules/usage/mod.js";
import { GatewayServer } from "./app.js";
import { Router } from "./http/router.js";
import { HttpExchange } from "./http/exchange.js";
import { PendingBudget } from "./sse/pending-budget.js";
import { GatewayMetrics } from "./observability/gateway-metrics.js";
import { RequestRecorder } from "./observability/request-recorder.js";
import { registerDashboardRoutes } from "./dashboard/routes.js";
import { hostedAppsHandler, registerAppRoutes } from "./routes/apps.js";
import { registerArtifactRoutes } from "./routes/artifacts.js";
import { registerBatchRoutes } from "./routes/batches.js";
import { registerChatRoutes } from "./routes/chat-completions.js";
import { registerConversationRoutes } from "./routes/conversations.js";
import { registerFileRoutes } from "./routes/files.js";
import { registerHealthRoutes } from "./routes/health.js";
import { registerInvitationRoutes } from "./routes/invitations.js";
import { registerJobRoutes } from "./routes/jobs.js";
import { registerModelRoutes } from "./routes/models.js";
import { registerPromptRoutes } from "./routes/prompts.js";
import { registerResponseRoutes } from "./routes/responses.js";
import { registerShellRoute } from "./routes/sandbox-shell.js";
import { registerSandboxRoutes } from "./routes/sandboxes.js";
import { registerSecretRoutes } from "./routes/secrets.js";
import { registerTraceRoutes } from "./routes/traces.js";
import { registerUsageRoutes } from "./routes/usage.js";
import { localOrigin } from "../lib/local-origin.js";

// The gateway, composed: its settings read once, its stores opened, its routes registered, its
// server listening. gateway/main.ts runs it as a process; a test may run it in process, with a
// scripted GenerationSource in place of the runners.

/** Every setting the gateway reads, from one environment. */
function readSettings(env: Record<string, string | undefined>) {
  const read = <A>(config: Parameters<typeof readConfig<A>>[0]) => readConfig(config, env);
  return {
    common: read(commonConfig),
    catalogOverrides: read(catalogOverridesConfig),
    http: read(gatewayConfig),
    timeouts: read(timeoutsConfig),
    files: read(filesConfig),
    accounts: read(accountsConfig),
    rateLimits: read(rateLimitConfig),
    routing: read(routingConfig),
    traces: read(tracesConfig),
    usage: read(usageConfig),
    dashboard: read(dashboardConfig),
    responses: read(responsesConfig),
    artifacts: read(artifactsConfig),
    apps: read(appsConfig),
    appScaling: read(appScalingConfig),
    sandboxes: read(sandboxesConfig),
    secrets: read(secretsConfig),
  };
}
type Settings = ReturnType<typeof readSettings>;

export interface GatewayOptions {
  gatewayId: string;
  log: Logger;
  /** Where the settings come from (the process's environment). */
  env: Record<string, string | undefined>;
  /** Generations go here instead of to runners over NATS (a test's scripted source). */
  generation?: GenerationSource;
}

export interface RunningGateway {
  host: string;
  port: number;
  models: string[];
  rateLimits: "off" | Settings["rateLimits"]["scope"];
  /** Stops taking requests, drains those in flight (ending them after the drain timeout), closes what it opened. */
  drain(): Promise<void>;
  /** In flight (streams included): what a drain waits for. */
  inFlight(): number;
}

/** Starts a gateway on `nc`: listening once this resolves. */
export async function startGatewayServer(nc: NatsConnection, options: GatewayOptions): Promise<RunningGateway> {
  const { gatewayId, log } = options;
  const settings = readSettings(options.env);
  const catalog = new Map(loadCatalog(settings.common.catalogPath, settings.catalogOverrides).map((m) => [m.id, m]));
  const stops: Array<() => void | Promise<void>> = [];
  const running = <T extends { stop(): void | Promise<void> }>(part: T): T => {
    stops.push(() => part.stop());
    return part;
  };

  const runners = running(new RunnerDirectory(nc, settings.timeouts.runnerTimeoutMs));
  runners.start();
  let generation = options.generation;
  let nats: GenerationClient | undefined;
  if (!generation) {
    nats = running(new GenerationClient(nc, runners, {
      gatewayId,
      admissionTimeoutMs: settings.timeouts.admissionTimeoutMs,
      runnerTimeoutMs: settings.timeouts.runnerTimeoutMs,
      prefixRouting: prefixRoutingOption(settings.routing, catalog.values()),
    }, log));
    nats.start();
    generation = nats;
  }

  const accounts = await openAccounts(nc, settings, log, running);
  const rateLimiter = openRateLimiter(nc, settings, gatewayId, log);
  stops.push(() => rateLimiter.stop());
  const streamBudget = new PendingBudget(settings.http.maxPendingStreamBytes, settings.http.maxPendingTotalBytes, (bound, heldBytes) =>
    log.warn("slow SSE client dropped", { bound, heldBytes, heldInTotal: streamBudget.used }),
  );
  const recording = await openRecording(nc, settings, gatewayId, log, running);

  let draining = false;
  let server: GatewayServer | undefined;
  const metrics = new GatewayMetrics({
    inFlight: () => server?.inFlight ?? 0,
    activeStreams: () => HttpExchange.openStreams,
    heldConnections: () => HttpExchange.heldConnections,
    ssePendingBytes: () => streamBudget.used,
    runners,
    models: [...catalog.keys()],
    traces: recording.traceWriter,
    usage: recording.usageRecorder,
  });
  const recorder = new RequestRecorder({ metrics, usage: recording.usageRecorder, traces: recording.traceWriter, models: new Set(catalog.keys()), maxTraceBodyBytes: settings.traces.maxBodyBytes });

  const router = new Router();
  const natsLink = connectionState(nc);
  registerHealthRoutes(router, { natsConnected: natsLink.connected, draining: () => draining, readyRunners: () => runners.readyCount() });
  // Prometheus: no key (scrapers carry none); it names models and counts, never a project or key.
  router.get("/metrics", (ex) => ex.send(200, metrics.registry.render(), METRICS_CONTENT_TYPE), { public: true });
  registerModelRoutes(router, catalog, runners);
  const files = await FileStore.open(nc);
  const batches = await BatchStore.open(nc);
  registerAccountRoutes(router, settings, { accounts, recording });
  await registerInferenceRoutes(router, nc, settings, { catalog, generation, rateLimiter, streamBudget, log });
  const platform = await registerPlatformRoutes(router, nc, settings, { gatewayId, accounts, files, batches, streamBudget, log, running });
  await registerDashboard(router, nc, settings, { catalog, accounts, files, batches, recording, platform, log });

  server = new GatewayServer(router, accounts.authenticator, {
    maxHeaderBytes: settings.http.maxHeaderBytes,
    maxHeaders: settings.http.maxHeaders,
    bodyTimeoutMs: settings.http.bodyTimeoutMs,
    // A body just over the limit (the honest mistake) is still taken, so its 413 arrives whole.
    drainBodyBytes: settings.http.maxBodyBytes + 1024 * 1024,
    maxHeldConnections: settings.http.maxHeldConnections,
    maxConnections: settings.http.maxConnections,
    maxConnectionsPerAddress: settings.http.maxConnectionsPerAddress,
  }, log);
  server.onFinished = (ex) => recorder.finished(ex);
  server.hostedApps = platform.hostedApps;
  server.webSockets((app) => registerShellRoute(app, { sandboxes: platform.sandboxes, authenticator: accounts.authenticator, log }));
  const port = await server.listen(settings.http.host, settings.http.port);
  platform.listeningOn(port);

  const live = server;
  return {
    host: settings.http.host,
    port,
    models: [...catalog.keys()],
    rateLimits: settings.rateLimits.enabled === "on" ? settings.rateLimits.scope : "off",
    inFlight: () => live.inFlight,
    async drain() {
      draining = true;
      const drained = await live.close(settings.timeouts.drainTimeoutMs);
      if (!drained) {
        log.warn("drain timeout: ending open streams", { inFlight: live.inFlight });
        nats?.failAll(new ShuttingDown());
        await new Promise((r) => setTimeout(r, 100));
        live.closeAll();
      }
      // In the order they were started: the generation client and runner view first, the accounts' watch last.
      for (const stop of stops) await stop();
    },
  };
}

type Running = <T extends { stop(): void | Promise<void> }>(part: T) => T;

/** Keys from the accounts bucket (the configured ones registered first), cached here and kept current by a watch. */
async function openAccounts(nc: NatsConnection, settings: Settings, log: Logger, running: Running) {
  const apiKey = optionToUndefined(settings.http.apiKey);
  const configuredKeys = [...(apiKey ? [{ key: apiKey, projectId: LOCAL_PROJECT_ID }] : []), ...parseConfiguredKeys(settings.http.apiKeys)];
  const store = await AccountStore.open(nc);
  const members = await MemberStore.open(nc, settings.dashboard.sessionTtlSeconds);
  // Start-up's writes and watches wait out a JetStream outage as its bucket openings do.
  await retryJetStreamSetup("configured keys", () => registerConfiguredKeys(store, members, configuredKeys));
  const lastUsed = running(new LastUsedRecorder(store, settings.accounts.keyUsageFlushMs, log));
  lastUsed.start();
  const directory = running(new AccountDirectory(nc, store.kv, log));
  await retryJetStreamSetup("accounts watch", () => directory.start());
  return { store, members, authenticator: new AccountAuthenticator(directory, lastUsed) };
}
type Accounts = Awaited<ReturnType<typeof openAccounts>>;

/** The budgets every gateway shares (on an actor host), or none. */
function openRateLimiter(nc: NatsConnection, settings: Settings, gatewayId: string, log: Logger): RateLimiter {
  if (settings.rateLimits.enabled === "off") return new UnlimitedRateLimiter();
  const budgets = new BudgetClient(nc, { gatewayId, waitMs: settings.rateLimits.waitMs, requestTimeoutMs: 1_000 }, log);
  const limiter = new ClusterRateLimiter(budgets, settings.rateLimits.scope);
  limiter.start();
  return limiter;
}

/** Traces and usage: recorded when a request is over, written in the background. */
async function openRecording(nc: NatsConnection, settings: Settings, gatewayId: string, log: Logger, running: Running) {
  const traceStore = await TraceStore.open(nc, { maxAgeSeconds: settings.traces.retentionSeconds, maxBytes: settings.traces.maxStreamBytes }, log);
  const traceWriter = running(new TraceWriter(traceStore.js, { maxBuffered: settings.traces.bufferTraces, maxBufferedBytes: 64 * 1024 * 1024, flushMs: settings.traces.flushMs }, log));
  traceWriter.start();
  await UsageStore.openStream(nc);
  const usageStore = await UsageStore.open(nc, settings.usage.minuteRetentionSeconds);
  const usageRecorder = running(new UsageRecorder(traceStore.js, gatewayId, { flushMs: settings.usage.flushMs, maxRows: 100_000 }, log));
  usageRecorder.start();
  return { traceStore, traceWriter, usageStore, usageRecorder };
}

/** Invitations, traces and usage: what organizations read of their accounts through the API. */
function registerAccountRoutes(router: Router, settings: Settings, deps: { accounts: Accounts; recording: Awaited<ReturnType<typeof openRecording>> }): void {
  const { accounts, recording } = deps;
  registerInvitationRoutes(router, { store: accounts.store, members: accounts.members, maxBodyBytes: settings.http.maxBodyBytes });
  registerTraceRoutes(router, recording.traceStore);
  registerUsageRoutes(router, { usage: recording.usageStore, accounts: accounts.store });
}

/** The dashboard: people's pages over the same stores and services as the API's routes. */
async function registerDashboard(
  router: Router,
  nc: NatsConnection,
  settings: Settings,
  deps: {
    catalog: ReadonlyMap<string, ModelSpec>;
    accounts: Accounts;
    files: FileStore;
    batches: BatchStore;
    recording: Awaited<ReturnType<typeof openRecording>>;
    platform: Awaited<ReturnType<typeof registerPlatformRoutes>>;
    log: Logger;
  },
): Promise<void> {
  const { accounts, recording, platform } = deps;
  registerDashboardRoutes(router, {
    accounts: accounts.store,
    batches: deps.batches,
    files: deps.files,
    models: [...deps.catalog.values()],
    budgets: settings.rateLimits.enabled === "off" ? undefined : await BudgetReader.open(nc),
    rateLimitScope: settings.rateLimits.scope,
    rateLimitWindowMs: settings.rateLimits.windowMs,
    members: accounts.members,
    traces: recording.traceStore,
    usage: recording.usageStore,
    sandboxes: platform.sandboxes,
    jobs: platform.jobs,
    apps: platform.apps,
    artifacts: platform.artifacts,
    secrets: { store: platform.secrets, maxPerProject: settings.secrets.maxPerProject, maxValueBytes: settings.secrets.maxValueBytes },
    sessionTtlSeconds: settings.dashboard.sessionTtlSeconds,
    signInAttempts: settings.dashboard.signInAttempts,
    secureCookies: settings.dashboard.secureCookies,
    log: deps.log,
  });
}

/** Chat completions, responses (stored, background, conversations, prompts): the generations. */
async function registerInferenceRoutes(
  router: Router,
  nc: NatsConnection,
  settings: Settings,
  deps: { catalog: ReadonlyMap<string, ModelSpec>; generation: GenerationSource; rateLimiter: RateLimiter; streamBudget: PendingBudget; log: Logger },
): Promise<void> {
  const { catalog, generation: client, rateLimiter, streamBudget, log } = deps;
  const maxBodyBytes = settings.http.maxBodyBytes;
  const requestTimeoutMs = settings.timeouts.requestTimeoutMs;
  registerChatRoutes(router, { catalog, client, rateLimiter, maxBodyBytes, requestTimeoutMs, streamBudget });
  const [responses, conversations, prompts, queue, events] = await Promise.all([
    ResponseStore.open(nc, settings.responses.ttlSeconds * 1000),
    ConversationStore.open(nc),
    PromptStore.open(nc),
    BackgroundQueue.open(nc),
    ResponseEventLog.open(nc),
  ]);
  const service = new ResponseService({ catalog, client, responses, conversations, requestTimeoutMs, log });
  const background = new BackgroundLifecycle({ nc, service, events, queue, maxAttempts: settings.responses.backgroundMaxAttempts, requestTimeoutMs, log });
  registerResponseRoutes(router, { nc, service, prompts, background, events, rateLimiter, maxBodyBytes, streamBudget, log });
  registerConversationRoutes(router, { conversations, maxBodyBytes });
  registerPromptRoutes(router, { prompts, catalog, maxBodyBytes });
}

/**
 * Files, batches, artifacts, hosted apps, sandboxes, jobs and secrets. Hosted apps and sandboxes
 * are reached on the hosts found by heartbeat; the hosted addresses are relayed over NATS.
 */
async function registerPlatformRoutes(
  router: Router,
  nc: NatsConnection,
  settings: Settings,
  deps: { gatewayId: string; accounts: Accounts; files: FileStore; batches: BatchStore; streamBudget: PendingBudget; log: Logger; running: Running },
) {
  const { files, streamBudget, log, running } = deps;
  const maxBodyBytes = settings.http.maxBodyBytes;
  registerFileRoutes(router, { store: files, maxFileBytes: settings.files.maxFileBytes, maxBatchFileBytes: settings.files.maxBatchFileBytes, maxBodyBytes });
  registerBatchRoutes(router, { batches: deps.batches, files, maxBodyBytes });
  const artifacts = await ArtifactStore.open(nc);
  registerArtifactRoutes(router, { store: artifacts, limits: settings.artifacts });

  const appHosts = running(new AppHostDirectory(nc, settings.apps.hostTimeoutMs));
  appHosts.start();
  let listeningPort = 0;
  const apps = running(new AppService(nc, await DeploymentStore.open(nc), artifacts, deps.accounts.store, appHosts, {
    appsDomain: settings.apps.domain.toLowerCase(),
    publicScheme: settings.apps.publicScheme,
    publicPort: () => settings.apps.publicPort || listeningPort,
    localBase: () => localOrigin(settings.http.host, listeningPort),
    rpcTimeoutMs: 5_000,
    stopTimeoutMs: 30_000,
    defaultTimeouts: { request_seconds: settings.apps.requestTimeoutSeconds, idle_seconds: settings.apps.idleTimeoutSeconds },
  }, log));
  await retryJetStreamSetup("app routes watch", () => apps.start());
  const exchanges = running(new AppExchangeClient(nc, deps.gatewayId, { hostAlive: (id) => appHosts.alive(id), hostHeardSince: (id, since) => appHosts.heardSince(id, since) }, log));
  exchanges.start();
  const balancer = new AppBalancer(appHosts, exchanges, apps, { coldStartTimeoutMs: settings.appScaling.coldStartTimeoutMs });
  const appRoutes = { apps, balancer, maxBodyBytes, maxAppBodyBytes: settings.apps.maxBodyBytes, streamBudget, publicScheme: settings.apps.publicScheme };
  registerAppRoutes(router, appRoutes);
  // Path addresses are dispatched before the router: no route may sit under them.
  router.reserve(PATH_ADDRESS_SEGMENT);

  const sandboxSettings = settings.sandboxes;
  const sandboxHosts = running(new SandboxHostDirectory(nc, sandboxSettings.hostTimeoutMs));
  sandboxHosts.start();
  const secrets = await SecretStore.open(nc, loadKeyRing(settings.secrets.masterKey, settings.secrets.previousKeys, settings.common.home));
  const sandboxes = new SandboxService(await SandboxStore.open(nc), sandboxHosts, new SandboxHostClient(nc), {
    maxPerProject: sandboxSettings.maxPerProject,
    execOutputBytes: sandboxSettings.execOutputBytes,
    streamOutputBytes: sandboxSettings.streamOutputBytes,
  }, log);
  const resourceBounds = { maxCpuMhz: sandboxSettings.maxCpuMhz, maxMemoryMb: sandboxSettings.maxMemoryMb, maxDiskMb: sandboxSettings.maxDiskMb };
  registerSandboxRoutes(router, { sandboxes, maxBodyBytes, maxFileBytes: sandboxSettings.maxFileBytes, ...resourceBounds, streamBudget });
  const jobs = await JobStore.open(nc);
  registerJobRoutes(router, {
    offersEgress: () => sandboxHosts.offersEgress(),
    jobs,
    files,
    maxBodyBytes,
    ...resourceBounds,
    maxPerProject: sandboxSettings.maxJobsPerProject,
    streamBudget,
  });
  registerSecretRoutes(router, { secrets, maxPerProject: settings.secrets.maxPerProject, maxValueBytes: settings.secrets.maxValueBytes, maxBodyBytes });
  return {
    sandboxes,
    jobs,
    apps,
    artifacts,
    secrets,
    hostedApps: hostedAppsHandler(appRoutes),
    /** The hosted addresses name the gateway's port unless TRIBUTARY_APP_PUBLIC_PORT does. */
    listeningOn: (port: number) => void (listeningPort = port),
  };
}

