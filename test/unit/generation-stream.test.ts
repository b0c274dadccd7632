import t from "tap";
import { GenerationStream, type GenerationListener, type StreamOwner } from "../../modules/inference/mod.js";
import { RunnerLost, StreamInterrupted, type DomainError } from "../../modules/errors/mod.js";
import { FinishReason, type RunnerEvent } from "../../proto/gen/tributary/v1/inference.js";

// The gateway's end of one generation, driven with scripted runner events: what its listener
// hears, in which order, and what it asks of its owner (release, cancel).

const delta = (seq: number, text: string, choiceIndex = 0): RunnerEvent => ({
  requestId: "req_1", seq, runnerId: "r1", event: { $case: "delta", value: { choiceIndex, text, toolCalls: [], tokens: 1 } },
});
const choiceEnd = (seq: number, choiceIndex = 0): RunnerEvent => ({
  requestId: "req_1", seq, runnerId: "r1", event: { $case: "choiceEnd", value: { choiceIndex, finishReason: FinishReason.FINISH_REASON_STOP, completionTokens: 2 } },
});
const reset = (seq: number, choiceIndex = 0): RunnerEvent => ({ requestId: "req_1", seq, runnerId: "r1", event: { $case: "choiceReset", value: { choiceIndex } } });
const final = (seq: number): RunnerEvent => ({
  requestId: "req_1", seq, runnerId: "r1", event: { $case: "final", value: { usage: { promptTokens: 5, completionTokens: 2, cachedPromptTokens: 0 }, error: undefined } },
});

/** A stream with its owner's side recorded: what it released and what it asked to cancel. */
function scripted() {
  const owner = { released: 0, cancels: [] as Array<{ requestId: string; model: string; runnerId: string | undefined }>, gaps: [] as Array<[number, number]> };
  const stream = new GenerationStream("req_1", "m/x", {
    release: () => owner.released++,
    cancel: (requestId, model, runnerId) => owner.cancels.push({ requestId, model, runnerId }),
  } satisfies StreamOwner);
  // The client's reaction to a gap: the stream cannot be trusted any more.
  const onGap = (s: GenerationStream, expected: number, got: number) => {
    owner.gaps.push([expected, got]);
    s.abandon(new StreamInterrupted({ message: "lost messages" }));
  };
  const send = (...events: RunnerEvent[]) => events.forEach((e) => stream.receive(e, onGap));
  return { stream, owner, send };
}

/** A listener that writes down what it hears, one line per call. */
function recorder(): GenerationListener & { heard: string[] } {
  const heard: string[] = [];
  return {
    heard,
    delta: (d) => heard.push(`delta ${d.choiceIndex} ${d.text}`),
    choiceEnd: (e) => heard.push(`end ${e.choiceIndex}`),
    choiceReset: (i) => heard.push(`reset ${i}`),
    final: (f) => heard.push(`final ${f.usage?.completionTokens}`),
    failure: (e: DomainError) => heard.push(`failure ${e._tag}`),
  };
}

const admitted = { runnerId: "r1", promptTokens: 5, maxTokens: 16, queuePosition: 0 };

t.test("events reach the listener in order; the final event ends and releases the stream", async (t) => {
  const { stream, owner, send } = scripted();
  const l = recorder();
  stream.listen(l);
  send(delta(1, "Once"), delta(2, " upon"), reset(3), delta(4, "Once"), choiceEnd(5), final(6));
  t.same(l.heard, ["delta 0 Once", "delta 0  upon", "reset 0", "delta 0 Once", "end 0", "final 2"]);
  t.ok(stream.done);
  t.equal(owner.released, 1);
  t.same(owner.cancels, [], "a finished stream cancels nothing");
  send(delta(7, "late"));
  stream.fail(new RunnerLost({ message: "gone" }));
  t.equal(l.heard.length, 6, "nothing is heard after the end");
  t.equal(owner.released, 1, "released once");
});

t.test("events that arrive before the listener attaches are delivered, in order, when it does", async (t) => {
  const { stream, send } = scripted();
  send(delta(1, "a"), delta(2, "b"), choiceEnd(3));
  const l = recorder();
  stream.listen(l);
  t.same(l.heard, ["delta 0 a", "delta 0 b", "end 0"]);
  send(final(4));
  t.same(l.heard.at(-1), "final 2", "later events go straight through");
});

t.test("a failure before the listener attaches comes after the events that preceded it", async (t) => {
  const { stream, owner, send } = scripted();
  send(delta(1, "a"));
  stream.fail(new RunnerLost({ message: "gone" }));
  t.equal(owner.released, 1);
  const l = recorder();
  stream.listen(l);
  t.same(l.heard, ["delta 0 a", "failure RunnerLost"]);
});

t.test("a duplicate is dropped; a gap stops the stream and the runner", async (t) => {
  const { stream, owner, send } = scripted();
  stream.admitted = admitted;
  const l = recorder();
  stream.listen(l);
  send(delta(1, "a"), delta(1, "a"), delta(2, "b"));
  t.same(l.heard, ["delta 0 a", "delta 0 b"], "the repeated event 1 was heard once");
  send(delta(4, "d"));
  t.same(owner.gaps, [[3, 4]], "the gap is reported with the sequence expected and the one received");
  t.same(l.heard, ["delta 0 a", "delta 0 b", "failure StreamInterrupted"], "event 4 is not delivered: the stream fails instead");
  t.same(owner.cancels, [{ requestId: "req_1", model: "m/x", runnerId: "r1" }], "the runner that admitted it is told to stop");
  send(delta(3, "c"), final(5));
  t.equal(l.heard.length, 3, "the late event 3 changes nothing");
});

t.test("a gap is repaired: later events wait, the resent ones fill it, and all are heard in order", async (t) => {
  const gaps: Array<[number, number, boolean]> = [];
  const stream = new GenerationStream("req_1", "m/x", { release: () => {}, cancel: () => {} });
  const onGap = (_: GenerationStream, expected: number, got: number, repairable: boolean) => void gaps.push([expected, got, repairable]);
  const l = recorder();
  stream.listen(l);
  stream.receive(delta(1, "a"), onGap);
  stream.receive(delta(4, "d"), onGap);
  stream.receiveDelta(5, { choiceIndex: 0, text: "e", toolCalls: [], tokens: 1 }, onGap, 0);
  t.same(gaps, [[2, 4, true]], "one gap reported while its repair is under way");
  t.same(l.heard, ["delta 0 a"], "nothing after the gap is heard yet");
  t.equal(stream.nextSeq, 2, "a resend starts where the stream waits");
  // The runner sends again what it kept from 2 on: 2 and 3 fill the gap, 4 and 5 are duplicates.
  t.ok(stream.resent([delta(2, "b"), delta(3, "c"), delta(4, "d"), delta(5, "e")]), "no gap is left");
  stream.receive(choiceEnd(6), onGap);
  stream.receive(final(7), onGap);
  t.same(l.heard, ["delta 0 a", "delta 0 b", "delta 0 c", "delta 0 d", "delta 0 e", "end 0", "final 2"]);
  t.ok(stream.done);
});

t.test("a resend that does not reach the held-back events leaves the gap: the client asks again", async (t) => {
  const stream = new GenerationStream("req_1", "m/x", { release: () => {}, cancel: () => {} });
  const gaps: number[] = [];
  const onGap = (_: GenerationStream, expected: number) => void gaps.push(expected);
  const l = recorder();
  stream.listen(l);
  stream.receive(delta(1, "a"), onGap);
  stream.receive(delta(5, "e"), onGap);
  t.notOk(stream.resent([delta(2, "b")]), "3 and 4 still missing");
  t.equal(stream.nextSeq, 3);
  stream.receive(delta(6, "f"), onGap);
  t.same(gaps, [2], "no new report while the repair goes on");
  t.ok(stream.resent([delta(3, "c"), delta(4, "d")]));
  t.same(l.heard, ["delta 0 a", "delta 0 b", "delta 0 c", "delta 0 d", "delta 0 e", "delta 0 f"]);
});

t.test("a resend that arrives after the tail was lost ends the stream with its final", async (t) => {
  const stream = new GenerationStream("req_1", "m/x", { release: () => {}, cancel: () => {} });
  const l = recorder();
  stream.listen(l);
  stream.receive(delta(1, "a"), () => t.fail("no gap"));
  // Events 2 and 3 (the final) were lost; the quiet stream's runner sends them again.
  t.ok(stream.resent([delta(2, "b"), final(3)]));
  t.same(l.heard, ["delta 0 a", "delta 0 b", "final 2"]);
  t.ok(stream.done);
});

t.test("fail ends the stream once, with the error, and cancels nothing", async (t) => {
  const { stream, owner } = scripted();
  stream.admitted = admitted;
  const l = recorder();
  stream.listen(l);
  stream.fail(new RunnerLost({ message: "silent" }));
  stream.fail(new RunnerLost({ message: "again" }));
  stream.abandon(new RunnerLost({ message: "again" }));
  t.same(l.heard, ["failure RunnerLost"]);
  t.equal(owner.released, 1);
  t.same(owner.cancels, []);
});

t.test("cancel ends the stream silently and stops the runner; before admission, every runner of the model", async (t) => {
  const admittedStream = scripted();
  admittedStream.stream.admitted = admitted;
  const l = recorder();
  admittedStream.stream.listen(l);
  admittedStream.stream.cancel();
  t.same(l.heard, [], "the listener hears nothing: the client is gone");
  t.equal(admittedStream.owner.released, 1);
  t.same(admittedStream.owner.cancels, [{ requestId: "req_1", model: "m/x", runnerId: "r1" }]);

  // Abandoned while the admission reply was on its way: the runner is not known yet.
  const early = scripted();
  early.stream.abandon(new StreamInterrupted({ message: "x" }));
  t.same(early.owner.cancels, [{ requestId: "req_1", model: "m/x", runnerId: undefined }], "the cancel goes to the model's runners");
  // The admission arrives after all: the client sends the cancel again, to the runner that took it.
  early.stream.admitted = admitted;
  early.stream.sendCancel();
  t.same(early.owner.cancels.at(-1), { requestId: "req_1", model: "m/x", runnerId: "r1" });
});

t.test("sendCancel does nothing for a stream nobody cancelled", async (t) => {
  const { stream, owner, send } = scripted();
  stream.admitted = admitted;
  stream.listen(recorder());
  send(final(1));
  stream.sendCancel();
  t.same(owner.cancels, []);
});
