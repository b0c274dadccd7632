// The platform actor host: the process where the platform's actors live (rate-limit budgets,
// batch coordinator, response store, ...). Several hosts may run at once: actors that must
// have one owner at a time coordinate through JetStream, the rest share work through NATS
// queue groups and JetStream consumers.
//   node dist/actors/main.js
import { hostname } from "node:os";
import { loadCatalog } from "../modules/catalog/mod.js";
import { commonConfig, readConfig } from "../lib/config.js";
import { createLogger } from "../lib/log.js";
import { connectNats, DEFAULT_NATS_URL } from "../lib/nats/connection.js";
import { exitIfStartFails, onShutdown } from "../lib/process/lifecycle.js";
import { platformActors } from "./registry.js";
import { Supervisor } from "../modules/actor-runtime/mod.js";

const log = createLogger("actors", { pid: process.pid });

async function main(): Promise<void> {
  const common = readConfig(commonConfig);
  const catalog = loadCatalog(common.catalogPath);
  const nc = await connectNats(common.natsUrl || DEFAULT_NATS_URL, `tributary-actors-${hostname()}-${process.pid}`, log, "actors");
  const supervisor = new Supervisor(nc, log);
  const factories = platformActors({ catalog, home: common.home });
  for (const make of factories) await supervisor.spawn(make);
  log.info("actor host ready", { actors: supervisor.actors.map((a) => a.name) });

  onShutdown(log, async () => {
    await supervisor.stopAll();
    await nc.drain().catch(() => {});
  });
}

exitIfStartFails(log, "actor host", main());
