import { TEST_MODEL } from "./processes.js";
import { rawStreamChat, type TimedStreamResult } from "./raw-sse-client.js";

// The load of the simulated-cadence benchmarks (sim-streams, sim-streams-floor): `streams`
// streamed chat completions started evenly over a ramp, each on its own connection, and the gaps
// between their tokens in the steady state (from 1 s after the last stream started until 1 s
// before the first one ends), the window in which every stream is live.

/** The stack's environment for this load: the test model on the sim engine at `rate` tokens/s with room for `streams`, limits far above it. */
export function simStackEnv(streams: number, rate: number, firstTokenMs: number): Record<string, string> {
  return {
    TRIBUTARY_ENGINE: "sim",
    TRIBUTARY_MODEL_OVERRIDES: JSON.stringify({
      [TEST_MODEL]: {
        slots: streams, queue_limit: streams, context_length: 100_000, max_output_tokens: 100_000,
        sim: { tokens_per_second: rate, first_token_latency_ms: firstTokenMs },
        rate_limits: { requests_per_minute: 10_000_000, tokens_per_minute: 1_000_000_000 },
      },
    }),
    // The load generator is one address standing for many clients: the per-address cap (256 by
    // default, a bound against one client's flood) would refuse all but its first streams.
    TRIBUTARY_MAX_CONNECTIONS_PER_ADDRESS: "0",
  };
}

export interface SimLoad {
  streams: number;
  /** Tokens each stream asks for (max_tokens). */
  tokens: number;
  rampSeconds: number;
  holdSeconds: number;
}

export interface SimLoadResult {
  /** Seconds from the first stream's start to the last one's end. */
  wall: number;
  delivered: number;
  /** Streams that failed, ended early or lost a token. */
  errors: number;
  errorKinds: Record<string, number>;
  /** Gaps between tokens (ms) that ended in the steady state. */
  gaps: number[];
  /** Those gaps by the second of the steady state they ended in. */
  gapsBySecond: number[][];
}

export async function driveSimLoad(port: number, apiKey: string, model: string, load: SimLoad): Promise<SimLoadResult> {
  const { streams, tokens, rampSeconds, holdSeconds } = load;
  const started = performance.now();
  // Streams start spread over the ramp, as independent clients would.
  const results: TimedStreamResult[] = await Promise.all(
    Array.from({ length: streams }, (_, i) =>
      new Promise<TimedStreamResult>((resolve) =>
        setTimeout(() => resolve(rawStreamChat(port, apiKey, { model, messages: [{ role: "user", content: "go" }], max_tokens: tokens, seed: i })), (i / streams) * rampSeconds * 1000),
      ),
    ),
  );
  const wall = (performance.now() - started) / 1000;
  const steadyFrom = started + (rampSeconds + 1) * 1000;
  const steadyTo = started + (holdSeconds - 1) * 1000;
  const gaps: number[] = [];
  const gapsBySecond: number[][] = [];
  let errors = 0;
  let delivered = 0;
  const errorKinds: Record<string, number> = {};
  for (const r of results) {
    if (!r.ok || r.deltas !== tokens) {
      errors++;
      const kind = r.error ? r.error.slice(0, 120) : r.ok ? `${r.deltas} of ${tokens} tokens` : "no [DONE]";
      errorKinds[kind] = (errorKinds[kind] ?? 0) + 1;
    }
    delivered += r.deltas;
    for (let g = 0; g < r.gapsMs.length; g++) if (r.gapEndsAt[g]! >= steadyFrom && r.gapEndsAt[g]! <= steadyTo) {
      gaps.push(r.gapsMs[g]!);
      (gapsBySecond[Math.floor((r.gapEndsAt[g]! - steadyFrom) / 1000)] ??= []).push(r.gapsMs[g]!);
    }
  }
  return { wall, delivered, errors, errorKinds, gaps, gapsBySecond };
}
