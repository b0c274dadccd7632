// tier: serial (a 40,000-token stream at 50,000 tokens/s and an unread pause)
import t from "tap";
import { SIM_FAST_MODEL, sharedStack } from "../../harness/shared-stack.js";
import { dechunk, postAndReadLate } from "../../harness/slow-reader.js";

// The gateway under a client that stops reading: a fast producer (the sim engine at 50,000
// tokens/s) and a stream of megabytes. uWS reports backpressure, the gateway stops writing and
// merges deltas per choice; when the client reads again it gets every token, in order, in fewer
// and larger chunks. (The sim engine is used because this is about the gateway, not the model.)
const TOKENS = 40_000;
const stack = await sharedStack(t);

t.test("a client that stops reading gets every delta, in order, coalesced", async (t) => {
  const request = { model: SIM_FAST_MODEL, messages: [{ role: "user" as const, content: "go" }], max_tokens: TOKENS, seed: 3 };
  const expected = (await stack.client.chat.completions.create({ ...request, stream: false })).choices[0]!.message.content!;
  t.equal(expected.split(" ").length, TOKENS, "the reference run has every token");

  const http = await postAndReadLate(stack.gateway.port, stack.key, "/v1/chat/completions", JSON.stringify({ ...request, stream: true }), 1500);
  const events = dechunk(http).split("\n\n").filter((e) => e.startsWith("data: ")).map((e) => e.slice(6));
  t.equal(events.at(-1), "[DONE]");
  const chunks = events.slice(0, -1).map((e) => JSON.parse(e) as { choices: Array<{ delta: { content?: string }; finish_reason: string | null }> });
  const text = chunks.map((c) => c.choices[0]?.delta.content ?? "").join("");
  t.equal(text, expected, "nothing lost, nothing reordered");
  const contentChunks = chunks.filter((c) => c.choices[0]?.delta.content).length;
  t.ok(contentChunks < TOKENS / 2, `coalesced: ${contentChunks} content chunks for ${TOKENS} tokens`);
  t.equal(chunks.at(-1)!.choices[0]!.finish_reason, "length");
});
