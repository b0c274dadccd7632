import type { TokenLogprob } from "../../../proto/gen/tributary/v1/inference.js";
import type { NativeSampler } from "./addon-context.js";

/**
 * How a token's logprobs are read from the logits it was sampled from, with node-llama-cpp
 * 3.21.1's addon, which reports probabilities only as part of a sample: a sampler's candidates
 * after its chain, sorted, each with the softmax of their logits. Asking for the whole vocabulary
 * costs a JavaScript array of two numbers per token of it, built on the runner's main thread (45
 * ms per token for a vocabulary of 152k, bench/results/logprobs.md), so each decode step reads two
 * cheap things instead, on the same logits right after the token's sample:
 *   - `top`: a sampler whose chain keeps the TOP_CANDIDATES most likely tokens (top_k, a partial
 *     sort; temperature 1) gives their probabilities relative to each other;
 *   - `whole`: a greedy sampler (its chain leaves the logits as they are) gives, as its
 *     confidence, the most likely token's probability over the whole vocabulary.
 * Together: log p(t) = log q(t) - log q(top) + log p(top) for every candidate t. Only when the
 * sampled token is not among the candidates (sampled far down the list, at a high temperature)
 * is the whole distribution read, on the same logits before the next decode.
 */
export const TOP_CANDIDATES = 64;

/** The two samplers a sequence reads its logprobs with (see above); the engine's createSampler makes them. */
export interface LogprobProbe {
  readonly top: NativeSampler;
  readonly whole: NativeSampler;
  /** The read of the last decode, set before decode() resolves. */
  read: LogprobRead | undefined;
}

export interface LogprobRead {
  /** The candidates, `[token, q, token, q, ...]`, most likely first; q relative to the candidates only. */
  top: readonly number[];
  /** The most likely token's probability over the whole vocabulary. */
  topProbability: number;
  /** `[token, p, ...]` over the whole vocabulary: read only when the sampled token is not among `top`. */
  whole: readonly number[] | undefined;
}

/** The sampler options of each probe (what node-llama-cpp's evaluate would sample with). */
export const PROBE_OPTIONS = {
  top: { temperature: 1, topK: TOP_CANDIDATES, topP: 1, minP: 0, seed: 1 },
  whole: { temperature: 0 },
} as const;

/** Whether `token` is among the candidates `[token, q, ...]`. */
export function isCandidate(top: readonly number[], token: number): boolean {
  for (let i = 0; i < top.length; i += 2) if (top[i] === token) return true;
  return false;
}

/** OpenAI's logprob for a token too unlikely to have one (its probability underflowed float32). */
export const UNLIKELY_LOGPROB = -9999;

/**
 * The sampled token's logprob and the `alternatives` most likely tokens' from a read, with each
 * token's bytes.
 */
export function tokenLogprob(token: number, read: LogprobRead, alternatives: number, bytesOf: (token: number) => Uint8Array): TokenLogprob {
  const { top, topProbability } = read;
  // log q(t) - log q(top) + log p(top): the candidates' softmax put over the whole vocabulary.
  const offset = Math.log(topProbability) - Math.log(top[1]!);
  const candidate = (q: number) => (q > 0 ? Math.log(q) + offset : UNLIKELY_LOGPROB);
  const alternativesOut: TokenLogprob[] = [];
  for (let i = 0; i < alternatives && 2 * i + 1 < top.length; i++) alternativesOut.push({ bytes: bytesOf(top[2 * i]!), logprob: candidate(top[2 * i + 1]!), top: [] });
  let logprob = UNLIKELY_LOGPROB;
  const found = indexOf(top, token);
  if (found >= 0) logprob = candidate(top[found + 1]!);
  else if (read.whole) {
    const at = indexOf(read.whole, token);
    const p = at >= 0 ? read.whole[at + 1]! : 0;
    if (p > 0) logprob = Math.log(p);
  }
  return { bytes: bytesOf(token), logprob, top: alternativesOut };
}

function indexOf(pairs: readonly number[], token: number): number {
  for (let i = 0; i < pairs.length; i += 2) if (pairs[i] === token) return i;
  return -1;
}
