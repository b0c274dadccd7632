// The gateway process: HTTP/SSE at the edge, protobuf over NATS behind it.
//   node dist/gateway/main.js
import { hostname } from "node:os";
import { loadCatalog } from "../lib/catalog/load.js";
import { commonConfig, filesConfig, gatewayConfig, optionToUndefined, readConfig } from "../lib/config.js";
import { FileStore } from "../lib/files/file-store.js";
import { randomToken } from "../lib/ids.js";
import { createLogger } from "../lib/log.js";
import { connectNats, DEFAULT_NATS_URL } from "../lib/nats/connection.js";
import { GatewayServer } from "./app.js";
import { LOCAL_PRINCIPAL, parseExtraKeys, StaticKeyAuthenticator } from "./auth/authenticator.js";
import { ApiError } from "./http/api-error.js";
import { Router } from "./http/router.js";
import { GenerationClient } from "./inference/generation-client.js";
import { RunnerDirectory } from "./inference/runner-directory.js";
import { BatchStore } from "../lib/batches/batch-store.js";
import { registerBatchRoutes } from "./routes/batches.js";
import { registerChatRoutes } from "./routes/chat-completions.js";
import { registerFileRoutes } from "./routes/files.js";
import { registerHealthRoutes } from "./routes/health.js";
import { registerModelRoutes } from "./routes/models.js";

const gatewayId = `g${randomToken(10)}`;
const log = createLogger("gateway", { pid: process.pid, gatewayId });

async function main(): Promise<void> {
  const common = readConfig(commonConfig);
  const config = readConfig(gatewayConfig);
  const files = readConfig(filesConfig);
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
  const fileStore = await FileStore.open(nc);
  const batchStore = await BatchStore.open(nc);

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

  registerFileRoutes(router, { store: fileStore, maxFileBytes: files.maxFileBytes, maxBatchFileBytes: files.maxBatchFileBytes, maxBodyBytes: config.maxBodyBytes });
  registerBatchRoutes(router, { batches: batchStore, files: fileStore, maxBodyBytes: config.maxBodyBytes });

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
