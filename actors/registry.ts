import type { ModelSpec } from "../modules/catalog/mod.js";
import { resolveAdminToken } from "../modules/admin-api/mod.js";
import { accountsConfig, appScalingConfig, appsConfig, artifactsConfig, filesConfig, sandboxesConfig, optionToUndefined, rateLimitConfig, readConfig, responsesConfig, routingConfig, timeoutsConfig } from "../lib/config.js";
import { AdminServiceActor } from "./admin/admin-service.js";
import { BatchCoordinator } from "./batches/batch-coordinator.js";
import { BatchWorker } from "./batches/batch-worker.js";
import { fileSweeper } from "./files/file-sweeper.js";
import { artifactSweeper } from "./artifacts/artifact-sweeper.js";
import { SandboxSweeperActor } from "./sandboxes/sandbox-sweeper.js";
import { DeploymentReconcilerActor } from "./apps/deployment-reconciler.js";
import { JobWorker } from "./jobs/job-worker.js";
import { BudgetHostActor, budgetHostOptions } from "./ratelimit/budget-host.js";
import { BackgroundResponseWorker } from "./responses/background-worker.js";
import type { Actor } from "../modules/actor-runtime/mod.js";
import type { MetricsRegistry } from "../lib/metrics.js";
import { usageConfig } from "../lib/config.js";
import { UsageFolder } from "./usage/usage-folder.js";
import type { LineObserver } from "./batches/batch-worker.js";
import type { UsageRecorder } from "../modules/usage/mod.js";
import type { TraceWriter } from "../modules/traces/mod.js";

export interface PlatformContext {
  catalog: readonly ModelSpec[];
  home: string;
  /** The host's Prometheus metrics, usage rollups and trace writer (batch lines count there). */
  metrics: MetricsRegistry;
  lineObserver: LineObserver;
  usage: UsageRecorder;
  traces: { writer: TraceWriter; maxBodyBytes: number };
}

/**
 * The actors an actor host runs, as factories (the supervisor makes a fresh instance on each
 * restart). Each platform feature adds its actors here.
 */
export function platformActors(ctx: PlatformContext): Array<() => Actor> {
  return [...accountActors(ctx), ...fileAndBatchActors(ctx), ...responseActors(ctx), ...usageActors(ctx), ...sandboxActors()];
}

/** Usage: folds the per-minute rows every process publishes into minute, hour and day buckets. */
function usageActors(ctx: PlatformContext): Array<() => Actor> {
  const usage = readConfig(usageConfig);
  const folded = ctx.metrics.counter("tributary_usage_rows_folded_total", "usage rollup rows added into the usage buckets");
  return [() => new UsageFolder({ minuteRetentionSeconds: usage.minuteRetentionSeconds, folded })];
}

/** Sandboxes: the sweeper of lost hosts and missed deadlines; jobs; hosted apps' reconciler. */
function sandboxActors(): Array<() => Actor> {
  const sandboxes = readConfig(sandboxesConfig);
  const scaling = readConfig(appScalingConfig);
  const reconciler = { hostTimeoutMs: readConfig(appsConfig).hostTimeoutMs, scaleDownDelayMs: scaling.scaleDownDelayMs, rpcTimeoutMs: 5_000, refusalBackoffMs: 5_000 };
  return [
    () => new SandboxSweeperActor(sandboxes.sweepMs, sandboxes.hostTimeoutMs),
    () => new DeploymentReconcilerActor(scaling.reconcileMs, reconciler),
    () =>
      new JobWorker({
        concurrency: sandboxes.jobConcurrency,
        ackWaitMs: sandboxes.jobAckWaitMs,
        hostTimeoutMs: sandboxes.hostTimeoutMs,
        maxPerProject: sandboxes.maxPerProject,
        streamOutputBytes: sandboxes.streamOutputBytes,
        maxFileBytes: sandboxes.maxFileBytes,
      }),
  ];
}

/** Background responses (POST /v1/responses with background: true). */
function responseActors(ctx: PlatformContext): Array<() => Actor> {
  const responses = readConfig(responsesConfig);
  const timeouts = readConfig(timeoutsConfig);
  return [
    () =>
      new BackgroundResponseWorker({
        catalog: ctx.catalog,
        ttlSeconds: responses.ttlSeconds,
        concurrency: responses.backgroundConcurrency,
        ackWaitMs: responses.backgroundAckWaitMs,
        maxAttempts: responses.backgroundMaxAttempts,
        requestTimeoutMs: timeouts.requestTimeoutMs,
        admissionTimeoutMs: timeouts.admissionTimeoutMs,
        runnerTimeoutMs: timeouts.runnerTimeoutMs,
        routing: readConfig(routingConfig),
        drainTimeoutMs: timeouts.drainTimeoutMs,
        usage: ctx.usage,
        traces: ctx.traces,
      }),
  ];
}

/** Rate-limit budgets and the admin gRPC service. */
function accountActors(ctx: PlatformContext): Array<() => Actor> {
  const actors: Array<() => Actor> = [];
  // Rate-limit budgets: every host can own some; ownership moves when a host dies.
  const rateLimits = readConfig(rateLimitConfig);
  actors.push(() => new BudgetHostActor(budgetHostOptions(rateLimits.windowMs)));
  // The admin gRPC service (accounts, keys, invitations), unless TRIBUTARY_ADMIN_ADDR=off.
  const accounts = readConfig(accountsConfig);
  if (accounts.adminAddr !== "off") {
    const token = optionToUndefined(accounts.adminToken);
    actors.push(() => new AdminServiceActor(accounts.adminAddr, () => resolveAdminToken(token, ctx.home, true)!));
  }
  return actors;
}

/** Files, artifacts and batches: the expiry sweepers, the batch coordinator and the batch worker. */
function fileAndBatchActors(ctx: PlatformContext): Array<() => Actor> {
  const files = readConfig(filesConfig);
  const artifacts = readConfig(artifactsConfig);
  const timeouts = readConfig(timeoutsConfig);
  const catalog = new Map(ctx.catalog.map((m) => [m.id, m]));
  return [
    () => fileSweeper(files.fileSweepMs),
    () => artifactSweeper(artifacts.sweepMs, artifacts.uploadTtlS),
    () => new BatchCoordinator({ catalog, maxBatchRequests: files.maxBatchRequests, maxBatchFileBytes: files.maxBatchFileBytes, ackWaitMs: files.batchAckWaitMs }),
    () => new BatchWorker({
      catalog,
      ackWaitMs: files.batchAckWaitMs,
      queueMargin: files.batchQueueMargin,
      admissionTimeoutMs: timeouts.admissionTimeoutMs,
      runnerTimeoutMs: timeouts.runnerTimeoutMs,
      routing: readConfig(routingConfig),
      requestTimeoutMs: timeouts.requestTimeoutMs,
      responseTtlSeconds: readConfig(responsesConfig).ttlSeconds,
      observer: ctx.lineObserver,
    }),
  ];
}
