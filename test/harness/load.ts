import { parseGoDuration } from "../../modules/ratelimit/mod.js";

// A closed-loop load of chat completions from several clients spread over several gateways, and
// the accounting of what was admitted in each rate-limit window.

export interface Outcome {
  status: number;
  /** Date.now() when the reply arrived. */
  at: number;
  /** Window the request was admitted in (from x-ratelimit-reset-requests), for 200s. */
  window?: number;
  /** prompt + completion tokens of an admitted request. */
  tokens?: number;
}

export interface LoadOptions {
  urls: string[];
  clientsPerGateway: number;
  apiKey: string;
  body: Record<string, unknown>;
  windowMs: number;
  /** Pause of a client after a 429 or 503 (its own backoff). */
  pauseAfterRefusalMs: number;
  /** Pause of a client after each admitted request (0: as fast as replies come). */
  pauseAfterSuccessMs?: number;
  until: () => boolean;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function runLoad(options: LoadOptions): Promise<Outcome[]> {
  const outcomes: Outcome[] = [];
  const client = async (url: string) => {
    while (!options.until()) {
      let res: Response;
      try {
        res = await fetch(url + "/v1/chat/completions", {
          method: "POST",
          headers: { authorization: `Bearer ${options.apiKey}`, "content-type": "application/json" },
          body: JSON.stringify(options.body),
        });
      } catch {
        outcomes.push({ status: 0, at: Date.now() });
        await sleep(options.pauseAfterRefusalMs);
        continue;
      }
      const at = Date.now();
      const body = (await res.json()) as { usage?: { total_tokens: number } };
      if (res.status === 200) {
        const reset = parseGoDuration(res.headers.get("x-ratelimit-reset-requests")!);
        outcomes.push({ status: 200, at, window: windowOf(at + reset, options.windowMs), tokens: body.usage?.total_tokens });
        if (options.pauseAfterSuccessMs) await sleep(options.pauseAfterSuccessMs);
      } else {
        outcomes.push({ status: res.status, at });
        await sleep(options.pauseAfterRefusalMs);
      }
    }
  };
  await Promise.all(options.urls.flatMap((url) => Array.from({ length: options.clientsPerGateway }, () => client(url))));
  return outcomes;
}

/** The window that ends at (about) `end`: windows are aligned to multiples of their length. */
export function windowOf(end: number, windowMs: number): number {
  return Math.round(end / windowMs) - 1;
}

export interface WindowTally {
  window: number;
  admitted: number;
  tokens: number;
  refused: number;
}

/** Admissions per window, for the windows entirely inside [from, to) (partial ones are left out). */
export function tallyWindows(outcomes: Outcome[], windowMs: number, from: number, to: number): WindowTally[] {
  const first = Math.ceil(from / windowMs);
  const last = Math.floor(to / windowMs) - 1;
  const tallies: WindowTally[] = [];
  for (let w = first; w <= last; w++) tallies.push({ window: w, admitted: 0, tokens: 0, refused: 0 });
  for (const o of outcomes) {
    if (o.status === 200 && o.window !== undefined) {
      const t = tallies.find((x) => x.window === o.window);
      if (t) {
        t.admitted++;
        t.tokens += o.tokens ?? 0;
      }
    } else {
      const t = tallies.find((x) => x.window === Math.floor(o.at / windowMs));
      if (t) t.refused++;
    }
  }
  return tallies;
}
