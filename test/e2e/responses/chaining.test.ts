import t from "tap";
import type OpenAI from "openai";
import { sharedStack } from "../../harness/shared-stack.js";
import { TEST_MODEL } from "../../harness/processes.js";
import { expectApiError } from "./helpers.js";

// previous_response_id: each turn continues from the stored inputs and outputs of the chain.
// The rebuilt prompt is checked exactly: the same conversation sent statelessly, as items,
// costs the same number of input tokens.
const stack = await sharedStack(t);
const create = (body: OpenAI.Responses.ResponseCreateParamsNonStreaming) => stack.client.responses.create({ model: TEST_MODEL, max_output_tokens: 20, ...body });
const replay = (r: OpenAI.Responses.Response) => r.output as unknown as OpenAI.Responses.ResponseInputItem[];

t.test("three turns chained with previous_response_id", async (t) => {
  const r1 = await create({ input: "My cat is called Tom." });
  const r2 = await create({ input: "What does Tom like?", previous_response_id: r1.id });
  const r3 = await create({ input: "And where does he sleep?", previous_response_id: r2.id });
  t.equal(r2.previous_response_id, r1.id);
  t.equal(r3.previous_response_id, r2.id);
  t.ok(r2.usage!.input_tokens > r1.usage!.input_tokens + r1.usage!.output_tokens / 2, "turn 2 sees turn 1");
  t.ok(r3.usage!.input_tokens > r2.usage!.input_tokens + r2.usage!.output_tokens / 2, "turn 3 sees turns 1 and 2");

  const stateless = await create({
    store: false,
    input: [
      { role: "user", content: "My cat is called Tom." },
      ...replay(r1),
      { role: "user", content: "What does Tom like?" },
      ...replay(r2),
      { role: "user", content: "And where does he sleep?" },
    ],
  });
  t.equal(r3.usage!.input_tokens, stateless.usage!.input_tokens, "the chain rebuilds exactly the earlier turns, in order");

  const items = await stack.client.responses.inputItems.list(r3.id, { order: "asc" });
  t.equal(items.data.length, 1, "input_items lists the turn's own input");
});

t.test("instructions are not carried over to the next turn", async (t) => {
  const instructions = "You are a helpful assistant who always speaks about cats and dogs and birds in the garden. ".repeat(4);
  const r1 = await create({ input: "Hello", instructions });
  t.equal(r1.instructions, instructions);
  const without = await create({ input: "Again", previous_response_id: r1.id });
  const withAgain = await create({ input: "Again", previous_response_id: r1.id, instructions });
  t.equal(without.instructions, null);
  t.ok(withAgain.usage!.input_tokens - without.usage!.input_tokens > 40, "only the turn that gives instructions pays for them");
});

t.test("a chain whose middle response was deleted continues without it", async (t) => {
  const r1 = await create({ input: "First turn of a chain." });
  const r2 = await create({ input: "Second turn of the chain.", previous_response_id: r1.id });
  const r3 = await create({ input: "Third.", previous_response_id: r2.id });
  await stack.client.responses.delete(r2.id);
  const r4 = await create({ input: "Fourth.", previous_response_id: r3.id });
  const expected = await create({
    store: false,
    input: [{ role: "user", content: "First turn of a chain." }, ...replay(r1), { role: "user", content: "Third." }, ...replay(r3), { role: "user", content: "Fourth." }],
  });
  t.equal(r4.usage!.input_tokens, expected.usage!.input_tokens);
});

t.test("previous_response_id and conversation cannot be combined", async (t) => {
  const r1 = await create({ input: "x" });
  await expectApiError(t, create({ input: "y", previous_response_id: r1.id, conversation: "conv_123" }), { status: 400, param: "previous_response_id" });
});
