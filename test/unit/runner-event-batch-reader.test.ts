import t from "tap";
import { FinishReason, RunnerEvent, RunnerEventBatch } from "../../proto/gen/tributary/v1/inference.js";
import { MalformedBatch, readRunnerEventBatch } from "../../modules/inference/event-batch-reader.js";
import { encodeTextDelta } from "../../runners/reply-publisher.js";
import { Outbox } from "../../lib/nats/outbox.js";
import type { NatsConnection } from "@nats-io/transport-node";

// The gateway reads text deltas of a RunnerEventBatch by hand: whatever the bytes, it must hand
// over exactly the events the generated decoder finds, in order.

function read(bytes: Uint8Array): RunnerEvent[] {
  const events: RunnerEvent[] = [];
  readRunnerEventBatch(bytes, {
    delta: (requestId, seq, runnerId, delta) => events.push({ requestId, seq, runnerId, event: { $case: "delta", value: delta } }),
    event: (event) => events.push(event),
  });
  return events;
}

const delta = (requestId: string, seq: number, text: string, extra: { choiceIndex?: number; tokens?: number; runnerId?: string } = {}): RunnerEvent => ({
  requestId,
  seq,
  runnerId: extra.runnerId ?? "runner-1",
  event: { $case: "delta", value: { choiceIndex: extra.choiceIndex ?? 0, text, toolCalls: [], tokens: extra.tokens ?? 1 } },
});

t.test("every kind of event reads as the generated decoder reads it", async (t) => {
  const events: RunnerEvent[] = [
    delta("req_a", 1, "Once"),
    delta("req_b", 1, " upon", { runnerId: "runner-2" }),
    delta("req_a", 2, "é☃😀 \"quoted\"\n", { choiceIndex: 3, tokens: 0 }),
    delta("req_c", 2 ** 40, ""),
    delta("", 0, "x".repeat(5000), { tokens: 300 }),
    { requestId: "req_a", seq: 3, runnerId: "runner-1", event: { $case: "delta", value: { choiceIndex: 0, text: "", toolCalls: [{ index: 0, id: "call_1", name: "f", arguments: "{}" }], tokens: 1 } } },
    // Logprobs and reasoning: fields the hand reader leaves to the generated decoder.
    { requestId: "req_a", seq: 3, runnerId: "runner-1", event: { $case: "delta", value: { choiceIndex: 0, text: " on", toolCalls: [], tokens: 1, logprobs: { tokens: [{ bytes: Uint8Array.of(0x20, 0x6f, 0x6e), logprob: -0.5, top: [{ bytes: Uint8Array.of(0xe2, 0x80), logprob: -1.25, top: [] }] }] } } } },
    { requestId: "req_a", seq: 3, runnerId: "runner-1", event: { $case: "delta", value: { choiceIndex: 1, text: "", toolCalls: [], tokens: 2, reasoning: "Let me think." } } },
    { requestId: "req_a", seq: 4, runnerId: "runner-1", event: { $case: "choiceEnd", value: { choiceIndex: 0, finishReason: FinishReason.FINISH_REASON_LENGTH, completionTokens: 4 } } },
    { requestId: "req_a", seq: 5, runnerId: "runner-1", event: { $case: "choiceReset", value: { choiceIndex: 1 } } },
    { requestId: "req_a", seq: 6, runnerId: "runner-1", event: { $case: "final", value: { usage: { promptTokens: 3, completionTokens: 4, cachedPromptTokens: 0 }, error: undefined, queueWaitMs: 2 } } },
    { requestId: "req_d", seq: 1, runnerId: "", event: undefined },
  ];
  const bytes = RunnerEventBatch.encode({ events }).finish();
  t.same(read(bytes), RunnerEventBatch.decode(bytes).events);
  t.same(read(new Uint8Array(0)), [], "an empty batch holds no event");
});

t.test("the runner's packed bytes (fields in the order it writes them) read back", async (t) => {
  const sent: Uint8Array[] = [];
  const outbox = new Outbox({ publish: (_s: string, data: Uint8Array) => void sent.push(data) } as unknown as NatsConnection);
  const head = (requestId: string) => RunnerEvent.encode({ requestId, seq: 0, runnerId: "r1", event: undefined }).finish();
  outbox.publishPacked("b", head("a"), encodeTextDelta(1, 0, "Hello", 1));
  outbox.publishPacked("b", head("b"), encodeTextDelta(7, 2, "wörld", 2));
  outbox.flush();
  t.same(read(sent[0]!), RunnerEventBatch.decode(sent[0]!).events);
  t.same(read(sent[0]!).map((e) => [e.requestId, e.runnerId, e.seq]), [["a", "r1", 1], ["b", "r1", 7]]);
});

t.test("a field the reader does not know goes through the generated decoder", async (t) => {
  const frame = Buffer.concat([Buffer.from(RunnerEvent.encode(delta("req_a", 1, "hi")).finish()), Buffer.from([0x48, 0x05])]); // field 9, varint 5
  const bytes = Buffer.concat([Buffer.from([0x0a, frame.length]), frame]);
  t.same(read(bytes), RunnerEventBatch.decode(bytes).events);
});

t.test("bytes that are not a batch throw MalformedBatch", async (t) => {
  const thrown = (bytes: number[]) => {
    try {
      read(Buffer.from(bytes));
      return undefined;
    } catch (err) {
      return err;
    }
  };
  t.ok(thrown([0x12, 0x01, 0x00]) instanceof MalformedBatch, "another field");
  t.ok(thrown([0x0a, 0x05, 0x0a]) instanceof MalformedBatch, "an event cut short");
  t.ok(thrown([0x0a, 0x02, 0x0a, 0x09]) instanceof MalformedBatch, "a string past its event's end");
});
