import t from "tap";
import { GenerateRequest, HeldQuery, HeldReply, ResendQuery, ResendReply, RunnerEvent, RunnerHeartbeat, RunnerHeartbeat_State as State, Admission } from "../../../proto/gen/tributary/v1/inference.js";
import { GenerationClient, RunnerDirectory, type GenerationStream } from "../../../modules/inference/mod.js";
import type { DomainError } from "../../../modules/errors/mod.js";
import { subjects } from "../../../lib/nats/subjects.js";
import { createLogger } from "../../../lib/log.js";
import { startNats } from "../../harness/processes.js";

// A runner that keeps sending heartbeats but whose stream lost its last events (core NATS drops
// messages across a server failover) must not leave the request waiting forever: the quiet
// stream asks the runner which requests it still holds; for one it no longer holds, it asks for
// the lost events (ResendQuery) and ends with them, or, when the runner no longer has them, as
// interrupted. A request the runner still holds (queued, or a long prefill) keeps waiting.
// The runner here is scripted over a real nats-server, with the runner's and gateway's own
// NATS identities, so the new subject's permissions are exercised too.

const MODEL = "test/scripted";
const RUNNER_ID = "scripted-runner";
const RUNNER_TIMEOUT_MS = 600;

const nats = await startNats();
t.teardown(() => nats.stop());
const runnerNc = await nats.connect("runner");
const gatewayNc = await nats.connect("gateway");
t.teardown(async () => {
  await runnerNc.close();
  await gatewayNc.close();
});

// The scripted runner: admits everything, sends one delta and never the final; it "holds" only
// requests whose id starts with "held-".
let heldQueries = 0;
const beat = () =>
  runnerNc.publish(
    subjects.heartbeat(MODEL),
    RunnerHeartbeat.encode({ runnerId: RUNNER_ID, model: MODEL, state: State.STATE_READY, slotsTotal: 4, slotsBusy: 0, queueLength: 0, queueLimit: 8, sentUnixMs: Date.now(), intervalMs: 100, detail: "", batchRunning: 0, batchQueueLength: 0 }).finish(),
  );
const beats = setInterval(beat, 100);
t.teardown(() => clearInterval(beats));
runnerNc.subscribe(subjects.runnerGenerate(RUNNER_ID), {
  callback: (_err, msg) => {
    const request = GenerateRequest.decode(msg.data);
    msg.respond(Admission.encode({ result: { $case: "accepted", value: { runnerId: RUNNER_ID, promptTokens: 3, queuePosition: 0, maxTokens: 8, droppedMessages: 0, renderedPrompt: "" } } }).finish());
    runnerNc.publish(
      request.replySubject,
      RunnerEvent.encode({ requestId: request.requestId, seq: 1, runnerId: RUNNER_ID, event: { $case: "delta", value: { choiceIndex: 0, text: "Once", toolCalls: [], tokens: 1 } } }).finish(),
    );
  },
});
runnerNc.subscribe(subjects.runnerHeld(RUNNER_ID), {
  callback: (_err, msg) => {
    heldQueries++;
    const ids = HeldQuery.decode(msg.data).requestIds;
    msg.respond(HeldReply.encode({ heldRequestIds: ids.filter((id) => id.startsWith("held-")) }).finish());
  },
});
// It kept the events of requests whose id starts with "kept-": asked, it sends the lost ones
// (a second delta and the final) again; of others it has nothing.
const resendQueries: Array<{ requestId: string; fromSeq: number }> = [];
runnerNc.subscribe(subjects.runnerResend(RUNNER_ID), {
  callback: (_err, msg) => {
    const { requestId, fromSeq } = ResendQuery.decode(msg.data);
    resendQueries.push({ requestId, fromSeq });
    if (!requestId.startsWith("kept-")) {
      msg.respond(ResendReply.encode({ kept: false, events: [] }).finish());
      return;
    }
    const events: RunnerEvent[] = [
      { requestId, seq: 2, runnerId: RUNNER_ID, event: { $case: "delta", value: { choiceIndex: 0, text: " upon", toolCalls: [], tokens: 1 } } },
      { requestId, seq: 3, runnerId: RUNNER_ID, event: { $case: "final", value: { usage: { promptTokens: 3, completionTokens: 2, cachedPromptTokens: 0 }, error: undefined, queueWaitMs: 0 } } },
    ];
    msg.respond(ResendReply.encode({ kept: true, events: events.filter((e) => e.seq >= fromSeq) }).finish());
  },
});
runnerNc.subscribe(subjects.runnerCancel(RUNNER_ID), { callback: () => {} });
await runnerNc.flush();

const directory = new RunnerDirectory(gatewayNc, RUNNER_TIMEOUT_MS);
directory.start();
const client = new GenerationClient(gatewayNc, directory, { gatewayId: "gw-test", admissionTimeoutMs: 2_000, runnerTimeoutMs: RUNNER_TIMEOUT_MS }, createLogger("test"));
client.start();
t.teardown(() => {
  client.stop();
  directory.stop();
});
while (directory.candidates(MODEL).length === 0) await new Promise((r) => setTimeout(r, 20));

function watch(stream: GenerationStream) {
  const seen = { deltas: 0, failure: undefined as DomainError | undefined, final: false };
  stream.listen({
    delta: () => void seen.deltas++,
    choiceEnd: () => {},
    final: () => void (seen.final = true),
    failure: (err) => void (seen.failure = err),
  });
  return seen;
}

const request = (requestId: string) =>
  GenerateRequest.fromPartial({ requestId, model: MODEL, messages: [{ role: "user", content: "Once" }], sampling: { maxTokens: 8 } });

t.test("a request its runner no longer holds ends as interrupted; one it holds keeps waiting", async (t) => {
  const lost = watch(await client.generate(request("lost-1")));
  const held = watch(await client.generate(request("held-1")));
  // Quiet for the runner timeout (600 ms), then two answers in a row (checks every 150 ms).
  const deadline = Date.now() + 10_000;
  while (!lost.failure && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  t.equal(lost.deltas, 1, "the delta that came was delivered");
  t.equal(lost.failure?._tag, "StreamInterrupted", "the stream whose end was lost ends as interrupted (a caller may run it again)");
  t.notOk(lost.final);
  // The held one has been through the same number of answers and is still open.
  const queriesSoFar = heldQueries;
  while (heldQueries < queriesSoFar + 3 && Date.now() < deadline + 5_000) await new Promise((r) => setTimeout(r, 50));
  t.ok(heldQueries >= 2, `the runner was asked (${heldQueries} queries)`);
  t.equal(held.failure, undefined, "a request the runner still holds is not ended");
  t.equal(held.deltas, 1);
});

t.test("a request its runner no longer holds, but whose events it kept, ends with the events it resends", async (t) => {
  const kept = watch(await client.generate(request("kept-1")));
  const deadline = Date.now() + 10_000;
  while (!kept.final && !kept.failure && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  t.equal(kept.failure, undefined, "not interrupted");
  t.ok(kept.final, "the lost final came with the resend");
  t.equal(kept.deltas, 2, "and the lost delta before it");
  t.same(resendQueries.find((q) => q.requestId === "kept-1"), { requestId: "kept-1", fromSeq: 2 }, "asked from the first event it missed");
});
