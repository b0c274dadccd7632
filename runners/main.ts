// The runner process: one runner actor per model it serves, under a supervisor.
//   node dist/runners/main.js            (TRIBUTARY_RUNNER_MODELS picks the models; default: all)
import { hostname } from "node:os";
import { loadCatalog } from "../modules/catalog/mod.js";
import { commonConfig, optionToUndefined, readConfig, runnerConfig, timeoutsConfig } from "../lib/config.js";
import { createLogger } from "../lib/log.js";
import { connectNats, DEFAULT_NATS_URL } from "../lib/nats/connection.js";
import { endWithParent, exitIfStartFails, onShutdown } from "../lib/process/lifecycle.js";
import { Supervisor } from "../modules/actor-runtime/mod.js";
import { createEngine, defaultModelCache } from "./engines/create-engine.js";
import { startHealthServer } from "./health-server.js";
import { RunnerActor } from "./runner-actor.js";

const log = createLogger("runner", { pid: process.pid });

async function main(): Promise<void> {
  const common = readConfig(commonConfig);
  const config = readConfig(runnerConfig);
  const timeouts = readConfig(timeoutsConfig);
  const catalog = loadCatalog(common.catalogPath);
  const wanted = config.models ? new Set(config.models.split(",").map((s) => s.trim()).filter(Boolean)) : undefined;
  if (wanted) for (const id of wanted) if (!catalog.some((m) => m.id === id)) throw new Error(`TRIBUTARY_RUNNER_MODELS names ${id}, which is not in ${common.catalogPath}`);
  const models = catalog.filter((m) => (wanted ? wanted.has(m.id) : m.replicas > 0));
  if (models.length === 0) throw new Error("this runner has no model to serve");

  const nc = await connectNats(common.natsUrl || DEFAULT_NATS_URL, `tributary-runner-${hostname()}-${process.pid}`, log, "runner");
  const supervisor = new Supervisor(nc, log);
  const engineEnv = {
    modelCache: optionToUndefined(config.modelCache) ?? defaultModelCache(common.home),
    hfToken: optionToUndefined(config.hfToken),
    hfEndpoint: optionToUndefined(config.hfEndpoint),
    decodeLingerMaxMs: config.decodeLingerMaxMs,
    libuvPoolSize: optionToUndefined(config.libuvPoolSize),
    tuneDecodeThreads: config.decodeThreadsTune === "on",
    flashAttention: config.flashAttention,
    log,
  };
  for (const spec of models)
    await supervisor.spawn(() => {
      // The engine reports its download's progress to the actor, which puts it in its heartbeats.
      let actor: RunnerActor | undefined;
      const engine = createEngine(spec, { ...engineEnv, onLoadProgress: (detail) => actor?.setLoadProgress(detail) });
      actor = new RunnerActor(spec, engine, { heartbeatMs: config.heartbeatMs, drainTimeoutMs: timeouts.drainTimeoutMs });
      return actor;
    });
  if (config.healthPort > 0) {
    await startHealthServer(config.healthPort, config.healthHost, () => supervisor.actors.map((a) => (a as RunnerActor).status()));
    log.info("health server listening", { port: config.healthPort });
  }

  onShutdown(log, async () => {
    await supervisor.stopAll();
    await nc.drain().catch(() => {});
  });
}

endWithParent(log);
exitIfStartFails(log, "runner", main());
