import t from "tap";
import { buildTrace, RequestObservation } from "../../modules/traces/mod.js";
import { ChatCompletionAccumulator } from "../../modules/openai/mod.js";
import type { GenerationListener } from "../../modules/inference/mod.js";

// A logged stream's trace holds the completion its events add up to, rebuilt by the observation
// as the events pass. A choiceReset (a preempted choice starting over) drops what the choice had:
// the trace holds the text of the run that finished, not both runs glued together.

const principal = { organizationId: "o", projectId: "p", keyId: "key_1" };
const usage = { promptTokens: 3, completionTokens: 2, cachedPromptTokens: 0 };

function loggedStream() {
  const obs = new RequestObservation("/v1/chat/completions", "req_r", Date.now(), performance.now());
  obs.model = "m";
  obs.log = true;
  obs.stream = true;
  const whole = new ChatCompletionAccumulator(2);
  obs.reassembly = whole;
  obs.responseOf = () => whole.toCompletionJson("chatcmpl-r", 1, "m", usage);
  // As the chat route's chain has it (the usage meter's wrap passes choiceReset on).
  const inner: GenerationListener = { delta() {}, choiceEnd() {}, choiceReset() {}, final() {}, failure() {} };
  return { obs, listener: obs.wrap(inner) };
}

const contents = (obs: RequestObservation) =>
  (JSON.parse(buildTrace(obs, { principal, httpStatus: 200, clientLeft: false, maxBodyBytes: 10_000 }).response.text) as { choices: Array<{ message: { content: string | null } }> }).choices.map(
    (c) => c.message.content,
  );

t.test("the stream's events reassembled into the completion", async (t) => {
  const { obs, listener } = loggedStream();
  listener.delta({ choiceIndex: 0, text: "Once", toolCalls: [], tokens: 1 });
  listener.delta({ choiceIndex: 1, text: "A \"quoted\" tale", toolCalls: [], tokens: 1 });
  listener.delta({ choiceIndex: 0, text: " upon", toolCalls: [], tokens: 1 });
  listener.choiceEnd({ choiceIndex: 0, finishReason: 2, completionTokens: 2 });
  listener.choiceEnd({ choiceIndex: 1, finishReason: 2, completionTokens: 1 });
  listener.final({ usage, error: undefined, queueWaitMs: 0 });
  t.same(contents(obs), ["Once upon", 'A "quoted" tale']);
});

t.test("a choiceReset drops what the choice had: the trace holds the run that finished", async (t) => {
  const { obs, listener } = loggedStream();
  listener.delta({ choiceIndex: 0, text: "first run", toolCalls: [], tokens: 1 });
  listener.delta({ choiceIndex: 1, text: "kept", toolCalls: [], tokens: 1 });
  listener.choiceReset!(0);
  listener.delta({ choiceIndex: 0, text: "second run", toolCalls: [], tokens: 1 });
  listener.choiceEnd({ choiceIndex: 0, finishReason: 2, completionTokens: 1 });
  listener.choiceEnd({ choiceIndex: 1, finishReason: 2, completionTokens: 1 });
  listener.final({ usage, error: undefined, queueWaitMs: 0 });
  t.same(contents(obs), ["second run", "kept"], "choice 0 from its second run only; choice 1 untouched");
});
