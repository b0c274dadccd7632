import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import type { Llama, LlamaContext, LlamaContextSequence, LlamaModel, SequenceEvaluateOptions } from "node-llama-cpp";

/**
 * The one place that touches node-llama-cpp's private internals (package.json pins 3.21.1).
 *
 * Why: `LlamaContextSequence.evaluate` costs ~100 µs of JavaScript per token on the runner's
 * main thread (locks, its batch dispatcher, the sampler config rebuilt and re-read through N-API
 * every token) plus ~60-80 µs more on the decode thread through GC and wake-ups: measured at 604
 * µs CPU per token against 523 calling the addon directly, on the tiny model at one stream
 * (bench/results/per-token-path.md, section 6). The engine therefore drives the native addon
 * itself: one batch per step for all sequences of the context, one sampler per decoding phase
 * configured once. Everything it needs from the library's internals is named in `NativeContext`
 * and checked at startup by `openNativeContext`: an upgrade that renames any of it fails loudly
 * at load, naming the version, instead of misbehaving.
 */

/** The native context (`LlamaContext._ctx`, an `AddonContext`). */
export interface NativeContext {
  initBatch(tokens: number): void;
  /** Adds tokens at positions first.. of a sequence; returns the batch indexes of the logits asked for. */
  addToBatch(sequenceId: number, firstPosition: number, tokens: Uint32Array, logitIndexes: Uint32Array): Uint32Array;
  decodeBatch(): Promise<void>;
  /** Samples from a logit row of the last decoded batch (-1: nothing to sample) and lets the sampler accept it. */
  sampleToken(batchLogitIndex: number, sampler: NativeSampler): Promise<number>;
  /**
   * The same, also returning (`probabilities`) the candidates left after the sampler's chain,
   * sorted by logit, with the softmax of their logits, `[token, p, token, p, ...]`, and
   * (`confidence`) the sampled token's probability among them (float32 values).
   */
  sampleToken(batchLogitIndex: number, sampler: NativeSampler, probabilities: boolean, confidence?: boolean): Promise<[token: number, distribution: number[] | undefined, confidence: number | undefined]>;
  /** Removes a sequence's KV cells in [start, end) (end < 0: to the end); false when the memory cannot do it partially. */
  removeTokenCellsFromSequence(sequenceId: number, start: number, end: number): boolean;
  /** The CPU threads later decodes run on (never while a decode is in flight). */
  setThreads(threads: number): void;
}

/** A native sampler chain (`AddonSampler`). Accepts each token it samples (penalty window, grammar state). */
export interface NativeSampler {
  applyConfig(config: object): void;
  dispose(): void;
}

export interface OpenedContext {
  native: NativeContext;
  /** The context's sequence ids, in creation order. */
  sequenceIds: number[];
  /** A new sampler configured for `options` (what `evaluate` would sample with). */
  createSampler(options: SequenceEvaluateOptions): NativeSampler;
}

interface ContextInternals { _ctx?: Record<string, unknown> }
interface SequenceInternals { _sequenceId?: unknown; _resolveSamplerConfig?: unknown }
interface ModelInternals { _model?: unknown }
interface LlamaInternals { _bindings?: { AddonSampler?: unknown } }

const CONTEXT_METHODS = ["initBatch", "addToBatch", "decodeBatch", "sampleToken", "removeTokenCellsFromSequence", "setThreads"] as const;

/**
 * Takes over the context's decoding. `sequences` must stay referenced for the context's life
 * (node-llama-cpp reclaims the ids of collected sequences) and must never be evaluated through
 * node-llama-cpp: the engine owns their KV cells from here on.
 */
export function openNativeContext(llama: Llama, model: LlamaModel, context: LlamaContext, sequences: readonly LlamaContextSequence[]): OpenedContext {
  const missing: string[] = [];
  const ctx = (context as unknown as ContextInternals)._ctx;
  if (!ctx) missing.push("LlamaContext._ctx");
  else for (const m of CONTEXT_METHODS) if (typeof ctx[m] !== "function") missing.push(`LlamaContext._ctx.${m}`);
  const first = sequences[0] as unknown as SequenceInternals | undefined;
  if (typeof first?._sequenceId !== "number") missing.push("LlamaContextSequence._sequenceId");
  if (typeof first?._resolveSamplerConfig !== "function") missing.push("LlamaContextSequence._resolveSamplerConfig");
  const nativeModel = (model as unknown as ModelInternals)._model;
  if (!nativeModel) missing.push("LlamaModel._model");
  const AddonSampler = (llama as unknown as LlamaInternals)._bindings?.AddonSampler;
  if (typeof AddonSampler !== "function") missing.push("Llama._bindings.AddonSampler");
  if (missing.length > 0)
    throw new Error(`node-llama-cpp ${installedVersion()} lacks the internals the llama engine drives (written for 3.21.1, pinned in package.json): ${missing.join(", ")}`);

  const resolver = first as unknown as { _resolveSamplerConfig(options: SequenceEvaluateOptions): object };
  const SamplerClass = AddonSampler as new (model: unknown) => NativeSampler;
  return {
    native: ctx as unknown as NativeContext,
    sequenceIds: sequences.map((s) => (s as unknown as { _sequenceId: number })._sequenceId),
    createSampler(options) {
      const sampler = new SamplerClass(nativeModel);
      // The same config object `evaluate` builds (defaults, seed, token bias arrays, penalty
      // window, grammar state), applied once: the sampler then keeps its state itself.
      sampler.applyConfig(resolver._resolveSamplerConfig(options));
      return sampler;
    },
  };
}

function installedVersion(): string {
  try {
    const entry = fileURLToPath(import.meta.resolve("node-llama-cpp"));
    const pkg = JSON.parse(readFileSync(new URL("../package.json", `file://${entry}`), "utf8")) as { version?: unknown };
    return typeof pkg.version === "string" ? pkg.version : "(unknown version)";
  } catch {
    return "(unknown version)";
  }
}
