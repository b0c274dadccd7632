// The gateway process: HTTP/SSE at the edge, protobuf over NATS behind it.
//   node dist/gateway/main.js
import { hostname } from "node:os";
import { loadCatalog } from "../modules/catalog/mod.js";
import { AccountStore, LOCAL_PROJECT_ID, parseConfiguredKeys, registerConfiguredKeys, AccountAuthenticator, AccountDirectory, LastUsedRecorder } from "../modules/accounts/mod.js";
import { accountsConfig, appsConfig, artifactsConfig, commonConfig, filesConfig, gatewayConfig, optionToUndefined, rateLimitConfig, readConfig, responsesConfig, routingConfig, sandboxesConfig, secretsConfig, timeoutsConfig } from "../lib/config.js";
import { SandboxHostClient, SandboxHostDirectory, SandboxService, SandboxStore } from "../modules/sandboxes/mod.js";
import { AppExchangeClient, AppHostDirectory, AppService, DeploymentStore } from "../modules/apps/mod.js";
import { hostedAppsHandler, registerAppRoutes } from "./routes/apps.js";
import { loadKeyRing, SecretStore } from "../modules/secrets/mod.js";
import { registerSandboxRoutes } from "./routes/sandboxes.js";
import { registerSecretRoutes } from "./routes/secrets.js";
import { registerJobRoutes } from "./routes/jobs.js";
import { registerShellRoute } from "./routes/sandbox-shell.js";
import { JobStore } from "../modules/jobs/mod.js";
import { FileStore } from "../modules/files/mod.js";
import { ArtifactStore } from "../modules/artifacts/mod.js";
import { randomToken } from "../lib/ids.js";
import { createLogger } from "../lib/log.js";
import { connectionState, connectNats, DEFAULT_NATS_URL } from "../lib/nats/connection.js";
import { exitIfStartFails, onShutdown } from "../lib/process/lifecycle.js";
import { GatewayServer } from "./app.js";
import { ShuttingDown } from "../modules/errors/mod.js";
import { Router } from "./http/router.js";
import { GenerationClient, prefixRoutingOption, RunnerDirectory } from "../modules/inference/mod.js";
import { BatchStore } from "../modules/batches/mod.js";
import { registerBatchRoutes } from "./routes/batches.js";
import { BudgetClient, BudgetReader, ClusterRateLimiter, UnlimitedRateLimiter, type RateLimiter } from "../modules/ratelimit/mod.js";
import { registerChatRoutes } from "./routes/chat-completions.js";
import { registerFileRoutes } from "./routes/files.js";
import { registerArtifactRoutes } from "./routes/artifacts.js";
import { BackgroundLifecycle, BackgroundQueue, ConversationStore, PromptStore, ResponseEventLog, ResponseService, ResponseStore } from "../modules/responses/mod.js";
import { registerConversationRoutes } from "./routes/conversations.js";
import { registerPromptRoutes } from "./routes/prompts.js";
import { registerResponseRoutes } from "./routes/responses.js";
import { registerHealthRoutes } from "./routes/health.js";
import { registerInvitationRoutes } from "./routes/invitations.js";
import { registerModelRoutes } from "./routes/models.js";
import { PendingBudget } from "./sse/pending-budget.js";
import { keepServingOnUncaughtErrors } from "./last-resort.js";
import { TraceStore, TraceWriter } from "../modules/traces/mod.js";
import { UsageRecorder, UsageStore } from "../modules/usage/mod.js";
import { METRICS_CONTENT_TYPE } from "../lib/metrics.js";
import { registerTraceRoutes } from "./routes/traces.js";
import { registerUsageRoutes } from "./routes/usage.js";
import { GatewayMetrics } from "./observability/gateway-metrics.js";
import { RequestRecorder } from "./observability/request-recorder.js";
import { HttpExchange } from "./http/exchange.js";
import { dashboardConfig, tracesConfig, usageConfig } from "../lib/config.js";
import { MemberStore } from "../modules/accounts/mod.js";
import { registerDashboardRoutes } from "./dashboard/routes.js";

const gatewayId = `g${randomToken(10)}`;
const log = createLogger("gateway", { pid: process.pid, gatewayId });

async function main(): Promise<void> {
  const common = readConfig(commonConfig);
  const config = readConfig(gatewayConfig);
  const timeouts = readConfig(timeoutsConfig);
  const files = readConfig(filesConfig);
  const accounts = readConfig(accountsConfig);
  const rateLimits = readConfig(rateLimitConfig);
  const apiKey = optionToUndefined(config.apiKey);
  const configuredKeys = [...(apiKey ? [{ key: apiKey, projectId: LOCAL_PROJECT_ID }] : []), ...parseConfiguredKeys(config.apiKeys)];
  const catalog = new Map(loadCatalog(common.catalogPath).map((m) => [m.id, m]));

  const nc = await connectNats(common.natsUrl || DEFAULT_NATS_URL, `tributary-gateway-${hostname()}-${process.pid}`, log, "gateway");
  const directory = new RunnerDirectory(nc, timeouts.runnerTimeoutMs);
  directory.start();
  const client = new GenerationClient(nc, directory, {
    gatewayId,
    admissionTimeoutMs: timeouts.admissionTimeoutMs,
    runnerTimeoutMs: timeouts.runnerTimeoutMs,
    prefixRouting: prefixRoutingOption(readConfig(routingConfig), catalog.values()),
  }, log);
  client.start();
  const fileStore = await FileStore.open(nc);
  const batchStore = await BatchStore.open(nc);

  // Accounts: keys from the accounts bucket, cached here and kept current by a watch.
  const store = await AccountStore.open(nc);
  await registerConfiguredKeys(store, configuredKeys);
  const accountDirectory = new AccountDirectory(nc, store.kv, log);
  await accountDirectory.start();
  const lastUsed = new LastUsedRecorder(store, accounts.keyUsageFlushMs, log);
  lastUsed.start();

  let rateLimiter: RateLimiter;
  if (rateLimits.enabled === "off") rateLimiter = new UnlimitedRateLimiter();
  else {
    const budgets = new BudgetClient(nc, { gatewayId, waitMs: rateLimits.waitMs, requestTimeoutMs: 1_000 }, log);
    const cluster = new ClusterRateLimiter(budgets, rateLimits.scope);
    cluster.start();
    rateLimiter = cluster;
  }

  const streamBudget = new PendingBudget(config.maxPendingStreamBytes, config.maxPendingTotalBytes, (bound, heldBytes) =>
    log.warn("slow SSE client dropped", { bound, heldBytes, heldInTotal: streamBudget.used }),
  );
  // Traces and usage: recorded when a request is over, written in the background.
  const traceSettings = readConfig(tracesConfig);
  const usageSettings = readConfig(usageConfig);
  const traceStore = await TraceStore.open(nc, { maxAgeSeconds: traceSettings.retentionSeconds, maxBytes: traceSettings.maxStreamBytes }, log);
  const traceWriter = new TraceWriter(traceStore.js, { maxBuffered: traceSettings.bufferTraces, maxBufferedBytes: 64 * 1024 * 1024, flushMs: traceSettings.flushMs }, log);
  traceWriter.start();
  await UsageStore.openStream(nc);
  const usageStore = await UsageStore.open(nc, usageSettings.minuteRetentionSeconds);
  const usageRecorder = new UsageRecorder(traceStore.js, gatewayId, { flushMs: usageSettings.flushMs, maxRows: 100_000 }, log);
  usageRecorder.start();

  let draining = false;
  let server: GatewayServer | undefined;
  const metrics = new GatewayMetrics({
    inFlight: () => server?.inFlight ?? 0,
    activeStreams: () => HttpExchange.openStreams,
    heldConnections: () => HttpExchange.heldConnections,
    ssePendingBytes: () => streamBudget.used,
    runners: directory,
    models: [...catalog.keys()],
    traces: traceWriter,
    usage: usageRecorder,
  });
  const recorder = new RequestRecorder({ metrics, usage: usageRecorder, traces: traceWriter, models: new Set(catalog.keys()), maxTraceBodyBytes: traceSettings.maxBodyBytes });
  const router = new Router();
  const dashboard = readConfig(dashboardConfig);
  const members = await MemberStore.open(nc, dashboard.sessionTtlSeconds);
  const natsLink = connectionState(nc);
  registerHealthRoutes(router, { natsConnected: natsLink.connected, draining: () => draining, readyRunners: () => directory.readyCount() });
  registerModelRoutes(router, catalog, directory);
  registerInvitationRoutes(router, { store, members, maxBodyBytes: config.maxBodyBytes });
  // Prometheus: no key (scrapers carry none); it names models and counts, never a project or key.
  router.get("/metrics", (ex) => ex.send(200, metrics.registry.render(), METRICS_CONTENT_TYPE), { public: true });
  registerTraceRoutes(router, traceStore);
  registerUsageRoutes(router, { usage: usageStore, accounts: store });
  registerDashboardRoutes(router, {
    accounts: store,
    batches: batchStore,
    files: fileStore,
    models: [...catalog.values()],
    budgets: rateLimits.enabled === "off" ? undefined : await BudgetReader.open(nc),
    rateLimitScope: rateLimits.scope,
    rateLimitWindowMs: rateLimits.windowMs,
    members,
    traces: traceStore,
    usage: usageStore,
    sessionTtlSeconds: dashboard.sessionTtlSeconds,
    signInAttempts: dashboard.signInAttempts,
    secureCookies: dashboard.secureCookies,
    log,
  });
  registerChatRoutes(router, {
    catalog,
    client,
    rateLimiter,
    maxBodyBytes: config.maxBodyBytes,
    requestTimeoutMs: timeouts.requestTimeoutMs,
    streamBudget,
  });
  const responsesSettings = readConfig(responsesConfig);
  const [responses, conversations, prompts, background, events] = await Promise.all([
    ResponseStore.open(nc, responsesSettings.ttlSeconds * 1000),
    ConversationStore.open(nc),
    PromptStore.open(nc),
    BackgroundQueue.open(nc),
    ResponseEventLog.open(nc),
  ]);
  const service = new ResponseService({ catalog, client, responses, conversations, requestTimeoutMs: timeouts.requestTimeoutMs, log });
  const lifecycle = new BackgroundLifecycle({
    nc,
    service,
    events,
    queue: background,
    maxAttempts: responsesSettings.backgroundMaxAttempts,
    requestTimeoutMs: timeouts.requestTimeoutMs,
    log,
  });
  registerResponseRoutes(router, { nc, service, prompts, background: lifecycle, events, rateLimiter, maxBodyBytes: config.maxBodyBytes, streamBudget, log });
  registerConversationRoutes(router, { conversations, maxBodyBytes: config.maxBodyBytes });
  registerPromptRoutes(router, { prompts, catalog, maxBodyBytes: config.maxBodyBytes });

  registerFileRoutes(router, { store: fileStore, maxFileBytes: files.maxFileBytes, maxBatchFileBytes: files.maxBatchFileBytes, maxBodyBytes: config.maxBodyBytes });
  registerBatchRoutes(router, { batches: batchStore, files: fileStore, maxBodyBytes: config.maxBodyBytes });
  const artifactStore = await ArtifactStore.open(nc);
  registerArtifactRoutes(router, { store: artifactStore, limits: readConfig(artifactsConfig) });

  // Hosted apps: deployments handed to the app hosts found by heartbeat, hosted addresses relayed over NATS.
  const appSettings = readConfig(appsConfig);
  const appHosts = new AppHostDirectory(nc, appSettings.hostTimeoutMs);
  appHosts.start();
  let listeningPort = 0;
  const apps = new AppService(nc, await DeploymentStore.open(nc), artifactStore, store, appHosts, {
    appsDomain: appSettings.domain.toLowerCase(),
    publicScheme: appSettings.publicScheme,
    publicPort: () => appSettings.publicPort || listeningPort,
    rpcTimeoutMs: 5_000,
    stopTimeoutMs: 30_000,
  }, log);
  await apps.start();
  const appExchanges = new AppExchangeClient(nc, gatewayId, { hostAlive: (id) => appHosts.alive(id), headTimeoutMs: appSettings.headTimeoutMs }, log);
  appExchanges.start();
  const appRouteDeps = { apps, exchanges: appExchanges, maxBodyBytes: config.maxBodyBytes, maxAppBodyBytes: appSettings.maxBodyBytes, streamBudget };
  registerAppRoutes(router, appRouteDeps);

  // Sandboxes and secrets: records in KV, calls routed to the sandbox hosts found by heartbeat.
  const sandboxSettings = readConfig(sandboxesConfig);
  const secretSettings = readConfig(secretsConfig);
  const sandboxHosts = new SandboxHostDirectory(nc, sandboxSettings.hostTimeoutMs);
  sandboxHosts.start();
  const secretStore = await SecretStore.open(nc, loadKeyRing(secretSettings.masterKey, secretSettings.previousKeys, common.home));
  const sandboxService = new SandboxService(await SandboxStore.open(nc), sandboxHosts, new SandboxHostClient(nc), {
    maxPerProject: sandboxSettings.maxPerProject,
    execOutputBytes: sandboxSettings.execOutputBytes,
    streamOutputBytes: sandboxSettings.streamOutputBytes,
  }, log);
  registerSandboxRoutes(router, {
    sandboxes: sandboxService,
    maxBodyBytes: config.maxBodyBytes,
    maxFileBytes: sandboxSettings.maxFileBytes,
    maxCpuMhz: sandboxSettings.maxCpuMhz,
    maxMemoryMb: sandboxSettings.maxMemoryMb,
    maxDiskMb: sandboxSettings.maxDiskMb,
    streamBudget,
  });
  registerJobRoutes(router, {
    offersEgress: () => sandboxHosts.offersEgress(),
    nc,
    jobs: await JobStore.open(nc),
    files: fileStore,
    maxBodyBytes: config.maxBodyBytes,
    maxCpuMhz: sandboxSettings.maxCpuMhz,
    maxMemoryMb: sandboxSettings.maxMemoryMb,
    maxDiskMb: sandboxSettings.maxDiskMb,
    maxPerProject: sandboxSettings.maxJobsPerProject,
    streamBudget,
  });
  registerSecretRoutes(router, { secrets: secretStore, maxPerProject: secretSettings.maxPerProject, maxValueBytes: secretSettings.maxValueBytes, maxBodyBytes: config.maxBodyBytes });

  const authenticator = new AccountAuthenticator(accountDirectory, lastUsed);
  server = new GatewayServer(router, authenticator, {
    maxHeaderBytes: config.maxHeaderBytes,
    maxHeaders: config.maxHeaders,
    bodyTimeoutMs: config.bodyTimeoutMs,
    // A body just over the limit (the honest mistake) is still taken, so its 413 arrives whole.
    drainBodyBytes: config.maxBodyBytes + 1024 * 1024,
    maxHeldConnections: config.maxHeldConnections,
    maxConnections: config.maxConnections,
    maxConnectionsPerAddress: config.maxConnectionsPerAddress,
  }, log);
  server.onFinished = (ex) => recorder.finished(ex);
  server.hostedApps = hostedAppsHandler(appRouteDeps);
  server.webSockets((app) => registerShellRoute(app, { sandboxes: sandboxService, authenticator, log }));
  const port = await server.listen(config.host, config.port);
  listeningPort = port;
  keepServingOnUncaughtErrors(log);
  log.info("gateway listening", { host: config.host, port, models: [...catalog.keys()], rateLimits: rateLimits.enabled === "on" ? rateLimits.scope : "off" });

  onShutdown(
    log,
    async () => {
      draining = true;
      const drained = await server.close(timeouts.drainTimeoutMs);
      if (!drained) {
        log.warn("drain timeout: ending open streams", { inFlight: server!.inFlight });
        client.failAll(new ShuttingDown());
        await new Promise((r) => setTimeout(r, 100));
        server!.closeAll();
      }
      client.stop();
      directory.stop();
      await traceWriter.stop();
      await usageRecorder.stop();
      sandboxHosts.stop();
      appExchanges.stop();
      appHosts.stop();
      apps.stop();
      await rateLimiter.stop();
      await lastUsed.stop();
      accountDirectory.stop();
      await nc.drain().catch(() => {});
    },
    () => ({ inFlight: server.inFlight }),
  );
}

exitIfStartFails(log, "gateway", main());
