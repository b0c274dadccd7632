import { parseGoDuration } from "../../modules/ratelimit/mod.js";

// A closed-loop load of chat completions from several clients spread over several gateways, and
// the accounting of what was admitted in each rate-limit window.

export interface Outcome {
  status: number;
  /** Date.now() when the request was sent. */
  sent: number;
  /** Date.now() when the reply arrived. */
  at: number;
  /** Window the request was admitted in (from x-ratelimit-reset-requests), for 200s. */
  window?: number;
  /** Its x-request-id (its trace's id), for 200s. */
  requestId?: string;
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
      const sent = Date.now();
      let res: Response;
      try {
        res = await fetch(url + "/v1/chat/completions", {
          method: "POST",
          headers: { authorization: `Bearer ${options.apiKey}`, "content-type": "application/json" },
          body: JSON.stringify(options.body),
        });
      } catch {
        outcomes.push({ status: 0, sent, at: Date.now() });
        await sleep(options.pauseAfterRefusalMs);
        continue;
      }
      const at = Date.now();
      const body = (await res.json()) as { usage?: { total_tokens: number } };
      if (res.status === 200) {
        const reset = parseGoDuration(res.headers.get("x-ratelimit-reset-requests")!);
        outcomes.push({ status: 200, sent, at, window: admittedIn(sent, at, reset, options.windowMs), requestId: res.headers.get("x-request-id") ?? undefined, tokens: body.usage?.total_tokens });
        if (options.pauseAfterSuccessMs) await sleep(options.pauseAfterSuccessMs);
      } else {
        outcomes.push({ status: res.status, sent, at });
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

/**
 * The window a request sent at `sent` and answered at `at` was admitted in, its reply saying the
 * window ends in `resetMs` (from the admission). A gateway admits from a window's budget only
 * within that window, so a request sent and answered within one window was admitted in it; one
 * that spans a boundary is placed by its reset, counted from the middle of its span.
 */
export function admittedIn(sent: number, at: number, resetMs: number, windowMs: number): number {
  const first = Math.floor(sent / windowMs);
  if (first === Math.floor(at / windowMs)) return first;
  return windowOf((sent + at) / 2 + resetMs, windowMs);
}

/**
 * Places each admitted request whose span crosses a window boundary (admittedIn can only
 * estimate those; one sent and answered within a window was admitted in it) by its trace (it was
 * sent with `log: true`): the gateway's own time of admission, received_at +
 * rate_limit_admitted_ms. Reads the traces of `model` since `since` (Unix ms) until every such
 * request is found or `timeoutMs` has passed (a partition's heal can keep the trace stream
 * electing for most of a minute). One still without a trace is left out of every window
 * (`window` undefined); returns how many were.
 */
export async function placeByTraces(outcomes: Outcome[], windowMs: number, model: string, since: number, gatewayUrl: string, apiKey: string, timeoutMs = 90_000): Promise<number> {
  const spanning = outcomes.filter((o) => o.status === 200 && Math.floor(o.sent / windowMs) !== Math.floor(o.at / windowMs));
  const admittedAt = new Map<string, number>();
  const unfound = () => spanning.some((o) => !o.requestId || !admittedAt.has(o.requestId));
  const deadline = Date.now() + timeoutMs;
  while (unfound() && Date.now() < deadline) {
    let after: string | undefined;
    for (;;) {
      const query = new URLSearchParams({ model, status: "success", start_time: String(Math.floor(since / 1000) - 1), limit: "100", ...(after ? { after } : {}) });
      const res = await fetch(`${gatewayUrl}/v1/traces?${query}`, { headers: { authorization: `Bearer ${apiKey}` } }).catch(() => undefined);
      if (!res?.ok) {
        await res?.body?.cancel().catch(() => undefined);
        break;
      }
      const page = (await res.json()) as { data: Array<{ id: string; request_id: string; timings: { received_at: number; rate_limit_admitted_ms: number | null } }>; has_more: boolean };
      for (const tr of page.data) if (tr.timings.rate_limit_admitted_ms !== null) admittedAt.set(tr.request_id, tr.timings.received_at + tr.timings.rate_limit_admitted_ms);
      if (!page.has_more || page.data.length === 0) break;
      after = page.data.at(-1)!.id;
    }
    if (unfound()) await sleep(1_000);
  }
  let unplaced = 0;
  for (const o of spanning) {
    const at = o.requestId ? admittedAt.get(o.requestId) : undefined;
    if (at === undefined) unplaced++;
    o.window = at === undefined ? undefined : Math.floor(at / windowMs);
  }
  return unplaced;
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
