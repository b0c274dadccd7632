import t from "tap";
import type { NatsConnection } from "@nats-io/transport-node";
import { FinishReason, RunnerEventBatch, RunnerEvent } from "../../proto/gen/tributary/v1/inference.js";
import { Outbox } from "../../lib/nats/outbox.js";
import { createLogger } from "../../lib/log.js";
import { ReplyPublisher } from "../../runners/reply-publisher.js";

// What a runner sends for one request when its deltas are coalesced (a non-streamed reply, a
// batch line): the first token alone as soon as it is made, so that the gateway times it as it
// times a stream's, and the rest of each choice as one delta when the choice ends.

function publisher(coalesce: boolean) {
  const sent: Uint8Array[] = [];
  const nc = { publish: (_subject: string, data: Uint8Array) => void sent.push(data) } as unknown as NatsConnection;
  const outbox = new Outbox(nc);
  const reply = new ReplyPublisher(outbox, "reply.g1.req", "req", "r1", createLogger("test"), () => {}, coalesce, "batch.g1");
  /** The events sent so far (what the outbox had queued goes out first). */
  const events = (): RunnerEvent[] => {
    outbox.flush();
    return sent.splice(0).flatMap((m) => RunnerEventBatch.decode(m).events);
  };
  return { reply, events };
}

const deltaOf = (e: RunnerEvent) => (e.event?.$case === "delta" ? e.event.value : undefined);

t.test("coalesced: the first token goes out alone at once, the rest of the choice when it ends", async (t) => {
  const { reply, events } = publisher(true);
  reply.delta(0, "Once", 1);
  const first = events();
  t.same(first.map((e) => [e.seq, deltaOf(e)?.text, deltaOf(e)?.tokens]), [[1, "Once", 1]], "the first token, before the choice ends");
  reply.delta(0, " upon", 1);
  reply.delta(0, " a", 1);
  reply.delta(0, " time", 1);
  t.same(events(), [], "later tokens are held");
  reply.choiceEnd(0, FinishReason.FINISH_REASON_STOP, 4);
  reply.final(3, 4);
  const rest = events();
  t.same(rest.map((e) => [e.seq, e.event?.$case]), [[2, "delta"], [3, "choiceEnd"], [4, "final"]]);
  t.equal(deltaOf(rest[0]!)?.text, " upon a time", "one delta for the rest of the choice");
  t.equal(deltaOf(rest[0]!)?.tokens, 3);
});

t.test("coalesced with two choices: only the request's first token goes alone", async (t) => {
  const { reply, events } = publisher(true);
  reply.delta(1, "B1", 1);
  reply.delta(0, "A1", 1);
  reply.delta(1, "B2", 1);
  t.same(events().map((e) => [e.seq, deltaOf(e)?.choiceIndex, deltaOf(e)?.text]), [[1, 1, "B1"]]);
  reply.choiceEnd(0, FinishReason.FINISH_REASON_STOP, 1);
  reply.choiceEnd(1, FinishReason.FINISH_REASON_STOP, 2);
  const texts = events().flatMap((e) => (deltaOf(e) ? [[deltaOf(e)!.choiceIndex, deltaOf(e)!.text]] : []));
  t.same(texts, [[0, "A1"], [1, "B2"]], "each choice's text, added to what went before, is whole");
});

t.test("coalesced: a reply that starts with a tool call sends the call's first fragment alone", async (t) => {
  const { reply, events } = publisher(true);
  reply.toolCall(0, { index: 0, id: "call_1", name: "get_weather", arguments: "" });
  const first = events();
  t.same(first.map((e) => deltaOf(e)?.toolCalls.map((c) => [c.id, c.name])), [[["call_1", "get_weather"]]]);
  reply.toolCall(0, { index: 0, id: "", name: "", arguments: '{"city":' });
  reply.toolCall(0, { index: 0, id: "", name: "", arguments: '"Paris"}' });
  t.same(events(), [], "later fragments are held");
  reply.choiceEnd(0, FinishReason.FINISH_REASON_TOOL_CALLS, 5);
  const held = events().map(deltaOf).find((d) => d !== undefined);
  t.same(held?.toolCalls.map((c) => [c.index, c.arguments]), [[0, '{"city":"Paris"}']], "the arguments, merged, for the same call");
});

t.test("coalesced: a choice started over (preempted) takes back the first token it sent", async (t) => {
  const { reply, events } = publisher(true);
  reply.delta(0, "Once", 1);
  reply.delta(0, " upon", 1);
  reply.choiceReset(0);
  reply.delta(0, "Twice", 1);
  reply.delta(0, " more", 1);
  reply.choiceEnd(0, FinishReason.FINISH_REASON_STOP, 2);
  const kinds = events().map((e) => (e.event?.$case === "delta" ? `delta ${e.event.value.text}` : e.event?.$case));
  t.same(kinds, ["delta Once", "choiceReset", "delta Twice more", "choiceEnd"], "the rerun's output whole after the reset, nothing of the first run");
});

t.test("not coalesced: every token goes as it comes", async (t) => {
  const { reply, events } = publisher(false);
  reply.delta(0, "Once", 1);
  reply.delta(0, " upon", 1);
  t.same(events().map((e) => deltaOf(e)?.text), ["Once", " upon"]);
});

t.test("every event sent can be sent again from a sequence number on, as it was sent", async (t) => {
  const { reply, events } = publisher(false);
  reply.delta(0, "Once", 1);
  reply.delta(0, " upon", 1);
  reply.toolCall(0, { index: 0, id: "call_1", name: "f", arguments: "{" });
  reply.choiceEnd(0, FinishReason.FINISH_REASON_STOP, 2);
  t.equal(reply.sent.endedAt, 0, "still running");
  reply.final(3, 2);
  t.ok(reply.sent.endedAt > 0, "ended when the final was sent");
  const sent = events();
  t.same(reply.sent.from(1), sent, "all of them, identical to what went out (the text deltas' scratch buffer was reused meanwhile)");
  t.same(reply.sent.from(3), sent.slice(2), "from seq 3 on");
  t.same(reply.sent.from(6), [], "nothing past the last");
  const firstTwo = reply.sent.from(1, RunnerEvent.encode(sent[0]!).finish().length + RunnerEvent.encode(sent[1]!).finish().length);
  t.same(firstTwo, sent.slice(0, 2), "at most the bytes asked for, whole events from the first on");
  t.same(reply.sent.from(2, 1), sent.slice(1, 2), "and always at least one");
});

t.test("a long history is kept whole: events of every size, past the buffer's first room", async (t) => {
  const { reply, events } = publisher(false);
  // Short tokens, a piece longer than 127 bytes (a two-byte length) and one far past the buffer's start size.
  const pieces = [...Array.from({ length: 600 }, (_, i) => ` w${i}`), "x".repeat(200), "é".repeat(5000), " end"];
  for (const p of pieces) reply.delta(0, p, 1);
  reply.final(1, pieces.length);
  const sent = events();
  t.same(reply.sent.from(1), sent, "all of them, as they went out");
  t.same(reply.sent.from(601), sent.slice(600), "from after the short ones on");
  t.same(reply.sent.from(pieces.length + 2), [], "nothing past the final");
});
