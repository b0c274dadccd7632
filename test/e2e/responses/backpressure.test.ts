import t from "tap";
import { startStack } from "../../harness/stack.js";
import { dechunk, postAndReadLate } from "../../harness/slow-reader.js";
import { TEST_MODEL } from "../../harness/processes.js";

// A Responses stream to a client that stops reading: the gateway holds its events while uWS
// reports backpressure and merges text deltas of the same part, so the client, once it reads
// again, gets every token in order, in fewer events, with sequence numbers still consecutive.
// (The sim engine at 50,000 tokens/s makes the producer fast; this is about the gateway.)
const TOKENS = 100_000;
const stack = await startStack(t, {
  env: {
    TRIBUTARY_ENGINE: "sim",
    TRIBUTARY_MODEL_OVERRIDES: JSON.stringify({
      // Rate limits well above the two 100,000-token runs of this test.
      [TEST_MODEL]: {
        context_length: 200_000, max_output_tokens: TOKENS, sim: { tokens_per_second: 50_000, first_token_latency_ms: 0 },
        rate_limits: { requests_per_minute: 1000, tokens_per_minute: 10_000_000 },
      },
    }),
  },
});

t.test("a client that stops reading gets every delta, in order, coalesced, numbered", async (t) => {
  const request = { model: TEST_MODEL, input: "go", max_output_tokens: TOKENS, store: false };
  const expected = (await stack.client.responses.create(request)).output_text;
  t.equal(expected.split(" ").length, TOKENS, "the reference run has every token");

  const http = await postAndReadLate(stack.gateway.port, stack.key, "/v1/responses", JSON.stringify({ ...request, stream: true }), 3000);
  const events = dechunk(http)
    .split("\n\n")
    .filter((e) => e.startsWith("event: "))
    .map((e) => JSON.parse(e.split("\n")[1]!.slice(6)) as { type: string; sequence_number: number; delta?: string });
  t.same(events.map((e) => e.sequence_number), events.map((_, i) => i), "sequence numbers stay consecutive");
  const deltas = events.filter((e) => e.type === "response.output_text.delta");
  t.equal(deltas.map((e) => e.delta).join(""), expected, "nothing lost, nothing reordered");
  t.ok(deltas.length < TOKENS / 2, `coalesced: ${deltas.length} delta events for ${TOKENS} tokens`);
  t.equal(events.at(-1)!.type, "response.incomplete");
});
