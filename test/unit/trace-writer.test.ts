import t from "tap";
import type { JetStreamClient } from "@nats-io/jetstream";
import { buildTrace, readTraceMessage, RequestObservation, TraceWriter, traceSchema, type Trace } from "../../modules/traces/mod.js";
import { createLogger } from "../../lib/log.js";

// The trace writer's flush: every buffered trace stored once and in order, serialized a slice at a
// time with the event loop free between slices (a full buffer serialized at one go would stall
// every stream of the process), and a full buffer dropping (and counting) instead of growing.

/** A stand-in for the JetStream client: records what is published, acks at once. */
function fakeStream() {
  const published: Array<{ subject: string; ids: string[]; afterTurns: number }> = [];
  let turns = 0;
  // Counts event-loop turns: a setImmediate chain that runs while the flush is under way.
  let ticking = true;
  const tick = () => {
    turns++;
    if (ticking) setImmediate(tick);
  };
  setImmediate(tick);
  const js = {
    publish: async (subject: string, payload: Uint8Array) => {
      published.push({ subject, ids: readTraceMessage(payload)!.records.map((x) => traceSchema.decode("t", x).request_id), afterTurns: turns });
      return { stream: "t", seq: published.length, duplicate: false };
    },
  } as unknown as JetStreamClient;
  return { js, published, stop: () => (ticking = false) };
}

function traces(n: number, responseChars: number): Trace[] {
  const obs = new RequestObservation("/v1/chat/completions", "req_0", Date.now(), 0);
  obs.model = "m";
  const base = buildTrace(obs, { principal: { organizationId: "o", projectId: "p", keyId: "key_1" }, httpStatus: 200, clientLeft: false, maxBodyBytes: 100 });
  return Array.from({ length: n }, (_, i) => ({ ...base, request_id: `req_${i}`, response: { ...base.response, text: "x".repeat(responseChars) } }));
}

t.test("a large flush is stored whole, in order, in slices with the event loop free between them", async (t) => {
  const stream = fakeStream();
  const writer = new TraceWriter(stream.js, { maxBuffered: 10_000, maxBufferedBytes: 64 * 1024 * 1024, flushMs: 60_000 }, createLogger("test"));
  // 400 traces of ~60 KB: about 24 MB to serialize, far more than one slice.
  const all = traces(400, 60_000);
  for (const trace of all) writer.record(trace);
  await writer.flush();
  stream.stop();
  t.same(stream.published.flatMap((m) => m.ids), all.map((x) => x.request_id), "every trace once, in order");
  t.equal(writer.written, 400);
  t.equal(writer.dropped, 0);
  const turnsSeen = new Set(stream.published.map((m) => m.afterTurns));
  t.ok(turnsSeen.size > 1, "published over several event-loop turns, not in one piece");
  t.equal(writer.buffered, 0);
});

t.test("a small flush goes out in one piece", async (t) => {
  const stream = fakeStream();
  const writer = new TraceWriter(stream.js, { maxBuffered: 10_000, maxBufferedBytes: 64 * 1024 * 1024, flushMs: 60_000 }, createLogger("test"));
  for (const trace of traces(10, 100)) writer.record(trace);
  await writer.flush();
  stream.stop();
  t.equal(stream.published.length, 1, "ten small traces of one subject: one message");
  t.equal(writer.written, 10);
});

t.test("past the buffer's bound, traces are dropped and counted, not buffered", async (t) => {
  const stream = fakeStream();
  const writer = new TraceWriter(stream.js, { maxBuffered: 5, maxBufferedBytes: 64 * 1024 * 1024, flushMs: 60_000 }, createLogger("test", { quiet: true }));
  for (const trace of traces(6, 100)) writer.record(trace);
  t.equal(writer.buffered, 5, "at the bound: kept");
  t.equal(writer.dropped, 1, "one past: dropped");
  await writer.flush();
  stream.stop();
  t.equal(writer.written, 5);
});

t.test("past the byte bound, traces are dropped and counted; what was kept is all written", async (t) => {
  const stream = fakeStream();
  const writer = new TraceWriter(stream.js, { maxBuffered: 10_000, maxBufferedBytes: 100 * 1024, flushMs: 60_000 }, createLogger("test", { quiet: true }));
  // ~20 KB each: a few fit 100 KiB of message buffers, the rest do not.
  const all = traces(20, 20_000);
  for (const trace of all) writer.record(trace);
  const kept = writer.buffered;
  t.ok(kept >= 3 && kept < 20, `some kept (${kept})`);
  t.equal(writer.dropped, 20 - kept, "the rest dropped and counted");
  await writer.flush();
  stream.stop();
  t.same(stream.published.flatMap((m) => m.ids), all.slice(0, kept).map((x) => x.request_id), "the kept ones, in order");
  // Once written, the buffer takes traces again.
  writer.record(all[0]!);
  t.equal(writer.buffered, 1);
});
