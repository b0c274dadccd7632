// The platform actor host: the process where the platform's actors live (rate-limit budgets,
// batch coordinator, response store, ...). Several hosts may run at once: actors that must
// have one owner at a time coordinate through JetStream, the rest share work through NATS
// queue groups and JetStream consumers.
//   node dist/actors/main.js
import { hostname } from "node:os";
import { loadCatalog } from "../modules/catalog/mod.js";
import type { AddressInfo } from "node:net";
import { commonConfig, metricsConfig, readConfig, tracesConfig, usageConfig } from "../lib/config.js";
import { MetricsRegistry, serveMetrics } from "../lib/metrics.js";
import { randomToken } from "../lib/ids.js";
import { TraceStore, TraceWriter } from "../modules/traces/mod.js";
import { UsageRecorder, UsageStore } from "../modules/usage/mod.js";
import { BatchLineObserver } from "./observability/batch-line-observer.js";
import { createLogger } from "../lib/log.js";
import { connectionState, connectNats, DEFAULT_NATS_URL } from "../lib/nats/connection.js";
import { endWithParent, exitIfStartFails, onShutdown } from "../lib/process/lifecycle.js";
import { platformActors } from "./registry.js";
import { Supervisor } from "../modules/actor-runtime/mod.js";

const hostId = `a${randomToken(10)}`;
const log = createLogger("actors", { pid: process.pid, hostId });

async function main(): Promise<void> {
  const common = readConfig(commonConfig);
  const catalog = loadCatalog(common.catalogPath);
  // Probes and metrics first: liveness answers while NATS is still out of reach; readiness once
  // every actor has started, while NATS is connected and the host is not stopping.
  const metrics = new MetricsRegistry();
  const probe = { natsConnected: () => false, actorsStarted: false, stopping: false };
  const metricsSettings = readConfig(metricsConfig);
  const metricsServer = metricsSettings.actorsPort > 0
    ? await serveMetrics(metrics, metricsSettings.actorsPort, metricsSettings.actorsHost, () => {
      const nats = probe.natsConnected();
      return { ready: nats && probe.actorsStarted && !probe.stopping, detail: { nats: nats ? "connected" : "disconnected", actors_started: probe.actorsStarted, draining: probe.stopping } };
    })
    : undefined;
  const nc = await connectNats(common.natsUrl || DEFAULT_NATS_URL, `tributary-actors-${hostname()}-${process.pid}`, log, "actors");
  probe.natsConnected = connectionState(nc).connected;
  const supervisor = new Supervisor(nc, log);
  // Metrics, usage rows and traces of what runs here (batch lines), written in the background.
  const traceSettings = readConfig(tracesConfig);
  const traceStore = await TraceStore.open(nc, { maxAgeSeconds: traceSettings.retentionSeconds, maxBytes: traceSettings.maxStreamBytes }, log);
  const traces = new TraceWriter(traceStore.js, { maxBuffered: traceSettings.bufferTraces, maxBufferedBytes: 64 * 1024 * 1024, flushMs: traceSettings.flushMs }, log);
  traces.start();
  await UsageStore.openStream(nc);
  const usage = new UsageRecorder(traceStore.js, hostId, { flushMs: readConfig(usageConfig).flushMs, maxRows: 100_000 }, log);
  usage.start();
  metrics.collected("tributary_traces_dropped_total", "traces dropped: the writer's buffer was full or the trace stream refused them", "counter", [], () => [{ labels: {}, value: traces.dropped }]);
  metrics.collected("tributary_traces_written_total", "traces stored in the trace stream", "counter", [], () => [{ labels: {}, value: traces.written }]);
  const lineObserver = new BatchLineObserver({ usage, traces, metrics, maxTraceBodyBytes: traceSettings.maxBodyBytes });
  const factories = platformActors({ catalog, home: common.home, metrics, lineObserver, usage, traces: { writer: traces, maxBodyBytes: traceSettings.maxBodyBytes } });
  for (const make of factories) await supervisor.spawn(make);
  probe.actorsStarted = true;
  log.info("actor host ready", { actors: supervisor.actors.map((a) => a.name), metricsPort: metricsServer ? (metricsServer.address() as AddressInfo).port : undefined });

  onShutdown(log, async () => {
    probe.stopping = true;
    await supervisor.stopAll();
    await traces.stop();
    await usage.stop();
    metricsServer?.close();
    await nc.drain().catch(() => {});
  });
}

endWithParent(log);
exitIfStartFails(log, "actor host", main());
