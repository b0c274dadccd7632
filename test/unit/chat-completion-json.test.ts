import t from "tap";
import { ChatCompletionAccumulator, usageJson, usageObject } from "../../modules/openai/mod.js";

// The hand-written JSON of a reassembled chat completion (a logged stream's trace holds it) is
// exactly JSON.stringify of the completion object, whatever the choices hold.

const usage = { promptTokens: 5, completionTokens: 7, cachedPromptTokens: 2 };

t.test("toCompletionJson is JSON.stringify(toCompletion)", async (t) => {
  const cases: Array<[string, (acc: ChatCompletionAccumulator) => void, number]> = [
    ["no output", () => {}, 1],
    ["text with quotes, newlines and non-ASCII", (a) => a.delta({ choiceIndex: 0, text: 'say "hi"\n\té 🐉 \u0001', toolCalls: [], tokens: 3 }), 1],
    ["two choices, one finished", (a) => {
      a.delta({ choiceIndex: 1, text: "b", toolCalls: [], tokens: 1 });
      a.choiceEnd({ choiceIndex: 1, finishReason: 2, completionTokens: 1 });
    }, 2],
    ["tool calls without text (content null)", (a) => {
      a.delta({ choiceIndex: 0, text: "", toolCalls: [{ index: 0, id: "call_1", name: "get", arguments: '{"q":' }], tokens: 1 });
      a.delta({ choiceIndex: 0, text: "", toolCalls: [{ index: 0, id: "", name: "", arguments: '"x"}' }], tokens: 1 });
      a.choiceEnd({ choiceIndex: 0, finishReason: 3, completionTokens: 2 });
    }, 1],
    ["text and tool calls, a sparse call index", (a) => {
      a.delta({ choiceIndex: 0, text: "calling", toolCalls: [{ index: 1, id: "call_2", name: "f", arguments: "{}" }], tokens: 1 });
    }, 1],
  ];
  for (const [name, feed, n] of cases) {
    for (const u of [usage, undefined]) {
      const acc = new ChatCompletionAccumulator(n);
      feed(acc);
      t.equal(acc.toCompletionJson("chatcmpl-\"x\"", 1_700_000_000, "test/m\u00e9", u), JSON.stringify(acc.toCompletion("chatcmpl-\"x\"", 1_700_000_000, "test/m\u00e9", u)), `${name}${u ? "" : ", no usage"}`);
    }
  }
});

t.test("usageJson is JSON.stringify(usageObject)", async (t) => {
  t.equal(usageJson(usage), JSON.stringify(usageObject(usage)));
  t.equal(usageJson(undefined), JSON.stringify(usageObject(undefined)));
});
