// tier: serial (a 100,000-token stream at 50,000 tokens/s and a 3 s unread pause)
import t from "tap";
import { sharedStack, SIM_FAST_MODEL } from "../../harness/shared-stack.js";
import { dechunk, postAndReadLate } from "../../harness/slow-reader.js";

// A Responses stream to a client that stops reading: the gateway holds its events while uWS
// reports backpressure and merges text deltas of the same part, so the client, once it reads
// again, gets every token in order, in fewer events, with sequence numbers still consecutive.
// (The shared stack's fast sim model, 50,000 tokens/s, makes the producer fast; this is about
// the gateway.)
const TOKENS = 100_000;
const stack = await sharedStack(t);

t.test("a client that stops reading gets every delta, in order, coalesced, numbered", async (t) => {
  const request = { model: SIM_FAST_MODEL, input: "go", max_output_tokens: TOKENS, store: false };
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
