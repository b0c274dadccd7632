import type { ModelSpec } from "../lib/catalog/model-spec.js";
import { readConfig, responsesConfig } from "../lib/config.js";
import { BackgroundResponseWorker } from "./responses/background-worker.js";
import type { Actor } from "./runtime/actor.js";

export interface PlatformContext {
  catalog: readonly ModelSpec[];
  home: string;
  env: NodeJS.ProcessEnv;
}

/**
 * The actors an actor host runs, as factories (the supervisor makes a fresh instance on each
 * restart). Each platform feature adds its actors here.
 */
export function platformActors(ctx: PlatformContext): Array<() => Actor> {
  const responses = readConfig(responsesConfig);
  return [
    // Background responses (POST /v1/responses with background: true).
    () =>
      new BackgroundResponseWorker({
        catalog: ctx.catalog,
        ttlSeconds: responses.ttlSeconds,
        concurrency: responses.backgroundConcurrency,
        ackWaitMs: responses.backgroundAckWaitMs,
        maxAttempts: responses.backgroundMaxAttempts,
        requestTimeoutMs: responses.requestTimeoutMs,
        admissionTimeoutMs: responses.admissionTimeoutMs,
        runnerTimeoutMs: responses.runnerTimeoutMs,
        drainTimeoutMs: responses.drainTimeoutMs,
      }),
  ];
}
