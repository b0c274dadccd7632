import type { ModelSpec } from "../../modules/catalog/mod.js";
import type { Logger } from "../../lib/log.js";
import type { Engine } from "./engine.js";
import { LlamaEngine, type FlashAttentionSetting } from "./llama/llama-engine.js";
import { resolveModelFile } from "./llama/model-source.js";
import { SimEngine } from "./sim/sim-engine.js";

export interface EngineEnvironment {
  /** Where Hugging Face downloads are kept. */
  modelCache: string;
  hfToken: string | undefined;
  hfEndpoint: string | undefined;
  /** How long a decode step may wait for a new request after one ended (DecodeSteps). */
  decodeLingerMaxMs?: number;
  /** UV_THREADPOOL_SIZE as this process started with it (libuv's pool decides how a step queues its samples). */
  libuvPoolSize?: string;
  /** CPU runners of threads > 1 pick each step's threads from the steps they serve (ThreadTuner). */
  tuneDecodeThreads?: boolean;
  /** TRIBUTARY_FLASH_ATTENTION (unset: auto). */
  flashAttention?: FlashAttentionSetting;
  log: Logger;
  /** What the model's load is doing now ("downloading 42% of 639 MB"), for heartbeats while loading. */
  onLoadProgress?: (detail: string) => void;
}

/**
 * The threads of libuv's pool for a UV_THREADPOOL_SIZE value, read as libuv reads it: unset 4,
 * otherwise atoi's number with 0 (empty, not a number) as 1, at most 1024 (a negative number
 * leaves the pool without threads: 0 here).
 */
export function libuvPoolThreads(value: string | undefined): number {
  if (value === undefined) return 4;
  const n = Number.parseInt(value, 10);
  if (!Number.isFinite(n) || n === 0) return 1;
  return n < 0 ? 0 : Math.min(n, 1024);
}

export function createEngine(spec: ModelSpec, env: EngineEnvironment): Engine {
  if (spec.engine === "sim") return new SimEngine(spec);
  const log = env.log.child({ model: spec.id });
  return new LlamaEngine(spec, {
    log,
    lingerMaxMs: env.decodeLingerMaxMs,
    samplesFollowDecode: libuvPoolThreads(env.libuvPoolSize) === 1,
    tuneThreads: env.tuneDecodeThreads ?? false,
    flashAttention: env.flashAttention,
    modelPath: () =>
      resolveModelFile(spec.source, {
        cacheDir: env.modelCache,
        expectedSha256: spec.sha256,
        hfToken: env.hfToken,
        hfEndpoint: env.hfEndpoint,
        log,
        onProgress: (done, total) => {
          const progress = {
            mb: Math.round(done / 1e6),
            totalMb: total ? Math.round(total / 1e6) : undefined,
            percent: total ? Math.floor((done / total) * 100) : undefined,
          };
          log.info("model download progress", progress);
          env.onLoadProgress?.(progress.percent !== undefined ? `downloading ${progress.percent}% of ${progress.totalMb} MB` : `downloading ${progress.mb} MB`);
        },
      }),
  });
}

export { defaultModelCache } from "../../modules/catalog/mod.js";
