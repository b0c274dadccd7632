import t from "tap";
import { connect } from "node:net";
import { startStack } from "../../harness/stack.js";
import { TEST_KEY, TEST_MODEL } from "../../harness/processes.js";

// The gateway under a client that stops reading: a fast producer (the sim engine at 50,000
// tokens/s) and a stream of megabytes. uWS reports backpressure, the gateway stops writing and
// merges deltas per choice; when the client reads again it gets every token, in order, in fewer
// and larger chunks. (The sim engine is used because this is about the gateway, not the model.)
const TOKENS = 40_000;
const stack = await startStack(t, {
  env: {
    TRIBUTARY_ENGINE: "sim",
    TRIBUTARY_MODEL_OVERRIDES: JSON.stringify({
      [TEST_MODEL]: { context_length: 100_000, max_output_tokens: TOKENS, sim: { tokens_per_second: 50_000, first_token_latency_ms: 0 } },
    }),
  },
});

function rawStream(body: string, pauseMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(stack.gateway.port, "127.0.0.1");
    const parts: Buffer[] = [];
    socket.on("connect", () => {
      socket.write(
        `POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${TEST_KEY}\r\ncontent-type: application/json\r\n` +
          `content-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
      );
      socket.pause();
      setTimeout(() => socket.resume(), pauseMs);
    });
    socket.on("data", (d) => parts.push(d));
    socket.on("end", () => resolve(Buffer.concat(parts).toString("utf8")));
    socket.on("error", reject);
  });
}

function dechunk(http: string): string {
  const [, ...rest] = http.split("\r\n\r\n");
  let body = rest.join("\r\n\r\n");
  let out = "";
  for (;;) {
    const nl = body.indexOf("\r\n");
    const size = parseInt(body.slice(0, nl), 16);
    if (!size) return out;
    out += body.slice(nl + 2, nl + 2 + size);
    body = body.slice(nl + 2 + size + 2);
  }
}

t.test("a client that stops reading gets every delta, in order, coalesced", async (t) => {
  const request = { model: TEST_MODEL, messages: [{ role: "user" as const, content: "go" }], max_tokens: TOKENS, seed: 3 };
  const expected = (await stack.client.chat.completions.create({ ...request, stream: false })).choices[0]!.message.content!;
  t.equal(expected.split(" ").length, TOKENS, "the reference run has every token");

  const http = await rawStream(JSON.stringify({ ...request, stream: true }), 1500);
  const events = dechunk(http).split("\n\n").filter((e) => e.startsWith("data: ")).map((e) => e.slice(6));
  t.equal(events.at(-1), "[DONE]");
  const chunks = events.slice(0, -1).map((e) => JSON.parse(e) as { choices: Array<{ delta: { content?: string }; finish_reason: string | null }> });
  const text = chunks.map((c) => c.choices[0]?.delta.content ?? "").join("");
  t.equal(text, expected, "nothing lost, nothing reordered");
  const contentChunks = chunks.filter((c) => c.choices[0]?.delta.content).length;
  t.ok(contentChunks < TOKENS / 2, `coalesced: ${contentChunks} content chunks for ${TOKENS} tokens`);
  t.equal(chunks.at(-1)!.choices[0]!.finish_reason, "length");
});
