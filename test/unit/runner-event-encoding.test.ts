import t from "tap";
import type { NatsConnection } from "@nats-io/transport-node";
import { RunnerEvent, RunnerEventBatch } from "../../proto/gen/tributary/v1/inference.js";
import { encodeTextDelta } from "../../runners/reply-publisher.js";
import { Outbox } from "../../lib/nats/outbox.js";

// The runner's hand-encoded hot path must be byte-for-byte what the generated code writes, and
// a packed outbox message must decode as the RunnerEventBatch the gateway expects.

const generated = (seq: number, choiceIndex: number, text: string, tokens: number) =>
  RunnerEvent.encode({ requestId: "", seq, runnerId: "", event: { $case: "delta", value: { choiceIndex, text, toolCalls: [], tokens } } }).finish();

t.test("a text delta encodes exactly as ts-proto encodes it", async (t) => {
  const cases: Array<[number, number, string, number]> = [
    [1, 0, "Once", 1],
    [127, 0, " upon", 1],
    [128, 3, "a time", 2],
    [300_000, 200, "é☃😀 mixed\nlines", 0],
    [2 ** 40, 0, "", 1],
    [5, 1, "x".repeat(20_000), 17],
    [0, 0, "", 0],
  ];
  for (const [seq, choiceIndex, text, tokens] of cases)
    t.same(Buffer.from(encodeTextDelta(seq, choiceIndex, text, tokens)), Buffer.from(generated(seq, choiceIndex, text, tokens)), `seq ${seq}, choice ${choiceIndex}, ${text.length} chars, ${tokens} tokens`);
});

t.test("packed events decode as one RunnerEventBatch, in order, with the constant fields joined", async (t) => {
  const sent: Array<{ subject: string; data: Uint8Array }> = [];
  const nc = { publish: (subject: string, data: Uint8Array) => void sent.push({ subject, data }) } as unknown as NatsConnection;
  const outbox = new Outbox(nc);
  const head = (requestId: string) => RunnerEvent.encode({ requestId, seq: 0, runnerId: "r1", event: undefined }).finish();
  outbox.publishPacked("batch.g1", head("a"), encodeTextDelta(1, 0, "Hello", 1));
  outbox.publishPacked("batch.g1", head("b"), encodeTextDelta(1, 0, "x".repeat(300), 1));
  outbox.publishPacked("batch.g1", head("a"), generated(2, 0, " world", 1), true);
  t.equal(sent.length, 1, "one message for the three events");
  t.equal(sent[0]!.subject, "batch.g1");
  const events = RunnerEventBatch.decode(sent[0]!.data).events;
  t.same(events.map((e) => [e.requestId, e.runnerId, e.seq, e.event?.$case === "delta" ? e.event.value.text.length : -1]), [
    ["a", "r1", 1, 5],
    ["b", "r1", 1, 300],
    ["a", "r1", 2, 6],
  ]);
});

t.test("a packed message is cut at its size bound; nothing is lost or reordered", async (t) => {
  const sent: Uint8Array[] = [];
  const nc = { publish: (_subject: string, data: Uint8Array) => void sent.push(data) } as unknown as NatsConnection;
  const outbox = new Outbox(nc);
  const head = RunnerEvent.encode({ requestId: "req", seq: 0, runnerId: "r1", event: undefined }).finish();
  const count = 40;
  for (let seq = 1; seq <= count; seq++) outbox.publishPacked("batch.g1", head, encodeTextDelta(seq, 0, "y".repeat(16 * 1024), 1));
  outbox.flush();
  t.ok(sent.length > 1, `cut into ${sent.length} messages`);
  for (const m of sent) t.ok(m.length <= 256 * 1024 + 17 * 1024, `a message of ${m.length} bytes stays near the bound`);
  const seqs = sent.flatMap((m) => RunnerEventBatch.decode(m).events.map((e) => e.seq));
  t.same(seqs, Array.from({ length: count }, (_, i) => i + 1));
});

t.test("an element given as the start of a reused buffer is copied when queued", async (t) => {
  const sent: Uint8Array[] = [];
  const nc = { publish: (_subject: string, data: Uint8Array) => void sent.push(data) } as unknown as NatsConnection;
  const outbox = new Outbox(nc);
  const head = RunnerEvent.encode({ requestId: "req", seq: 0, runnerId: "r1", event: undefined }).finish();
  const scratch = new Uint8Array(64);
  for (let seq = 1; seq <= 3; seq++) {
    const body = encodeTextDelta(seq, 0, `t${seq}`, 1);
    scratch.fill(0xff);
    scratch.set(body);
    outbox.publishPacked("batch.g1", head, scratch, false, body.length);
  }
  scratch.fill(0);
  outbox.flush();
  t.equal(sent.length, 1);
  t.same(RunnerEventBatch.decode(sent[0]!).events.map((e) => [e.seq, e.event?.$case === "delta" ? e.event.value.text : ""]), [[1, "t1"], [2, "t2"], [3, "t3"]]);
});
