// Rate-limit headers as OpenAI sends them: integers for limits and what remains, Go-style
// durations ("6m0s", "17.5s", "20ms") for the time until the budget is whole again.

/** Formats milliseconds like Go's time.Duration.String(), to millisecond precision. */
export function goDuration(ms: number): string {
  const total = Math.max(0, Math.round(ms));
  if (total === 0) return "0s";
  if (total < 1000) return `${total}ms`;
  const hours = Math.floor(total / 3_600_000);
  const minutes = Math.floor((total % 3_600_000) / 60_000);
  const seconds = (total % 60_000) / 1000;
  const s = `${Number.isInteger(seconds) ? seconds : seconds.toFixed(3).replace(/0+$/, "")}s`;
  if (hours > 0) return `${hours}h${minutes}m${s}`;
  if (minutes > 0) return `${minutes}m${s}`;
  return s;
}

/** Parses a Go duration back to milliseconds (tests and clients that honour the reset headers). */
export function parseGoDuration(text: string): number {
  let ms = 0;
  const re = /(\d+(?:\.\d+)?)(h|ms|m|s|us|µs|ns)/g;
  let m: RegExpExecArray | null;
  let consumed = 0;
  while ((m = re.exec(text))) {
    consumed += m[0].length;
    const v = Number(m[1]);
    ms += v * { h: 3_600_000, m: 60_000, s: 1000, ms: 1, us: 1e-3, "µs": 1e-3, ns: 1e-6 }[m[2] as "h"];
  }
  if (consumed !== text.length || text.length === 0) throw new Error(`not a Go duration: '${text}'`);
  return Math.round(ms * 1e6) / 1e6;
}

export interface BudgetSnapshot {
  limitRequests: number;
  remainingRequests: number;
  limitTokens: number;
  remainingTokens: number;
  /** Milliseconds until the window ends (the budget is whole again). */
  resetMs: number;
}

export function rateLimitHeaders(s: BudgetSnapshot): Record<string, string> {
  const remainingRequests = Math.max(0, Math.min(s.limitRequests, Math.floor(s.remainingRequests)));
  const remainingTokens = Math.max(0, Math.min(s.limitTokens, Math.floor(s.remainingTokens)));
  return {
    "x-ratelimit-limit-requests": String(s.limitRequests),
    "x-ratelimit-remaining-requests": String(remainingRequests),
    "x-ratelimit-reset-requests": goDuration(remainingRequests < s.limitRequests ? s.resetMs : 0),
    "x-ratelimit-limit-tokens": String(s.limitTokens),
    "x-ratelimit-remaining-tokens": String(remainingTokens),
    "x-ratelimit-reset-tokens": goDuration(remainingTokens < s.limitTokens ? s.resetMs : 0),
  };
}

/** retry-after (integer seconds, at least 1) and retry-after-ms, which the openai SDK prefers. */
export function retryAfterHeaders(ms: number): Record<string, string> {
  const wait = Math.max(1, Math.ceil(ms));
  return { "retry-after": String(Math.max(1, Math.ceil(wait / 1000))), "retry-after-ms": String(wait) };
}
