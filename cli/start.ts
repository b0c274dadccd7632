import { mkdirSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import * as Effect from "effect/Effect";
import { defaultModelCache, loadCatalog, singleModelCatalog } from "../modules/catalog/mod.js";
import type { ModelSpec } from "../modules/catalog/mod.js";
import { accountsConfig, commonConfig, gatewayConfig, metricsConfig, optionToUndefined, readConfig, runnerConfig, startConfig, timeoutsConfig } from "../lib/config.js";
import { allowedCpus, formatCpuList, onCpus, planCpus, taskset, type CpuPlan } from "../lib/process/cpu-affinity.js";
import { createLogger, logStyle, setLogWriter, type LogRecord } from "../lib/log.js";
import { localOrigin } from "../lib/local-origin.js";
import { supervise, type ChildSpec } from "./child-process.js";
import { embeddedIdentities, embeddedNats } from "./embedded-nats.js";
import type { NatsIdentity } from "../lib/nats/permissions.js";
import { forgetGatewayUrl, localApiKey, recordGatewayUrl } from "./local-stack.js";
import type { StartOptions } from "./start-options.js";
import { decodeThreadEnv, machineFacts, modelFacts, pickLayout } from "../modules/runner-layout/mod.js";
import { listeningPort, StartupReport } from "./startup-report.js";
import { localSignInPath, StartSignInLink } from "./sign-in-link.js";
import { resolveAdminToken } from "../modules/admin-api/mod.js";
import { stackPortOf, takenPort, type StackPort } from "./stale-ports.js";
import { terminal } from "./terminal.js";

const log = createLogger("supervisor", { pid: process.pid });
const entry = (path: string) => fileURLToPath(new URL(path, import.meta.url));

/** CPUs a runner of `model` decodes on: its threads for a CPU llama model, none for GPU and sim models. */
const cpuDemand = (model: ModelSpec) => (model.engine === "llama" && model.gpuLayers === 0 ? model.threads : 0);
const runnerName = (model: ModelSpec, replica: number) => `runner ${model.id}#${replica}`;

/** Decides CPU placement for the runners of `catalog` and logs it (or why there is none). */
function placeProcesses(catalog: readonly ModelSpec[], setting: string): CpuPlan | undefined {
  const demands = catalog.flatMap((m) => Array.from({ length: m.replicas }, (_, r) => ({ name: runnerName(m, r), cpus: cpuDemand(m) })));
  const result = planCpus(setting, allowedCpus(), demands);
  if (!result.plan) {
    log.info("processes are not pinned to CPUs", { reason: result.reason });
    return undefined;
  }
  if (!taskset()) {
    log.warn("processes are not pinned to CPUs: taskset (util-linux) is not installed");
    return undefined;
  }
  const runners = Object.fromEntries([...result.plan.runners].map(([name, cpus]) => [name, formatCpuList(cpus)]));
  log.info("processes pinned to CPUs", { runners, others: formatCpuList(result.plan.services) });
  return result.plan;
}

/**
 * Runners per model and threads per runner (modules/runner-layout): the catalog's own values
 * where it sets them, the rule's elsewhere. Logs the layout and why.
 */
async function layOutRunners(catalog: readonly ModelSpec[], modelCache: string): Promise<ModelSpec[]> {
  const machine = machineFacts(allowedCpus().length);
  const layouts = pickLayout(machine, await Promise.all(catalog.map((m) => modelFacts(m, modelCache))));
  log.info("runner layout", {
    cpus: machine.cpus,
    memoryGiB: Math.round(machine.memoryBytes / 2 ** 30),
    library: machine.library,
    models: Object.fromEntries(layouts.map((l) => [l.id, { runners: l.runners, threads: l.threads, class: l.class, why: l.why }])),
  });
  return catalog.map((m, i) => ({ ...m, replicas: layouts[i]!.runners, threads: layouts[i]!.threads }));
}

/** A port free on `host` now: the kernel's pick for a socket bound to port 0, released. */
function freePort(host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, host, () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

/**
 * `tributary start`: the whole stack on one machine. An embedded nats-server (unless NATS_URL
 * names one), the platform actor host, the runner processes of every catalog model, and the
 * gateway, each restarted when it dies. On SIGINT/SIGTERM the scope closes in reverse: the
 * gateway drains its streams first, then the runners, the actor host, then nats-server.
 * `options` are its flags: settings over the environment's, and --model's one-model catalog.
 */
export function startStack(options: StartOptions = { env: {} }) {
  return Effect.gen(function* () {
    setLogWriter((text) => terminal.log(text));
    const environment: Record<string, string | undefined> = { ...process.env, ...options.env };
    const common = readConfig(commonConfig, environment);
    // The processes read the catalog from a file: --model's is written into TRIBUTARY_HOME.
    const catalogPath = options.model ? join(common.home, "model-catalog.yaml") : common.catalogPath;
    if (options.model) {
      const text = yield* Effect.promise(() => singleModelCatalog(options.model!));
      mkdirSync(common.home, { recursive: true });
      writeFileSync(catalogPath, text);
    }
    // Port 0 (any free one) is picked here, once: the sandbox host's apps reach the gateway at an
    // address fixed before it listens, and a restarted gateway keeps its address.
    const configured = readConfig(gatewayConfig, environment);
    if (configured.port === 0) environment.TRIBUTARY_PORT = String(yield* Effect.promise(() => freePort(configured.host)));
    const gateway = readConfig(gatewayConfig, environment);
    const accounts = readConfig(accountsConfig, environment);
    const modelCache = optionToUndefined(readConfig(runnerConfig, environment).modelCache) ?? defaultModelCache(common.home);
    const start = readConfig(startConfig, environment);
    // Every port the stack listens on must be free before anything starts (stale-ports.ts).
    const metrics = readConfig(metricsConfig, environment);
    const adminPort = accounts.adminAddr === "off" ? undefined : stackPortOf(accounts.adminAddr, "TRIBUTARY_ADMIN_ADDR");
    const ports: StackPort[] = [
      ...(common.natsUrl ? [] : [{ host: "127.0.0.1", port: start.natsPort, setting: "TRIBUTARY_NATS_PORT" }]),
      { host: gateway.host, port: gateway.port, setting: "TRIBUTARY_PORT" },
      ...(adminPort ? [adminPort] : []),
      { host: metrics.actorsHost, port: metrics.actorsPort, setting: "TRIBUTARY_ACTORS_METRICS_PORT" },
    ];
    const taken = yield* Effect.promise(() => takenPort(ports));
    if (taken) return yield* Effect.fail(new Error(taken));
    const catalog = yield* Effect.promise(() => layOutRunners(loadCatalog(catalogPath), modelCache));
    const placement = placeProcesses(catalog, start.runnerCpus);
    const services = placement?.services;
    const apiKey = optionToUndefined(gateway.apiKey) ?? localApiKey(common.home);
    // The embedded server admits only its identities, each process its own; with NATS_URL the
    // credentials are the environment's (TRIBUTARY_NATS_*), passed through to every process.
    const identities = common.natsUrl ? undefined : embeddedIdentities(common.home);
    const natsUrl = common.natsUrl || (yield* embeddedNats({ home: common.home, port: start.natsPort, log, cpus: services, authorization: identities!.authorization }));
    // TRIBUTARY_PARENT_PIPE: each Node child ends with this supervisor (child-process.ts). The
    // processes write JSON lines to their pipes, at info at least: the start report reads them
    // whatever the terminal shows (the supervisor filters them by TRIBUTARY_LOG_LEVEL).
    const base = {
      ...environment,
      NATS_URL: natsUrl, TRIBUTARY_API_KEY: apiKey, TRIBUTARY_HOME: common.home, TRIBUTARY_CATALOG: catalogPath, TRIBUTARY_PARENT_PIPE: "stdin",
      TRIBUTARY_LOG_FORMAT: "json", TRIBUTARY_LOG_LEVEL: logStyle.level === "debug" ? "debug" : "info",
    };
    const envOf = (identity: NatsIdentity) => ({ ...base, ...identities?.env(identity) });
    const env = envOf("actors");
    const stopTimeoutMs = readConfig(timeoutsConfig, environment).drainTimeoutMs + 5_000;
    const userDecodeEnv = { waitPolicy: optionToUndefined(start.openMpWaitPolicy), spinCount: optionToUndefined(start.openMpSpinCount), libuvPoolSize: optionToUndefined(start.libuvPoolSize) };

    const children: ChildSpec[] = [
      { name: "actor host", ...onCpus(process.execPath, [entry("../actors/main.js")], services), env, stopTimeoutMs },
    ];
    for (const model of catalog)
      for (let r = 0; r < model.replicas; r++)
        children.push({
          name: runnerName(model, r),
          ...onCpus(process.execPath, [entry("../runners/main.js")], placement?.runners.get(runnerName(model, r)) ?? services),
          // The runner reads its model's threads from the catalog; the rule's choice reaches it as
          // an override (the process serves this one model only).
          // One libuv pool thread, and for threads > 1 a short OpenMP spin
          // (modules/runner-layout/decode-env.ts), set before the runner starts.
          env: {
            ...envOf("runner"),
            ...decodeThreadEnv(model.threads, cpuDemand(model) > 0, userDecodeEnv),
            TRIBUTARY_RUNNER_MODELS: model.id,
            ...(model.setInCatalog.threads ? {} : { TRIBUTARY_THREADS: String(model.threads) }),
          },
          stopTimeoutMs,
        });
    // One sandbox host (bubblewrap); it exits at once with a clear error where namespaces are unavailable.
    if (start.sandboxHost === "on") {
      // Its app instances reach the platform through this stack's gateway (unless configured otherwise).
      const platform = { TRIBUTARY_APP_PLATFORM_URL: localOrigin(gateway.host, gateway.port) };
      children.push({ name: "sandbox host", ...onCpus(process.execPath, [entry("../sandbox-host/main.js")], services), env: { ...platform, ...envOf("sandbox-host") }, stopTimeoutMs });
    }
    // The dashboard one click away: the local owner's sign-in link, fresh for each gateway that starts.
    const signInLink = new StartSignInLink({
      makePath: localSignInPath({ adminAddr: accounts.adminAddr, adminToken: () => resolveAdminToken(optionToUndefined(accounts.adminToken), common.home, false), log }),
      origin: (port) => localOrigin(gateway.host, port),
    });
    const catalogFile = relative(process.cwd(), catalogPath);
    const report = new StartupReport({
      models: catalog.filter((m) => m.replicas > 0).map((m) => m.id),
      url: (port) => `${localOrigin(gateway.host, port)}/v1`,
      apiKey,
      footer: (port) => [
        signInLink.footerLine() ?? `Dashboard: ${localOrigin(gateway.host, port)}/dashboard`,
        `Models: ${catalog.map((m) => m.id).join(", ")}. Ctrl-C drains and stops everything.`,
        ...(accounts.adminAddr === "off" ? [] : [`Accounts and keys: tributary admin --help (admin service on ${accounts.adminAddr}).`]),
      ],
      catalogPath: catalogFile.startsWith("..") ? catalogPath : catalogFile,
      print: (text) => terminal.print(text),
      status: terminal.drawsInPlace ? (lines) => terminal.status(lines) : undefined,
    });
    for (const child of children) {
      const model = catalog.find((m) => child.name.startsWith(`runner ${m.id}#`));
      if (model) {
        child.onLine = (_line, record) => void (record && report.fromRunner(model.id, record));
        child.shownByCaller = (record) => StartupReport.shows(record);
      }
    }
    // Where the gateway listens (its port is known once it does) goes into TRIBUTARY_HOME for the
    // client commands, and is removed when the stack stops.
    yield* Effect.addFinalizer(() => Effect.sync(() => forgetGatewayUrl(common.home)));
    children.push({
      name: "gateway",
      ...onCpus(process.execPath, [entry("../gateway/main.js")], services),
      env: envOf("gateway"),
      stopTimeoutMs,
      onLine: (_line, record) => {
        if (!record) return;
        const port = listeningPort(record);
        if (port !== undefined) recordGatewayUrl(common.home, localOrigin(gateway.host, port));
        signInLink.fromGateway(record, (held) => report.fromGateway(held));
      },
    });
    // Forked in order: the scope stops them in reverse (gateway first).
    for (const child of children) yield* Effect.forkScoped(supervise(child, log));
    return yield* Effect.never;
  });
}
