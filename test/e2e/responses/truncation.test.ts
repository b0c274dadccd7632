import t from "tap";
import type OpenAI from "openai";
import { sharedStack } from "../../harness/shared-stack.js";
import { TEST_MODEL } from "../../harness/processes.js";
import { expectApiError } from "./helpers.js";

// truncation: "disabled" (the default) refuses an input longer than the context with a clear
// error; "auto" drops the oldest turns, keeping instructions, until input and max_output_tokens
// fit the model's 2048-token context, and the runner accepts the result.
const stack = await sharedStack(t);
const CONTEXT = 2048;
const OUTPUT = 100;
const sentence = "The little cat went to the big park to play with the red ball and her friends. ";
const turn = (i: number): OpenAI.Responses.ResponseInputItem[] => [
  { role: "user", content: `Turn ${i}. ${sentence.repeat(3)}` },
  { role: "assistant", content: sentence.repeat(3) },
];
const history = (n: number) => Array.from({ length: n }, (_, i) => turn(i)).flat();
const last: OpenAI.Responses.ResponseInputItem = { role: "user", content: "What happened next?" };
const create = (body: Partial<OpenAI.Responses.ResponseCreateParamsNonStreaming>) =>
  stack.client.responses.create({ model: TEST_MODEL, max_output_tokens: OUTPUT, store: false, ...body } as OpenAI.Responses.ResponseCreateParamsNonStreaming);

t.test("an input too long for the context is a 400 with truncation disabled", async (t) => {
  await expectApiError(t, create({ input: [...history(30), last] }), { status: 400, code: "context_length_exceeded", param: "input", message: /context length/ });
  await expectApiError(t, create({ input: [...history(30), last], truncation: "disabled" }), { status: 400, code: "context_length_exceeded" });
});

t.test("truncation auto drops the oldest turns, as few as needed", async (t) => {
  const one = await create({ input: [...history(1), last] });
  const two = await create({ input: [...history(2), last] });
  const turnTokens = two.usage!.input_tokens - one.usage!.input_tokens;
  const r = await create({ input: [...history(30), last], truncation: "auto" });
  t.ok(["completed", "incomplete"].includes(r.status!));
  t.equal(r.truncation, "auto");
  const used = r.usage!.input_tokens;
  t.ok(used + OUTPUT <= CONTEXT, `prompt ${used} + output ${OUTPUT} fit the context`);
  t.ok(used + OUTPUT > CONTEXT - turnTokens - 2, `only whole turns were dropped, no more than needed (${used} tokens, ${turnTokens} a turn)`);
  t.equal(r.usage!.output_tokens, OUTPUT, "the output budget is intact");
});

t.test("instructions are kept when turns are dropped", async (t) => {
  const instructions = "Always answer about cats. ".repeat(20);
  const plain = await create({ input: [...history(30), last], truncation: "auto" });
  const withInstructions = await create({ input: [...history(30), last], truncation: "auto", instructions });
  const alone = await create({ input: [last], instructions });
  const bare = await create({ input: [last] });
  const instructionTokens = alone.usage!.input_tokens - bare.usage!.input_tokens;
  t.ok(instructionTokens > 50);
  t.ok(withInstructions.usage!.input_tokens + OUTPUT <= CONTEXT);
  t.ok(withInstructions.usage!.input_tokens >= plain.usage!.input_tokens - instructionTokens, "the instructions took the place of more dropped turns, and stayed");
  t.equal(withInstructions.instructions, instructions);
});

t.test("truncation auto over a previous_response_id chain longer than the context", async (t) => {
  let previous: string | undefined;
  for (let i = 0; i < 12; i++) {
    const r = await stack.client.responses.create({
      model: TEST_MODEL, max_output_tokens: 40, truncation: "auto", input: `Chapter ${i}. ${sentence.repeat(6)}`, ...(previous ? { previous_response_id: previous } : {}),
    });
    t.ok(r.usage!.input_tokens + 40 <= CONTEXT, `turn ${i}: ${r.usage!.input_tokens} input tokens`);
    previous = r.id;
  }
  await expectApiError(t, stack.client.responses.create({ model: TEST_MODEL, max_output_tokens: 40, input: "more", previous_response_id: previous }), { status: 400, code: "context_length_exceeded" });
});

t.test("a last turn that alone does not fit is refused even with auto", async (t) => {
  await expectApiError(t, create({ input: [...history(2), { role: "user", content: sentence.repeat(120) }], truncation: "auto" }), { status: 400, code: "context_length_exceeded", param: "input" });
});
