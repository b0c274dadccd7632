import { existsSync, readdirSync, readFileSync } from "node:fs";
import type { SseLoadClient, StreamResult } from "./sse-client.js";
import { cpuMs } from "./processes.js";
import { median } from "./stats.js";

// A closed-loop streaming load (each client sends its next request as soon as its last one ended)
// measured over a window, counting tokens by when they arrive. With a model that decodes a few
// tokens per second a request outlasts the window, so counting requests (or their usage) that
// complete inside it is wrong both ways; a token counts when its delta arrives inside the window,
// whichever request it belongs to, the same way for every server.

/** What one request contributed to a window. */
export interface RequestTally {
  /** Content deltas that arrived inside the window. */
  deltasInWindow: number;
  /** Content deltas of the whole request. */
  deltas: number;
  /** usage.completion_tokens when the request completed with a usage chunk, else undefined. */
  completionTokens: number | undefined;
}

/** The tally of a request from its delta arrival times (performance.now()) and its result. */
export function tallyRequest(arrivals: readonly number[], window: { from: number; to: number }, result: Pick<StreamResult, "ok" | "completionTokens">): RequestTally {
  const deltasInWindow = arrivals.filter((at) => at >= window.from && at <= window.to).length;
  return { deltasInWindow, deltas: arrivals.length, completionTokens: result.ok && result.completionTokens > 0 ? result.completionTokens : undefined };
}

/**
 * Tokens that arrived inside the window. A delta may carry more than one token (a server holds a
 * token back while it could be the start of a stop string, or coalesces for a slow reader): a
 * completed request's deltas count its usage's tokens per delta; a request cut off at the
 * window's end (or failed) has no usage and counts the tokens per delta of the completed ones
 * (1 when none completed).
 */
export function tokensInWindow(tallies: readonly RequestTally[]): { tokens: number; tokensPerDelta: number } {
  let completedTokens = 0;
  let completedDeltas = 0;
  for (const t of tallies)
    if (t.completionTokens !== undefined && t.deltas > 0) {
      completedTokens += t.completionTokens;
      completedDeltas += t.deltas;
    }
  const tokensPerDelta = completedDeltas > 0 ? completedTokens / completedDeltas : 1;
  let tokens = 0;
  for (const t of tallies)
    tokens += t.deltasInWindow * (t.completionTokens !== undefined && t.deltas > 0 ? t.completionTokens / t.deltas : tokensPerDelta);
  return { tokens, tokensPerDelta };
}

/** Every process under `pid` (itself included), from /proc/<pid>/task/<tid>/children. */
export function processTree(pid: number): number[] {
  const out = [pid];
  try {
    for (const tid of readdirSync(`/proc/${pid}/task`)) {
      const file = `/proc/${pid}/task/${tid}/children`;
      if (!existsSync(file)) continue;
      for (const child of readFileSync(file, "utf8").split(" ").filter(Boolean)) out.push(...processTree(Number(child)));
    }
  } catch {
    // gone
  }
  return out;
}

/** A short name for a server process: the stack's process roles, nats-server, llama-server. */
export function processRole(pid: number): string {
  let cmdline = "";
  try {
    cmdline = readFileSync(`/proc/${pid}/cmdline`, "utf8").replaceAll("\0", " ");
  } catch {
    return "gone";
  }
  for (const [needle, role] of [["runners/main.js", "runner"], ["gateway/main.js", "gateway"], ["actors/main.js", "actors"], ["sandbox-host/main.js", "sandbox host"],
    ["nats-server", "nats"], ["llama-server", "llama-server"], ["cli/main.js", "supervisor"]] as const)
    if (cmdline.includes(needle)) return role;
  return cmdline.split(" ")[0] ?? "?";
}

/** Distinct failure messages a level keeps. */
const MAX_ERROR_SAMPLES = 3;

export interface LevelResult {
  tokens: number;
  /** Tokens per content delta over the completed requests (1: one token per delta). */
  tokensPerDelta: number;
  /** Requests that began inside the window and completed. */
  requests: number;
  /** Failed requests (not those cut off at the window's end). */
  errors: number;
  /** What the first few distinct failures said (status and message), so a result file names them. */
  errorSamples: string[];
  /** TTFT of the requests that began inside the window. */
  ttft: number[];
  seconds: number;
  /** CPU ms per token over every server process, and per process role (summed over same-role processes). */
  cpuMsPerToken: number;
  cpuMsPerTokenByRole: Record<string, number>;
  /** Seconds from the start until every client had its first token (the window opened the warm-up after). */
  startSeconds: number;
  /** The median prompt tokens the server counted over the completed requests (NaN without usage). */
  promptTokens: number;
}

export interface ClosedLoopOptions {
  concurrency: number;
  /** Seconds from the moment every client has had its first token to the window's start. */
  warmupSeconds: number;
  seconds: number;
  /** The window starts at the latest this long after the start, first tokens or not. */
  maxStartSeconds?: number;
  /** The request body of every request (stream options are added by the client). */
  body: Record<string, unknown>;
  /** The server's root processes: they and their descendants are the CPU counted. */
  serverPids: readonly number[];
}

/**
 * `concurrency` clients, each sending its next request as soon as its last one ended. The window
 * opens `warmupSeconds` after every client has had its first token (the first prompts of all
 * clients are evaluated together: with the ~500M model on a busy machine that took longer than
 * a fixed warm-up, and the window saw no token at all) and lasts `seconds`. At its end the
 * client's sockets are closed: requests still running count only the tokens that arrived inside
 * the window.
 */
export async function closedLoop(client: SseLoadClient, o: ClosedLoopOptions): Promise<LevelResult> {
  const pids = o.serverPids.flatMap(processTree);
  const roles = new Map(pids.map((p) => [p, processRole(p)]));
  const cpuByPid = () => new Map(pids.map((p) => [p, cpuMs(p) || 0]));
  const started = performance.now();
  let from = Infinity;
  let to = Infinity;
  let cpuBefore = new Map<number, number>();
  let cpuAfter = new Map<number, number>();
  const timers: NodeJS.Timeout[] = [];
  const openWindow = () => {
    if (from !== Infinity) return;
    const now = performance.now();
    from = now + o.warmupSeconds * 1000;
    to = from + o.seconds * 1000;
    timers.push(setTimeout(() => (cpuBefore = cpuByPid()), from - now));
    timers.push(setTimeout(() => {
      cpuAfter = cpuByPid();
      client.close();
    }, to - now));
  };
  timers.push(setTimeout(openWindow, (o.maxStartSeconds ?? 300) * 1000));
  let clientsWithToken = 0;
  const tallies: RequestTally[] = [];
  const ttft: number[] = [];
  const promptTokens: number[] = [];
  let requests = 0;
  let errors = 0;
  const errorSamples: string[] = [];
  await Promise.all(Array.from({ length: o.concurrency }, async () => {
    let first = true;
    while (performance.now() < to) {
      const began = performance.now();
      const arrivals: number[] = [];
      const r = await client.streamChat(o.body, false, (at) => {
        arrivals.push(at);
        if (first) {
          first = false;
          if (++clientsWithToken === o.concurrency) openWindow();
        }
      });
      tallies.push(tallyRequest(arrivals, { from, to }, r));
      if (!r.ok && performance.now() < to) {
        errors++;
        const said = (r.error ?? `HTTP ${r.status}`).slice(0, 200);
        if (errorSamples.length < MAX_ERROR_SAMPLES && !errorSamples.includes(said)) errorSamples.push(said);
      }
      if (began >= from && Number.isFinite(r.ttftMs)) ttft.push(r.ttftMs);
      if (r.ok && began >= from) requests++;
      if (r.ok && Number.isFinite(r.promptTokens)) promptTokens.push(r.promptTokens!);
    }
  }));
  for (const timer of timers) clearTimeout(timer);
  const { tokens, tokensPerDelta } = tokensInWindow(tallies);
  const cpuMsPerTokenByRole: Record<string, number> = {};
  let cpuTotal = 0;
  for (const [pid, after] of cpuAfter) {
    const spent = after - (cpuBefore.get(pid) ?? after);
    cpuTotal += spent;
    const role = roles.get(pid)!;
    cpuMsPerTokenByRole[role] = (cpuMsPerTokenByRole[role] ?? 0) + spent / tokens;
  }
  return {
    tokens, tokensPerDelta, requests, errors, errorSamples, ttft, seconds: o.seconds, cpuMsPerToken: cpuTotal / tokens, cpuMsPerTokenByRole,
    startSeconds: (from - o.warmupSeconds * 1000 - started) / 1000,
    promptTokens: median(promptTokens),
  };
}

/**
 * TTFTs of `requests` requests sent one after another, each as soon as the last one ended: what
 * one stream's closed loop does, with short answers, so a p50 rests on enough samples (a window
 * of one stream with long answers holds only a few). Failed requests are left out.
 */
export async function sequentialTtfts(client: SseLoadClient, body: Record<string, unknown>, requests: number): Promise<number[]> {
  const ttfts: number[] = [];
  for (let i = 0; i < requests; i++) {
    const r = await client.streamChat(body, false);
    if (r.ok && Number.isFinite(r.ttftMs)) ttfts.push(r.ttftMs);
  }
  return ttfts;
}

/** What `streams` closed-loop clients got in a stretch of time: tokens, each request's TTFT, failures. */
export interface StreamedFor {
  tokens: number;
  seconds: number;
  ttfts: number[];
  errors: number;
}

/**
 * `streams` clients streaming `body` in a closed loop for `seconds` (each sends its next request
 * as soon as its last one ended; the last requests run to their end): counted by request, for
 * benches that compare two settings in turn rather than measure a window.
 */
export async function streamFor(client: SseLoadClient, body: Record<string, unknown>, streams: number, seconds: number): Promise<StreamedFor> {
  const deadline = performance.now() + seconds * 1000;
  const out: StreamedFor = { tokens: 0, seconds: 0, ttfts: [], errors: 0 };
  const started = performance.now();
  await Promise.all(
    Array.from({ length: streams }, async () => {
      while (performance.now() < deadline) {
        const r = await client.streamChat(body, false);
        if (!r.ok) {
          out.errors++;
          continue;
        }
        out.tokens += r.completionTokens;
        out.ttfts.push(r.ttftMs);
      }
    }),
  );
  out.seconds = (performance.now() - started) / 1000;
  return out;
}
