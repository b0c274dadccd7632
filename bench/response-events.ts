// CPU per `response.output_text.delta` event in the gateway: the Responses stream's framing of a
// token (event object -> ResponseEventStream -> SSE bytes), before and after text deltas got
// their own path (a per-part prefix with only the delta JSON-escaped, no copy, no queue), in
// one process, same token texts, alternating rounds.
//
//   npm run build && node dist/bench/response-events.js [--rounds 8] [--events 300000]
//
// "before" is the stream as it was (kept below, verbatim but for its name) fed the object literal
// the builder emitted; "after" is gateway/sse/response-event-stream.ts fed OutputTextDelta. The
// writer stands for the socket: it takes the frames and measures their UTF-8 length (uWS encodes
// every string it writes, so a lazily built string is paid for in both). Writes
// bench/results/response-events.md.

import { parseArgs } from "node:util";
import { loadavg } from "node:os";
import { continuesDelta, OutputTextDelta, RESPONSE_DELTA_EVENTS, RESPONSE_TERMINAL_EVENTS, type ResponseEvent, type ResponseEventSink } from "../modules/openai/mod.js";
import { ResponseEventStream } from "../gateway/sse/response-event-stream.js";
import { sseEvent, type SseOutput } from "../gateway/sse/sse-writer.js";
import { fmt, percentile } from "./lib/stats.js";
import { machineLine, markdownTable, writeResults } from "./lib/table.js";

const { values: args } = parseArgs({
  options: {
    rounds: { type: "string", default: "8" },
    events: { type: "string", default: "300000" },
    out: { type: "string", default: "response-events.md" },
  },
});
const ROUNDS = Number(args.rounds);
const EVENTS = Number(args.events);

/** The stream before this change (its baseline). */
class BaselineResponseEventStream implements ResponseEventSink {
  private sequence = 0;
  private pending: ResponseEvent[] = [];
  private pendingBytes = 0;
  private ended = false;

  constructor(private readonly writer: SseOutput, private readonly options: { onOverflow: () => void; numbered?: boolean }) {
    writer.onDrain(() => this.flush());
  }

  event(event: ResponseEvent): void {
    if (this.ended || this.writer.closed) return;
    const last = this.pending.at(-1);
    if (last && !this.options.numbered && continuesDelta(last, event)) {
      last.delta = (last.delta as string) + (event.delta as string);
      this.pendingBytes += (event.delta as string).length;
    } else {
      this.pending.push({ ...event });
      this.pendingBytes += RESPONSE_DELTA_EVENTS.has(event.type) ? 128 + (event.delta as string).length : 512;
    }
    if (RESPONSE_TERMINAL_EVENTS.has(event.type)) {
      this.ended = true;
      this.writer.end(this.frames());
      return;
    }
    if (this.writer.writable) return this.flush();
    this.writer.hold(this.pendingBytes);
    if (this.writer.overLimit) {
      this.ended = true;
      this.pending = [];
      this.options.onOverflow();
      this.writer.drop();
    }
  }

  private flush(): void {
    if (this.ended || this.writer.closed || this.pending.length === 0) return;
    this.writer.write(this.frames());
  }

  private frames(): string {
    let out = "";
    for (const e of this.pending)
      out += sseEvent(e.type, JSON.stringify(this.options.numbered ? e : { ...e, sequence_number: this.sequence++ }));
    this.pending = [];
    this.pendingBytes = 0;
    this.writer.hold(0);
    return out;
  }
}

/** The socket: always writable; counts the UTF-8 bytes of what it is given. */
class CountingOutput implements SseOutput {
  bytes = 0;
  readonly writable = true;
  readonly closed = false;
  readonly overLimit = false;
  onDrain(): void {}
  write(frames: string): boolean {
    this.bytes += Buffer.byteLength(frames);
    return true;
  }
  end(finalFrames = ""): void {
    this.bytes += Buffer.byteLength(finalFrames);
  }
  hold(): void {}
  drop(): void {}
}

// Token texts like a model's: word pieces, punctuation, a newline, a quote, some non-ASCII.
const TOKENS = [" the", " of", "ing", " and", ",", " a", " to", ".", "\n", " in", " was", " \"", "ed", " he", " é", "s", " that", "日本", " it", "'s", " 😀", " with", "\\", " for"];
const ITEM_ID = "msg_6a1f0c2e9b8d4f7a8c3e5b1d0f2a4c6e";

type Variant = "before" | "after";

/** CPU ns per event of one round. */
function round(variant: Variant): { nsPerEvent: number; bytes: number } {
  const out = new CountingOutput();
  const stream = variant === "before" ? new BaselineResponseEventStream(out, { onOverflow: () => {} }) : new ResponseEventStream(out, { onOverflow: () => {} });
  const start = process.cpuUsage();
  if (variant === "before")
    for (let i = 0; i < EVENTS; i++)
      stream.event({ type: "response.output_text.delta", item_id: ITEM_ID, output_index: 0, content_index: 0, delta: TOKENS[i % TOKENS.length]!, logprobs: [] });
  else for (let i = 0; i < EVENTS; i++) stream.event(new OutputTextDelta(ITEM_ID, 0, 0, TOKENS[i % TOKENS.length]!));
  const used = process.cpuUsage(start);
  return { nsPerEvent: ((used.user + used.system) * 1000) / EVENTS, bytes: out.bytes };
}

const loadStart = loadavg()[0]!;
round("before");
round("after"); // warm-up of both
const results: Record<Variant, number[]> = { before: [], after: [] };
let bytes: Record<Variant, number> = { before: 0, after: 0 };
for (let r = 0; r < ROUNDS; r++) {
  const order: Variant[] = r % 2 === 0 ? ["before", "after"] : ["after", "before"];
  for (const v of order) {
    const { nsPerEvent, bytes: b } = round(v);
    results[v].push(nsPerEvent);
    bytes = { ...bytes, [v]: b };
    process.stderr.write(`${JSON.stringify({ round: r, variant: v, nsPerEvent: Number(nsPerEvent.toFixed(1)) })}\n`);
  }
}
const loadEnd = loadavg()[0]!;
const median = (v: Variant) => percentile(results[v], 50);
const best = (v: Variant) => Math.min(...results[v]);

writeResults(args.out!, "CPU per response.output_text.delta event (gateway framing, in process)", [
  machineLine(),
  `${ROUNDS} alternating rounds of ${EVENTS.toLocaleString("en")} text delta events each (after a warm-up round of each), one event per token, the client keeping up. CPU is the process's user+system time (process.cpuUsage) per event. Bytes written per round: before ${bytes.before}, after ${bytes.after} (${bytes.before === bytes.after ? "identical" : "DIFFERENT"}).`,
  markdownTable(["variant", "CPU ns per event, median", "best", "all rounds"], (["before", "after"] as Variant[]).map((v) => [v, fmt(median(v)), fmt(best(v)), results[v].map((n) => fmt(n, 0)).join(", ")])),
  `After / before (median): **${fmt(median("after") / median("before"), 2)}** (${fmt(median("before") - median("after"))} ns less per token).`,
  `Load average (1 min) at the start and the end: ${loadStart.toFixed(1)}, ${loadEnd.toFixed(1)} (2 CPUs shared with other work: rounds alternate so that drift falls on both alike).`,
  `Command: \`npm run build && node dist/bench/response-events.js --rounds ${ROUNDS} --events ${EVENTS}\``,
]);
