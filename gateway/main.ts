// The gateway process: HTTP/SSE at the edge, protobuf over NATS behind it.
//   node dist/gateway/main.js
import { hostname } from "node:os";
import { loadCatalog } from "../lib/catalog/load.js";
import { commonConfig, gatewayConfig, optionToUndefined, readConfig, responsesConfig } from "../lib/config.js";
import { randomToken } from "../lib/ids.js";
import { createLogger } from "../lib/log.js";
import { connectNats, DEFAULT_NATS_URL } from "../lib/nats/connection.js";
import { GatewayServer } from "./app.js";
import { LOCAL_PRINCIPAL, parseExtraKeys, StaticKeyAuthenticator } from "./auth/authenticator.js";
import { ApiError } from "./http/api-error.js";
import { Router } from "./http/router.js";
import { GenerationClient } from "./inference/generation-client.js";
import { RunnerDirectory } from "./inference/runner-directory.js";
import { BackgroundQueue } from "./responses/background-queue.js";
import { ConversationStore } from "./responses/conversation-store.js";
import { PromptStore } from "./responses/prompt-store.js";
import { ResponseEventLog } from "./responses/response-event-log.js";
import { ResponseService } from "./responses/response-service.js";
import { ResponseStore } from "./responses/response-store.js";
import { registerChatRoutes } from "./routes/chat-completions.js";
import { registerConversationRoutes } from "./routes/conversations.js";
import { registerPromptRoutes } from "./routes/prompts.js";
import { registerResponseRoutes } from "./routes/responses.js";
import { registerHealthRoutes } from "./routes/health.js";
import { registerModelRoutes } from "./routes/models.js";

const gatewayId = `g${randomToken(10)}`;
const log = createLogger("gateway", { pid: process.pid, gatewayId });

async function main(): Promise<void> {
  const common = readConfig(commonConfig);
  const config = readConfig(gatewayConfig);
  const apiKey = optionToUndefined(config.apiKey);
  if (!apiKey) throw new Error("TRIBUTARY_API_KEY is not set: the gateway needs a key to accept");
  const catalog = new Map(loadCatalog(common.catalogPath).map((m) => [m.id, m]));

  const nc = await connectNats(common.natsUrl || DEFAULT_NATS_URL, `tributary-gateway-${hostname()}-${process.pid}`, log);
  const directory = new RunnerDirectory(nc, Math.max(config.runnerTimeoutMs * 4, 10_000));
  directory.start();
  const client = new GenerationClient(nc, directory, {
    gatewayId,
    admissionTimeoutMs: config.admissionTimeoutMs,
    runnerTimeoutMs: config.runnerTimeoutMs,
  }, log);
  client.start();

  let draining = false;
  const router = new Router();
  registerHealthRoutes(router, nc, () => draining);
  registerModelRoutes(router, catalog);
  registerChatRoutes(router, {
    catalog,
    client,
    maxBodyBytes: config.maxBodyBytes,
    requestTimeoutMs: config.requestTimeoutMs,
    maxPendingStreamBytes: config.maxPendingStreamBytes,
  });
  const responsesSettings = readConfig(responsesConfig);
  const [responses, conversations, prompts, background, events] = await Promise.all([
    ResponseStore.open(nc, responsesSettings.ttlSeconds * 1000),
    ConversationStore.open(nc),
    PromptStore.open(nc),
    BackgroundQueue.open(nc),
    ResponseEventLog.open(nc),
  ]);
  const service = new ResponseService({ catalog, client, responses, conversations, requestTimeoutMs: config.requestTimeoutMs, log });
  registerResponseRoutes(router, { nc, service, prompts, background, events, maxBodyBytes: config.maxBodyBytes, maxPendingStreamBytes: config.maxPendingStreamBytes, log });
  registerConversationRoutes(router, { conversations, maxBodyBytes: config.maxBodyBytes });
  registerPromptRoutes(router, { prompts, catalog, maxBodyBytes: config.maxBodyBytes });

  const server = new GatewayServer(router, new StaticKeyAuthenticator(apiKey, LOCAL_PRINCIPAL, parseExtraKeys(config.apiKeys)), log);
  const port = await server.listen(config.host, config.port);
  log.info("gateway listening", { host: config.host, port, models: [...catalog.keys()] });

  const shutdown = async (signal: string) => {
    if (draining) return;
    draining = true;
    log.info("draining", { signal, inFlight: server.inFlight });
    const drained = await server.close(config.drainTimeoutMs);
    if (!drained) {
      log.warn("drain timeout: ending open streams", { inFlight: server.inFlight });
      client.failAll(new ApiError(503, "The server is shutting down; the request was interrupted.", "server_error", "server_shutdown"));
      await new Promise((r) => setTimeout(r, 100));
      server.closeAll();
    }
    client.stop();
    directory.stop();
    await nc.drain().catch(() => {});
    log.info("stopped");
    process.exit(0);
  };
  process.on("SIGTERM", () => void shutdown("SIGTERM"));
  process.on("SIGINT", () => void shutdown("SIGINT"));
}

main().catch((err: unknown) => {
  log.error("gateway failed to start", { err });
  process.exit(1);
});
