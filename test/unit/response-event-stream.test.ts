import t from "tap";
import { DeltaFrames, ResponseEventStream } from "../../gateway/sse/response-event-stream.js";
import { sseEvent } from "../../gateway/sse/sse-writer.js";
import { RecordedSseOutput } from "../harness/recorded-sse-output.js";
import { FunctionCallArgumentsDelta, OutputTextDelta, ResponseOutputBuilder, type ResponseEvent } from "../../modules/openai/mod.js";
import { FinishReason } from "../../proto/gen/tributary/v1/inference.js";

// The Responses event stream, driven with scripted events; its output is the exact bytes an SSE
// client receives, recorded write by write, with the socket's backpressure played by hand. Text
// deltas take a framing path of their own (no JSON.stringify of the event): their bytes must be
// those JSON.stringify of the event object gives.


/** The event as ResponseOutputBuilder built it before it became a class: an object literal. */
const literalArguments = (itemId: string, outputIndex: number, delta: string) =>
  ({ type: "response.function_call_arguments.delta", item_id: itemId, output_index: outputIndex, delta });
const literalDelta = (itemId: string, outputIndex: number, contentIndex: number, delta: string) =>
  ({ type: "response.output_text.delta", item_id: itemId, output_index: outputIndex, content_index: contentIndex, delta, logprobs: [] });
/** What the stream wrote for any event before text deltas had their own path. */
const stringified = (e: ResponseEvent, sequenceNumber: number) => sseEvent(e.type, JSON.stringify({ ...e, sequence_number: sequenceNumber }));

/** Deterministic strings of random UTF-16 code units from the ranges JSON escaping treats differently. */
function randomStrings(count: number): string[] {
  let seed = 0x2545f491;
  const next = () => ((seed = (seed * 1103515245 + 12345) >>> 0) >>> 8) / (1 << 24);
  const ranges: Array<[number, number]> = [[0, 0x1f], [0x20, 0x7e], [0x7f, 0x9f], [0xa0, 0x7ff], [0x800, 0xd7ff], [0xd800, 0xdbff], [0xdc00, 0xdfff], [0xe000, 0xffff], [0x2028, 0x2029]];
  return Array.from({ length: count }, () => {
    let s = "";
    const length = Math.floor(next() * 12);
    for (let i = 0; i < length; i++) {
      const [lo, hi] = ranges[Math.floor(next() * ranges.length)]!;
      s += String.fromCharCode(lo + Math.floor(next() * (hi - lo + 1)));
    }
    return s;
  });
}

const SAMPLES = [
  "", " ", "Once", " upon a time", "\"", "\\", "\\\"", "\"\\\"", "/", "</script>", "\n", "\r\n", "\t", "\b\f", "\u0000", "\u0001\u001f", "\u007f",
  "\u2028", "\u2029", "a\u2028b\u2029c", "é", "日本語", "😀", "\ud83d\ude00\ud83d\ude01", "\ud83d", "\ude00", "x\ud800", "\udfffx", "\ude00\ud83d",
  "\ufeff", "\uffff", "\ufffd", "{\"delta\":\"x\"}", "event: x\ndata: y\n\n", "data: [DONE]", "a".repeat(10_000),
  ...Array.from({ length: 0x80 }, (_, c) => String.fromCharCode(c)),
  ...randomStrings(2_000),
];

t.test("a delta's frame (text or arguments) is byte for byte what JSON.stringify of the event gave, for any text", async (t) => {
  const frames = new DeltaFrames();
  const parts: Array<[string, number, number]> = [["msg_abc", 0, 0], ["msg_def", 1, 0], ["msg_def", 1, 2], ["msg_\"q\\u\u2028😀\ud800", 12, 0], ["msg_def", 1, 0]];
  let mismatches = 0;
  let checked = 0;
  for (const [p, [itemId, outputIndex, contentIndex]] of parts.entries())
    for (const [i, text] of SAMPLES.entries()) {
      const sequenceNumber = [0, 1, 9, 10, 99_999, 2 ** 31, Number.MAX_SAFE_INTEGER][(i + p) % 7]!;
      const fast = frames.frame(new OutputTextDelta(itemId, outputIndex, contentIndex, text), sequenceNumber);
      const expected = stringified(literalDelta(itemId, outputIndex, contentIndex, text), sequenceNumber);
      checked++;
      if (fast !== expected && mismatches++ < 5) t.equal(fast, expected, `text ${JSON.stringify(text)}`);
    }
  for (const [p, [itemId, outputIndex]] of parts.entries())
    for (const [i, text] of SAMPLES.entries()) {
      const sequenceNumber = [0, 1, 9, 10, 99_999, 2 ** 31, Number.MAX_SAFE_INTEGER][(i + p) % 7]!;
      const fast = frames.frame(new FunctionCallArgumentsDelta(itemId, outputIndex, text), sequenceNumber);
      const expected = stringified(literalArguments(itemId, outputIndex, text), sequenceNumber);
      checked++;
      if (fast !== expected && mismatches++ < 5) t.equal(fast, expected, `arguments ${JSON.stringify(text)}`);
    }
  t.equal(mismatches, 0, `all ${checked} frames identical`);
  t.equal(frames.frame({ type: "response.output_text.done", item_id: "msg_a", text: "x" }, 0), undefined, "other events take the general path");
  t.equal(JSON.stringify(new OutputTextDelta("msg_a", 0, 0, "x")), JSON.stringify(literalDelta("msg_a", 0, 0, "x")), "the class stringifies as the literal did");
  t.equal(JSON.stringify({ ...new OutputTextDelta("msg_a", 0, 0, "x") }), JSON.stringify(literalDelta("msg_a", 0, 0, "x")), "and so does a spread of it");
  t.equal(JSON.stringify(new FunctionCallArgumentsDelta("fc_a", 1, "{}")), JSON.stringify(literalArguments("fc_a", 1, "{}")));
});

t.test("the bytes of a short answer, numbered from 0", async (t) => {
  const out = new RecordedSseOutput(100_000);
  const stream = new ResponseEventStream(out, { onOverflow: () => t.fail("no overflow") });
  stream.event({ type: "response.created", response: { id: "resp_1" } });
  stream.event(new OutputTextDelta("msg_1", 0, 0, "Once"));
  stream.event(new OutputTextDelta("msg_1", 0, 0, " \"upon\"\n"));
  stream.event({ type: "response.completed", response: { id: "resp_1" } });
  t.same(out.writes, [
    `event: response.created\ndata: {"type":"response.created","response":{"id":"resp_1"},"sequence_number":0}\n\n`,
    `event: response.output_text.delta\ndata: {"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":"Once","logprobs":[],"sequence_number":1}\n\n`,
    `event: response.output_text.delta\ndata: {"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":" \\"upon\\"\\n","logprobs":[],"sequence_number":2}\n\n`,
    `event: response.completed\ndata: {"type":"response.completed","response":{"id":"resp_1"},"sequence_number":3}\n\n`,
  ]);
  t.ok(out.ended);
  t.same(out.holds, [], "nothing was held, so the writer is never told");
});

t.test("a whole response through the builder, with the client falling behind: every frame is JSON.stringify's, numbers consecutive, deltas merged", async (t) => {
  const out = new RecordedSseOutput(100_000);
  const stream = new ResponseEventStream(out, { onOverflow: () => t.fail("no overflow") });
  const emitted: ResponseEvent[] = [];
  const builder = new ResponseOutputBuilder((e) => {
    emitted.push(e);
    stream.event(e);
  });
  const call = (index: number, args: string, id = "") => ({ choiceIndex: 0, text: "", tokens: 1, toolCalls: [{ index, id, name: id ? "f" : "", arguments: args }] });
  const texts = SAMPLES.slice(0, 300);
  stream.event({ type: "response.created", response: { id: "resp_1" } });
  for (const [i, text] of texts.entries()) {
    if (i % 50 === 10) out.fillUp();
    if (i % 50 === 30) out.catchUp();
    builder.delta({ choiceIndex: 0, text, tokens: 1, toolCalls: [] });
  }
  out.fillUp();
  builder.delta(call(0, "{\"a\":", "call_1"));
  builder.delta(call(0, "1}"));
  builder.delta({ choiceIndex: 0, text: "after", tokens: 1, toolCalls: [] });
  out.catchUp();
  builder.delta(call(1, "{\"b\"", "call_2"));
  builder.delta(call(1, ":2}"));
  builder.end(FinishReason.FINISH_REASON_LENGTH);
  stream.event({ type: "response.incomplete", response: { id: "resp_1" } });

  const events = out.namedEvents;
  t.same(events.map((e) => e.sequence_number), events.map((_, i) => i), "sequence numbers 0, 1, 2, ... in order");
  const reserialized = events.map((e) => sseEvent(e.type as string, JSON.stringify(e)));
  t.same(out.frames, reserialized, "each frame is JSON.stringify of its event, keys in the event's order");
  t.ok(events.every((e) => Object.keys(e).at(0) === "type" && Object.keys(e).at(-1) === "sequence_number"), "type first, sequence_number last");
  const deltas = events.filter((e) => e.type === "response.output_text.delta");
  t.ok(deltas.length < emitted.filter((e) => e.type === "response.output_text.delta").length, "deltas merged while the client was behind");
  t.equal(deltas.filter((e) => e.item_id === events[2]!.item_id).map((e) => e.delta).join(""), texts.filter(Boolean).join(""), "every byte of the text, in order");
  const notDeltas = (types: unknown[]) => types.filter((type) => !String(type).endsWith(".delta"));
  t.same(notDeltas(events.map((e) => e.type)), ["response.created", ...notDeltas(emitted.map((e) => e.type)), "response.incomplete"], "every other event, in order");
  const argumentDeltas = events.filter((e) => e.type === "response.function_call_arguments.delta").map((e) => e.delta);
  t.same(argumentDeltas, ["{\"a\":1}", "{\"b\"", ":2}"], "a call's arguments merged while behind, one event each once caught up");
  const emittedDeltas = emitted.filter((e): e is OutputTextDelta => e instanceof OutputTextDelta);
  t.same(emittedDeltas.map((e) => e.delta), texts.filter(Boolean).concat("after"), "a merge leaves the emitted events as they were");
  t.ok(out.holds.length > 0 && out.holds.at(-1) === 0, "held output reported, then released");
});

t.test("a replay keeps the stored numbers and bytes, and merges nothing", async (t) => {
  const out = new RecordedSseOutput(100_000);
  const stream = new ResponseEventStream(out, { onOverflow: () => t.fail("no overflow"), numbered: true });
  const stored = [
    { ...literalDelta("msg_1", 0, 0, "a"), sequence_number: 7 },
    { ...literalDelta("msg_1", 0, 0, "b"), sequence_number: 8 },
    { type: "response.completed", response: { id: "resp_1" }, sequence_number: 9 },
  ];
  stream.event(stored[0]!);
  out.fillUp();
  stream.event(stored[1]!);
  out.catchUp();
  stream.event(stored[2]!);
  t.same(out.frames, stored.map((e) => sseEvent(e.type, JSON.stringify(e))));
});

t.test("a client that stays behind past its budget is dropped and the generation stopped", async (t) => {
  const out = new RecordedSseOutput(1_000);
  let overflows = 0;
  const stream = new ResponseEventStream(out, { onOverflow: () => overflows++ });
  stream.event(new OutputTextDelta("msg_1", 0, 0, "first"));
  out.fillUp();
  for (let i = 0; i < 100 && !out.dropped; i++) stream.event(new OutputTextDelta("msg_1", 0, 0, "0123456789"));
  t.ok(out.dropped);
  t.equal(overflows, 1);
  stream.event(new OutputTextDelta("msg_1", 0, 0, "late"));
  t.equal(out.writes.length, 1, "nothing after the drop");
});

t.test("text deltas with logprobs: framed by JSON.stringify, and merged with their logprobs while the client is behind", async (t) => {
  const out = new RecordedSseOutput(100_000);
  const stream = new ResponseEventStream(out, { onOverflow: () => t.fail("no overflow") });
  const builder = new ResponseOutputBuilder((e) => stream.event(e));
  const token = (text: string, logprob: number) => ({ bytes: Buffer.from(text), logprob, top: [{ bytes: Buffer.from(text), logprob, top: [] }] });
  const delta = (text: string, logprob: number) => ({ choiceIndex: 0, text, tokens: 1, toolCalls: [], logprobs: { tokens: [token(text, logprob)] } });
  stream.event({ type: "response.created", response: { id: "resp_1" } });
  builder.delta(delta("Once", -0.5));
  out.fillUp();
  builder.delta(delta(" upon", -1));
  builder.delta(delta(" a", -0.25));
  out.catchUp();
  builder.end(FinishReason.FINISH_REASON_STOP);
  const deltas = out.namedEvents.filter((e) => e.type === "response.output_text.delta");
  t.same(deltas.map((e) => [e.delta, (e.logprobs as Array<{ token: string }>).map((l) => l.token)]), [["Once", ["Once"]], [" upon a", [" upon", " a"]]], "merged text, merged logprobs");
  t.same(out.frames, out.namedEvents.map((e) => sseEvent(e.type as string, JSON.stringify(e))), "each frame is JSON.stringify of its event");
  const done = out.namedEvents.find((e) => e.type === "response.output_text.done")!;
  t.same((done.logprobs as Array<{ token: string; logprob: number; bytes: number[] }>).map((l) => [l.token, l.logprob, l.bytes.length]), [["Once", -0.5, 4], [" upon", -1, 5], [" a", -0.25, 2]]);
  const partDone = out.namedEvents.find((e) => e.type === "response.content_part.done")!;
  t.equal((partDone.part as { logprobs: unknown[] }).logprobs.length, 3, "the part holds every token's logprobs");
  const partAdded = out.namedEvents.find((e) => e.type === "response.content_part.added")!;
  t.same((partAdded.part as { logprobs: unknown[] }).logprobs, [], "the part as added: none yet (a copy, not the live part)");
});
