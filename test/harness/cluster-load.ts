import { createHash } from "node:crypto";
import OpenAI, { toFile } from "openai";
import type { Batch } from "openai/resources/batches";
import type { Test } from "tap";
import { batchResults, chatLine, createBatch, waitForBatch } from "./batches.js";
import { TEST_MODEL } from "./processes.js";

// A steady mixed load for the cluster's fault tests and benchmark: streamed chat completions,
// background responses, a running batch and file uploads, spread over the gateways' clients as a
// load balancer would (a failed request is retried on the next gateway), and the checks that
// nothing accepted was lost.

/**
 * The processes' settings under the fault load (the test and bench/cluster-faults): the sim
 * engine, budgets on (their owners fail over too) but far above this load, so a 429 is never
 * noise, and short timeouts so that a lost runner or worker is noticed within the run.
 */
export const clusterFaultEnv = {
  TRIBUTARY_ENGINE: "sim",
  TRIBUTARY_MODEL_OVERRIDES: JSON.stringify({
    [TEST_MODEL]: { sim: { tokens_per_second: 50, first_token_latency_ms: 10 }, rate_limits: { requests_per_minute: 100_000, tokens_per_minute: 100_000_000 } },
  }),
  TRIBUTARY_RUNNER_TIMEOUT_MS: "3000",
  TRIBUTARY_BATCH_ACK_WAIT_MS: "5000",
  TRIBUTARY_BACKGROUND_ACK_WAIT_MS: "5000",
};

export interface Op {
  kind: "stream" | "background create" | "file upload" | "batch create";
  start: number;
  end: number;
  ok: boolean;
  attempts: number;
  error?: string;
}

export interface LoadFigures {
  requests: number;
  /** Requests that failed on every gateway until their deadline. */
  failed: number;
  /** Attempts that failed (each then retried on another gateway). */
  failedAttempts: number;
  streamsFinished: number;
  streamsEndedWithError: number;
  streamsHung: number;
}

export interface LossFigures {
  backgroundAccepted: number;
  /** Accepted background responses that never reached a final state, or ended failed. */
  backgroundLost: number;
  backgroundStatuses: Record<string, number>;
  batchLines: number;
  batchLinesMissing: number;
  batchDuplicates: number;
  filesAccepted: number;
  filesLost: number;
  /** Why each lost item counts as lost (a read error, other contents, its final status). */
  reasons: string[];
}

export class MixedLoad {
  readonly ops: Op[] = [];
  readonly backgroundIds: string[] = [];
  readonly files: Array<{ id: string; sha256: string }> = [];
  readonly streamOutcomes: Array<{ outcome: "finished" | "error event"; end: number }> = [];
  private batch: Batch | undefined;
  private batchLines = 0;
  private running = false;
  private workers: Promise<void>[] = [];
  private next = 0;
  private fileSeq = 0;

  /** `clients()`: the gateways' clients now (a restarted gateway has a new port). */
  constructor(
    private readonly clients: () => OpenAI[],
    private readonly options: { streamTimeoutMs?: number; maxTokens?: number; pauseMs?: number } = {},
  ) {}

  /** Runs `fn` on one gateway's client, on the next one when it fails, until `deadlineMs`. */
  async withFailover<T>(kind: Op["kind"], fn: (client: OpenAI) => Promise<T>, deadlineMs = 30_000): Promise<T | undefined> {
    const op: Op = { kind, start: Date.now(), end: 0, ok: false, attempts: 0 };
    this.ops.push(op);
    let index = this.next++;
    while (Date.now() - op.start < deadlineMs) {
      op.attempts++;
      const clients = this.clients();
      try {
        const value = await fn(clients[index % clients.length]!);
        op.ok = true;
        op.end = Date.now();
        return value;
      } catch (err) {
        op.error = String(err).slice(0, 200);
        if (/hung past/.test(op.error)) break;
        index++;
        await new Promise((r) => setTimeout(r, 200));
      }
    }
    op.end = Date.now();
    return undefined;
  }

  /** Queues a batch of `lines` chat lines, and `background` background responses. */
  async seed(lines: number, background: number): Promise<void> {
    this.batchLines = lines;
    this.batch = await this.withFailover("batch create", (c) => createBatch(c, Array.from({ length: lines }, (_, i) => chatLine(`line-${i}`, { max_tokens: 30 }))));
    for (let i = 0; i < background; i++) await this.withFailover("background create", (c) => this.queueBackground(c));
  }

  start(): void {
    this.running = true;
    // A steady load, not a flood: creates and uploads pause between requests.
    const pause = this.options.pauseMs ?? 100;
    const worker = async (kind: Op["kind"], fn: (c: OpenAI) => Promise<unknown>, pauseMs: number) => {
      while (this.running) {
        await this.withFailover(kind, fn);
        if (pauseMs > 0) await new Promise((r) => setTimeout(r, pauseMs));
      }
    };
    this.workers = [
      worker("stream", (c) => this.stream(c), 0),
      worker("stream", (c) => this.stream(c), 0),
      worker("background create", (c) => this.queueBackground(c), pause),
      worker("file upload", (c) => this.upload(c), pause),
    ];
  }

  async stop(): Promise<void> {
    this.running = false;
    await Promise.all(this.workers);
  }

  figures(from = 0): LoadFigures {
    const ops = this.ops.filter((o) => o.end >= from);
    const streamErrors = ops.filter((o) => o.kind === "stream" && /hung past/.test(o.error ?? "")).length;
    return {
      requests: ops.length,
      failed: ops.filter((o) => !o.ok).length,
      failedAttempts: ops.reduce((n, o) => n + o.attempts - (o.ok ? 1 : 0), 0),
      streamsFinished: this.streamOutcomes.filter((s) => s.end >= from && s.outcome === "finished").length,
      streamsEndedWithError: this.streamOutcomes.filter((s) => s.end >= from && s.outcome === "error event").length,
      streamsHung: streamErrors,
    };
  }

  /** The errors of failed attempts since `from`, by kind and message (ids and numbers blanked). */
  errors(from = 0): Record<string, number> {
    const out: Record<string, number> = {};
    for (const o of this.ops.filter((o) => o.error && o.end >= from)) {
      const key = `${o.kind}: ${o.error!.replace(/[0-9a-f]{8,}|\d+/g, "#").slice(0, 120)}`;
      out[key] = (out[key] ?? 0) + 1;
    }
    return out;
  }

  /** From `at` to the end of the first request of each kind started after it that succeeded at once. */
  recoveryMs(at: number): Record<string, number | null> {
    const out: Record<string, number | null> = {};
    for (const kind of ["stream", "background create", "file upload"] as const) {
      const first = this.ops.find((o) => o.kind === kind && o.ok && o.attempts === 1 && o.start >= at);
      out[kind] = first ? first.end - at : null;
    }
    return out;
  }

  /** Waits for every accepted item to be final and checks it: nothing lost, no duplicate. */
  async losses(client: OpenAI, timeoutMs = 60_000): Promise<LossFigures> {
    const deadline = Date.now() + timeoutMs;
    const statuses: Record<string, number> = {};
    const reasons: string[] = [];
    for (const id of this.backgroundIds) {
      let status = "";
      for (;;) {
        const r = await client.responses.retrieve(id).catch((e: unknown) => ({ status: `error ${String(e).slice(0, 60)}`, error: null }));
        status = r.status ?? "";
        if (status === "failed") reasons.push(`background ${id} failed: ${JSON.stringify(r.error)}`);
        if (["completed", "incomplete", "failed", "cancelled"].includes(status) || Date.now() > deadline) break;
        await new Promise((r) => setTimeout(r, 250));
      }
      statuses[status] = (statuses[status] ?? 0) + 1;
    }
    let batchLinesMissing = this.batchLines;
    let batchDuplicates = 0;
    if (this.batch) {
      const final = await retried(() => waitForBatch(client, this.batch!.id, Math.max(1_000, deadline - Date.now())), deadline).catch((e: unknown) => String(e).slice(0, 200));
      if (typeof final === "string") reasons.push(final);
      else if (final.status !== "completed") reasons.push(`batch ${this.batch.id}: ${final.status}`);
      else
        try {
          const { output, seen } = await retried(() => batchResults(client, final), deadline);
          batchLinesMissing = this.batchLines - new Set(output.map((l) => l.custom_id)).size;
          batchDuplicates = [...seen.values()].reduce((n, c) => n + c - 1, 0);
        } catch (err) {
          reasons.push(`batch ${this.batch.id} results: ${String(err).slice(0, 120)}`);
        }
    }
    let filesLost = 0;
    for (const f of this.files) {
      const body = await retried(() => client.files.content(f.id).then((r) => r.arrayBuffer()), deadline).catch((e: unknown) => String(e).slice(0, 120));
      if (typeof body === "string") reasons.push(`file ${f.id}: ${body}`);
      else if (createHash("sha256").update(Buffer.from(body)).digest("hex") !== f.sha256) reasons.push(`file ${f.id}: ${body.byteLength} bytes, other contents`);
      else continue;
      filesLost++;
    }
    for (const [status, n] of Object.entries(statuses)) if (status !== "completed" && status !== "incomplete") reasons.push(`${n} background responses ${status}`);
    return {
      backgroundAccepted: this.backgroundIds.length,
      backgroundLost: this.backgroundIds.length - (statuses.completed ?? 0) - (statuses.incomplete ?? 0),
      backgroundStatuses: statuses,
      batchLines: this.batchLines,
      batchLinesMissing,
      batchDuplicates,
      filesAccepted: this.files.length,
      filesLost,
      reasons,
    };
  }

  /** One streamed chat completion; a stream that neither ends nor errs within its timeout throws "hung". */
  private async stream(client: OpenAI): Promise<void> {
    const timeoutMs = this.options.streamTimeoutMs ?? 20_000;
    const s = await client.chat.completions.create(
      { model: TEST_MODEL, messages: [{ role: "user", content: "go" }], max_tokens: this.options.maxTokens ?? 100, stream: true },
      { signal: AbortSignal.timeout(timeoutMs) },
    );
    try {
      let finish: string | null = null;
      for await (const chunk of s) finish = chunk.choices[0]?.finish_reason ?? finish;
      if (finish !== "length") throw new Error(`stream ended without finish_reason (${finish})`);
      this.streamOutcomes.push({ outcome: "finished", end: Date.now() });
    } catch (err) {
      if ((err as Error).name === "AbortError" || /abort|timed? ?out/i.test(String(err))) throw new Error(`stream hung past its timeout (${timeoutMs} ms)`);
      this.streamOutcomes.push({ outcome: "error event", end: Date.now() });
    }
  }

  private async queueBackground(client: OpenAI): Promise<void> {
    const r = await client.responses.create({ model: TEST_MODEL, input: "go", background: true, max_output_tokens: 60 });
    this.backgroundIds.push(r.id);
  }

  private async upload(client: OpenAI): Promise<void> {
    const content = Buffer.from(`file ${this.fileSeq++} `.repeat(5_000));
    const file = await client.files.create({ file: await toFile(content, "data.txt"), purpose: "user_data" });
    this.files.push({ id: file.id, sha256: createHash("sha256").update(content).digest("hex") });
  }
}

/**
 * `read()`, again every 250 ms while it fails, until `deadline`: a read that fails while the
 * cluster still elects leaders (a healed partition) is not a loss; one that fails to the end is.
 */
async function retried<T>(read: () => Promise<T>, deadline: number): Promise<T> {
  // Past the deadline nothing more is read (a gateway that hangs every read would take 20 s each).
  if (Date.now() > deadline) throw new Error("not read before the deadline");
  for (;;) {
    try {
      return await read();
    } catch (err) {
      if (Date.now() > deadline) throw err;
      await new Promise((r) => setTimeout(r, 250));
    }
  }
}

/** Whether every kind of request of the load succeeded at its first attempt after `at` (the cluster serves again). */
export function servedSince(load: MixedLoad, at: number): boolean {
  return Object.values(load.recoveryMs(at)).every((ms) => ms !== null);
}

export interface TrackedStream {
  chunks: number;
  /** From the request to its first chunk with content (undefined: none came). */
  ttftMs?: number;
  outcome?: "finished" | "error" | "hung";
  error?: string;
  endedAt: number;
  done: Promise<void>;
}

/** One streamed completion, tracked as it goes: its chunks so far, and how it ended ("hung": not within `timeoutMs`). */
export function trackedStream(client: OpenAI, prompt: string, options: { maxTokens: number; timeoutMs: number }): TrackedStream {
  const s: TrackedStream = { chunks: 0, endedAt: 0, done: Promise.resolve() };
  const start = performance.now();
  s.done = (async () => {
    try {
      const stream = await client.chat.completions.create(
        { model: TEST_MODEL, messages: [{ role: "user", content: prompt }], max_tokens: options.maxTokens, stream: true },
        { signal: AbortSignal.timeout(options.timeoutMs) },
      );
      let finish: string | null = null;
      for await (const chunk of stream) {
        s.chunks++;
        if (s.ttftMs === undefined && chunk.choices[0]?.delta?.content) s.ttftMs = performance.now() - start;
        finish = chunk.choices[0]?.finish_reason ?? finish;
      }
      s.outcome = finish === "length" ? "finished" : "error";
      if (s.outcome === "error") s.error = `ended without finish_reason (${finish})`;
    } catch (err) {
      s.error = String(err).slice(0, 200);
      s.outcome = (err as Error).name === "AbortError" || /abort|timed? ?out/i.test(s.error) ? "hung" : "error";
    }
    s.endedAt = Date.now();
  })();
  return s;
}

/**
 * The cluster tests' one check that nothing accepted was lost or ran twice: every background
 * response ran to its end (at least `minBackground` were accepted), the batch completed every
 * line once, and every accepted file reads back whole (else the gateways' last error records say why).
 */
export function checkNothingLost(t: Test, losses: LossFigures, options: { minBackground: number; errorRecords: () => unknown[] }): void {
  t.comment(JSON.stringify(losses));
  t.ok(losses.backgroundAccepted >= options.minBackground, `${losses.backgroundAccepted} background responses accepted`);
  t.equal(losses.backgroundLost, 0, "each background response ran to its end");
  t.equal(losses.batchLinesMissing, 0, "the batch completed every line");
  t.equal(losses.batchDuplicates, 0, "no batch line twice");
  t.ok(losses.filesAccepted > 0, `${losses.filesAccepted} files accepted`);
  t.equal(losses.filesLost, 0, "each file reads back whole", { gatewayErrors: options.errorRecords() });
}

/** The gateways' last error records (why a file did not read back). */
export function gatewayErrors(cluster: { gateways: ReadonlyArray<{ logs: Array<Record<string, unknown>> }> }): unknown[] {
  return cluster.gateways.flatMap((g) => g.logs.filter((r) => r.level === "error")).slice(-5);
}
