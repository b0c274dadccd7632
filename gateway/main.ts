// The gateway process: HTTP/SSE at the edge, protobuf over NATS behind it.
//   node dist/gateway/main.js
import { hostname } from "node:os";
import { commonConfig, readConfig } from "../lib/config.js";
import { randomToken } from "../lib/ids.js";
import { createLogger } from "../lib/log.js";
import { connectNats, DEFAULT_NATS_URL } from "../lib/nats/connection.js";
import { endWithParent, exitIfStartFails, onShutdown } from "../lib/process/lifecycle.js";
import { startGatewayServer } from "./gateway.js";
import { keepServingOnUncaughtErrors } from "./last-resort.js";

const gatewayId = `g${randomToken(10)}`;
const log = createLogger("gateway", { pid: process.pid, gatewayId });

async function main(): Promise<void> {
  const common = readConfig(commonConfig);
  const nc = await connectNats(common.natsUrl || DEFAULT_NATS_URL, `tributary-gateway-${hostname()}-${process.pid}`, log, "gateway");
  const gateway = await startGatewayServer(nc, { gatewayId, log, env: process.env });
  keepServingOnUncaughtErrors(log);
  log.info("gateway listening", { host: gateway.host, port: gateway.port, models: gateway.models, rateLimits: gateway.rateLimits });
  onShutdown(
    log,
    async () => {
      await gateway.drain();
      await nc.drain().catch(() => {});
    },
    () => ({ inFlight: gateway.inFlight() }),
  );
}

endWithParent(log);
exitIfStartFails(log, "gateway", main());
