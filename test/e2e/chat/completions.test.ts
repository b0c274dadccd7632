import t from "tap";
import { readSse } from "../../harness/stack.js";
import { sharedStack } from "../../harness/shared-stack.js";
import { TEST_MODEL } from "../../harness/processes.js";

const stack = await sharedStack(t);
const messages = [{ role: "user" as const, content: "Tell me a story about a cat." }];

t.test("non-streamed completion has the chat.completion shape and usage", async (t) => {
  const c = await stack.client.chat.completions.create({ model: TEST_MODEL, messages, max_tokens: 24, seed: 7 });
  t.match(c.id, /^chatcmpl-/);
  t.equal(c.object, "chat.completion");
  t.equal(c.model, TEST_MODEL);
  t.equal(c.choices.length, 1);
  const choice = c.choices[0]!;
  t.equal(choice.message.role, "assistant");
  t.type(choice.message.content, "string");
  t.ok(choice.message.content!.length > 0, "some text");
  t.ok(["stop", "length"].includes(choice.finish_reason));
  t.ok(c.usage!.prompt_tokens > 0);
  t.ok(c.usage!.completion_tokens > 0 && c.usage!.completion_tokens <= 24);
  t.equal(c.usage!.total_tokens, c.usage!.prompt_tokens + c.usage!.completion_tokens);
});

t.test("max_tokens reached gives finish_reason length with exactly that many tokens", async (t) => {
  const c = await stack.client.chat.completions.create({ model: TEST_MODEL, messages, max_completion_tokens: 5, temperature: 0 });
  t.equal(c.choices[0]!.finish_reason, "length");
  t.equal(c.usage!.completion_tokens, 5);
});

t.test("streamed completion: role first, text chunks, finish, usage chunk, [DONE]", async (t) => {
  const stream = await stack.client.chat.completions.create({
    model: TEST_MODEL, messages, max_tokens: 16, seed: 3, stream: true, stream_options: { include_usage: true },
  });
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  t.ok(chunks.length >= 4);
  const ids = new Set(chunks.map((c) => c.id));
  t.equal(ids.size, 1, "one id on every chunk");
  t.equal(chunks[0]!.choices[0]!.delta.role, "assistant");
  const finish = chunks.find((c) => c.choices[0]?.finish_reason);
  t.ok(finish, "a chunk carries finish_reason");
  const last = chunks.at(-1)!;
  t.same(last.choices, [], "the usage chunk has no choices");
  t.ok(last.usage!.completion_tokens > 0 && last.usage!.completion_tokens <= 16, "usage counts the streamed tokens");
  for (const c of chunks.slice(0, -1)) t.equal(c.usage, null, "earlier chunks carry usage: null");
  const text = chunks.map((c) => c.choices[0]?.delta.content ?? "").join("");
  const again = await stack.client.chat.completions.create({ model: TEST_MODEL, messages, max_tokens: 16, seed: 3 });
  t.equal(text, again.choices[0]!.message.content, "streamed text equals the non-streamed text for the same seed");
});

t.test("the SDK's stream helper accepts the stream (role, finish_reason per choice)", async (t) => {
  const runner = stack.client.chat.completions.stream({ model: TEST_MODEL, messages, max_tokens: 12, seed: 11 });
  const final = await runner.finalChatCompletion();
  t.equal(final.choices[0]!.message.role, "assistant");
  t.ok(final.choices[0]!.finish_reason);
});

t.test("raw SSE framing: data lines, text/event-stream, ends with [DONE]", async (t) => {
  const res = await stack.fetch("/v1/chat/completions", {
    method: "POST",
    body: JSON.stringify({ model: TEST_MODEL, messages, max_tokens: 4, stream: true }),
  });
  t.equal(res.status, 200);
  t.match(res.headers.get("content-type"), /^text\/event-stream/);
  const events = await readSse(res);
  t.equal(events.at(-1), "[DONE]");
  for (const e of events.slice(0, -1)) t.doesNotThrow(() => JSON.parse(e));
});

t.test("n=2 gives two independent choices (streamed and not)", async (t) => {
  const c = await stack.client.chat.completions.create({ model: TEST_MODEL, messages, max_tokens: 12, n: 2, seed: 5 });
  t.same(c.choices.map((x) => x.index), [0, 1]);
  t.not(c.choices[0]!.message.content, c.choices[1]!.message.content, "different samples");
  t.ok(c.usage!.completion_tokens > 12 && c.usage!.completion_tokens <= 24, "usage counts both choices");

  const stream = await stack.client.chat.completions.create({ model: TEST_MODEL, messages, max_tokens: 12, n: 2, seed: 5, stream: true });
  const texts = ["", ""];
  const finishes = [0, 0];
  for await (const chunk of stream)
    for (const ch of chunk.choices) {
      texts[ch.index] += ch.delta.content ?? "";
      if (ch.finish_reason) finishes[ch.index]!++;
    }
  t.same(finishes, [1, 1], "each choice finishes once");
  t.same(texts, c.choices.map((x) => x.message.content), "same seed, same two texts");
});

t.test("same seed and input give the same output; another seed differs", async (t) => {
  const run = (seed: number) =>
    stack.client.chat.completions.create({ model: TEST_MODEL, messages, max_tokens: 30, seed, temperature: 1 }).then((c) => c.choices[0]!.message.content);
  const [a, b, c] = await Promise.all([run(42), run(42), run(43)]);
  t.equal(a, b);
  t.not(a, c);
});

t.test("stop strings end the reply and are not included", async (t) => {
  const free = await stack.client.chat.completions.create({ model: TEST_MODEL, messages, max_tokens: 60, seed: 9 });
  const text = free.choices[0]!.message.content!;
  // Stop on a word that the free run produced past its first few characters.
  const word = text.slice(8).split(/\s+/).find((w) => w.length >= 3);
  t.ok(word, `a stop word in: ${text}`);
  const stopped = await stack.client.chat.completions.create({ model: TEST_MODEL, messages, max_tokens: 60, seed: 9, stop: [word!, "zzzz-never"] });
  const out = stopped.choices[0]!.message.content!;
  t.equal(stopped.choices[0]!.finish_reason, "stop");
  t.notMatch(out, word!);
  t.equal(out, text.slice(0, text.indexOf(word!, 0)), "the text up to the stop string");

  const streamed = await stack.client.chat.completions.create({ model: TEST_MODEL, messages, max_tokens: 60, seed: 9, stop: word!, stream: true });
  let s = "";
  for await (const chunk of streamed) s += chunk.choices[0]?.delta.content ?? "";
  t.equal(s, out, "the same when streamed (held-back text is never emitted)");
});

t.test("temperature 0 is greedy: repeatable without a seed", async (t) => {
  const run = () => stack.client.chat.completions.create({ model: TEST_MODEL, messages, max_tokens: 20, temperature: 0 }).then((c) => c.choices[0]!.message.content);
  t.equal(await run(), await run());
});

t.test("logit_bias -100 bans a token; presence/frequency penalties and top_p are accepted", async (t) => {
  const base = await stack.client.chat.completions.create({ model: TEST_MODEL, messages, max_tokens: 20, temperature: 0 });
  const text = base.choices[0]!.message.content!;
  t.ok(text.length > 0);
  const c = await stack.client.chat.completions.create({
    model: TEST_MODEL, messages, max_tokens: 20, temperature: 0.7, top_p: 0.9, seed: 1,
    presence_penalty: 1.5, frequency_penalty: 1.2, logit_bias: { "13": -100 }, reasoning_effort: "low",
  });
  t.ok(c.choices[0]!.message.content!.length > 0);
  // Token 13 of this vocabulary is the newline byte token "<0x0A>": banned, the reply has no newline.
  t.notMatch(c.choices[0]!.message.content!, /\n/);
});
