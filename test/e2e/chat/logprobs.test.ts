import t, { type Test } from "tap";
import type OpenAI from "openai";
import { sharedStack } from "../../harness/shared-stack.js";
import { TEST_MODEL } from "../../harness/processes.js";
import { batchResults, chatLine, createBatch, waitForBatch } from "../../harness/batches.js";
import { eventViolations, specViolations } from "../../harness/openai-spec.js";

// logprobs through the whole stack: chat completions streamed and not, for every choice of n;
// Responses with include message.output_text.logprobs and top_logprobs; batch lines. Values are
// checked against llama.cpp in test/e2e/runners/logprobs.test.ts; here the shapes (OpenAI's
// spec), what each delta carries, and that the streamed and whole forms agree.

const stack = await sharedStack(t);
const messages = [{ role: "user" as const, content: "Once upon a time" }];
const TOKENS = 24;

type Logprob = OpenAI.Chat.Completions.ChatCompletionTokenLogprob;

/** The checks that hold for any token's logprobs: bytes match the token, top sorted, in bounds. */
function checkTokens(t: Test, tokens: readonly Logprob[], top: number, text: string) {
  t.same(Buffer.from(tokens.flatMap((l) => l.bytes!)).toString("utf8"), text, "the tokens' bytes spell the text");
  for (const l of tokens) {
    t.equal(Buffer.from(l.bytes!).toString("utf8"), l.token);
    t.ok(l.logprob <= 0 && l.logprob >= -9999);
    t.equal(l.top_logprobs.length, top);
    for (let k = 1; k < l.top_logprobs.length; k++) t.ok(l.top_logprobs[k - 1]!.logprob >= l.top_logprobs[k]!.logprob, "alternatives sorted");
    for (const alt of l.top_logprobs) t.equal(Buffer.from(alt.bytes!).toString("utf8"), alt.token);
  }
}

/**
 * `actual` with each logprob within 1e-3 of `expected`'s replaced by it, for a t.same against
 * `expected`: llama.cpp's logits differ in their last digits with the batch that computed them
 * (other tenants' sequences on the shared runner, a cached prompt). Tokens and bytes must match.
 */
function tolerant(actual: unknown, expected: unknown): unknown {
  if (Array.isArray(actual) && Array.isArray(expected)) return actual.map((a, i) => tolerant(a, expected[i]));
  if (actual && expected && typeof actual === "object" && typeof expected === "object") {
    const e = expected as Record<string, unknown>;
    return Object.fromEntries(Object.entries(actual).map(([k, v]) =>
      [k, k === "logprob" && typeof v === "number" && typeof e[k] === "number" && Math.abs(v - (e[k] as number)) < 1e-3 ? e[k] : tolerant(v, e[k])]));
  }
  return actual;
}

t.test("non-streamed, n=2: each choice's logprobs.content, OpenAI's shape", async (t) => {
  const c = await stack.client.chat.completions.create({ model: TEST_MODEL, messages, max_tokens: TOKENS, n: 2, temperature: 1, seed: 5, logprobs: true, top_logprobs: 3 });
  t.same(specViolations("CreateChatCompletionResponse", c), [], "the spec's shape");
  for (const choice of c.choices) {
    t.equal(choice.finish_reason, "length");
    t.equal(choice.logprobs!.refusal, null);
    const tokens = choice.logprobs!.content!;
    t.ok(tokens.length >= TOKENS - 8, `choice ${choice.index}: ${tokens.length} tokens`);
    checkTokens(t, tokens, 3, choice.message.content!);
  }
  const greedy = await stack.client.chat.completions.create({ model: TEST_MODEL, messages, max_tokens: TOKENS, temperature: 0, logprobs: true, top_logprobs: 2 });
  for (const l of greedy.choices[0]!.logprobs!.content!) t.equal(l.top_logprobs[0]!.token, l.token, "greedy: the token is the most likely one");
  const plain = await stack.client.chat.completions.create({ model: TEST_MODEL, messages, max_tokens: 4 });
  t.equal(plain.choices[0]!.logprobs, null, "not asked: null");
  const noTop = await stack.client.chat.completions.create({ model: TEST_MODEL, messages, max_tokens: 4, logprobs: true });
  t.ok(noTop.choices[0]!.logprobs!.content!.every((l) => l.top_logprobs.length === 0), "logprobs without top_logprobs: no alternatives");
});

t.test("streamed: every content chunk carries its own tokens' logprobs; together the non-streamed result", async (t) => {
  const body = { model: TEST_MODEL, messages, max_tokens: TOKENS, temperature: 0, logprobs: true, top_logprobs: 4, n: 2 } as const;
  const whole = await stack.client.chat.completions.create(body);
  const stream = await stack.client.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
  const text = ["", ""];
  const tokens: Logprob[][] = [[], []];
  let chunks = 0;
  for await (const chunk of stream) {
    t.same(specViolations("CreateChatCompletionStreamResponse", chunk), [], `chunk ${chunks++}`);
    for (const choice of chunk.choices) {
      const content = choice.delta.content ?? "";
      if (content === "" || choice.delta.role) continue;
      const own = choice.logprobs!.content!;
      t.same(Buffer.from(own.flatMap((l) => l.bytes!)).toString("utf8"), content, "a chunk's logprobs are its content's tokens");
      text[choice.index] += content;
      tokens[choice.index]!.push(...own);
    }
  }
  for (const i of [0, 1]) {
    t.equal(text[i], whole.choices[i]!.message.content, `choice ${i}: the same text`);
    t.same(tolerant(tokens[i], whole.choices[i]!.logprobs!.content), whole.choices[i]!.logprobs!.content, `choice ${i}: the same logprobs`);
  }
});

t.test("Responses: include message.output_text.logprobs with top_logprobs, streamed and not", async (t) => {
  const body = { model: TEST_MODEL, input: "Once upon a time", max_output_tokens: TOKENS, temperature: 0, top_logprobs: 2, include: ["message.output_text.logprobs" as const] };
  const r = await stack.client.responses.create(body);
  t.same(specViolations("Response", r, ["/user"]), [], "the spec's shape");
  const part = (r.output[0] as OpenAI.Responses.ResponseOutputMessage).content[0] as OpenAI.Responses.ResponseOutputText;
  checkTokens(t, part.logprobs! as Logprob[], 2, part.text);
  t.equal(r.top_logprobs, 2);
  const events: Array<{ type: string; [k: string]: unknown }> = [];
  for await (const e of await stack.client.responses.create({ ...body, stream: true })) events.push(e as never);
  for (const e of events) t.same(eventViolations(e, ["/response/user", "/response/usage"]), [], e.type);
  const deltas = events.filter((e) => e.type === "response.output_text.delta") as unknown as OpenAI.Responses.ResponseTextDeltaEvent[];
  for (const d of deltas) t.same(Buffer.from(d.logprobs.flatMap((l) => (l as unknown as Logprob).bytes!)).toString("utf8"), d.delta, "each delta's logprobs are its tokens");
  const done = events.find((e) => e.type === "response.output_text.done") as unknown as OpenAI.Responses.ResponseTextDoneEvent;
  t.same(done.logprobs, deltas.flatMap((d) => d.logprobs), "output_text.done holds them all");
  t.same(tolerant(done.logprobs, part.logprobs), part.logprobs, "as the non-streamed response has them (greedy)");
  const without = await stack.client.responses.create({ ...body, include: [], top_logprobs: 0 });
  t.same(((without.output[0] as OpenAI.Responses.ResponseOutputMessage).content[0] as OpenAI.Responses.ResponseOutputText).logprobs, [], "not asked: []");
});

t.test("a batch line asking for logprobs gets them, like the route", async (t) => {
  const batch = await createBatch(stack.client, [chatLine("lp", { logprobs: true, top_logprobs: 2, temperature: 0 }), chatLine("plain")]);
  const done = await waitForBatch(stack.client, batch.id, 60_000);
  t.equal(done.status, "completed");
  const { output } = await batchResults(stack.client, done);
  const line = (id: string) => output.find((l) => l.custom_id === id)!.response!.body;
  const lp = line("lp").choices[0];
  checkTokens(t, lp.logprobs.content, 2, lp.message.content);
  t.equal(line("plain").choices[0].logprobs, null);
});
