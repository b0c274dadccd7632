import t from "tap";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { SseLoadClient } from "../../bench/lib/sse-client.js";
import { tallyRequest, tokensInWindow } from "../../bench/lib/closed-loop.js";

// The benchmarks' streaming load client counts content deltas and reads the usage the same way
// for every server (the stack and llama-server), and the closed loop counts tokens by when their
// deltas arrive inside the measured window. A scripted SSE server plays each case.

const chunk = (delta: Record<string, unknown>, extra: Record<string, unknown> = {}) =>
  `data: ${JSON.stringify({ object: "chat.completion.chunk", choices: [{ index: 0, delta, finish_reason: null }], ...extra })}\n\n`;
const usage = (completion: number) => `data: ${JSON.stringify({ object: "chat.completion.chunk", choices: [], usage: { prompt_tokens: 9, completion_tokens: completion, total_tokens: 9 + completion } })}\n\n`;

/** Each scenario: the pieces the server writes in turn, then "end" or "destroy". */
const scenarios: Record<string, { pieces: string[]; finish: "end" | "destroy" }> = {
  // llama-server's shape: a role chunk with null content, one delta per token, a finish chunk
  // with an empty delta, a usage chunk (here 6 tokens over 4 deltas: one held back and merged),
  // an empty content delta that is not a token, content with an escaped quote.
  complete: {
    pieces: [
      chunk({ role: "assistant", content: null }),
      chunk({ content: "a" }),
      chunk({ content: "\"" }),
      chunk({ content: "" }),
      chunk({ content: "<0x80>" }),
      chunk({ content: " b c" }),
      chunk({}, { choices: [{ index: 0, delta: {}, finish_reason: "length" }] }),
      usage(6),
      "data: [DONE]\n\n",
    ],
    finish: "end",
  },
  // Events split across writes, in the middle of "data: " and of the JSON.
  split: { pieces: [chunk({ content: "x" }).slice(0, 3), chunk({ content: "x" }).slice(3, 20), chunk({ content: "x" }).slice(20) + chunk({ content: "y" }).slice(0, 30), chunk({ content: "y" }).slice(30), usage(2), "data: [DONE]\n\n"], finish: "end" },
  // llama-server ends a stream with an error event (it did on invalid UTF-8 from a random model).
  error: { pieces: [chunk({ content: "a" }), chunk({ content: "b" }), `data: ${JSON.stringify({ error: { code: 500, message: "boom", type: "server_error" } })}\n\n`], finish: "end" },
  // A 200 stream the server ends cleanly without [DONE] (a failure it did not report in-stream).
  truncated: { pieces: [chunk({ content: "a" }), chunk({ content: "b" })], finish: "end" },
  // The connection drops mid-stream (the client's own cut at the window's end looks the same).
  cut: { pieces: [chunk({ content: "a" }), chunk({ content: "b" }), chunk({ content: "c" })], finish: "destroy" },
};

async function scriptedServer(t: import("tap").Test): Promise<number> {
  const server = http.createServer((req, res) => {
    let body = "";
    req.on("data", (d) => (body += d));
    req.on("end", () => {
      const name = (JSON.parse(body) as { messages: Array<{ content: string }> }).messages[0]!.content;
      const scenario = scenarios[name]!;
      res.writeHead(200, { "content-type": "text/event-stream" });
      let i = 0;
      const next = () => {
        if (i < scenario.pieces.length) {
          res.write(scenario.pieces[i++]);
          // Each piece in its own TCP segment as far as the kernel allows.
          setImmediate(next);
        } else if (scenario.finish === "end") res.end();
        else res.socket?.destroy();
      };
      next();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  t.teardown(() => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()); }));
  return (server.address() as AddressInfo).port;
}

t.test("the load client counts content deltas, reads usage and tells complete from failed streams", async (t) => {
  const port = await scriptedServer(t);
  const client = new SseLoadClient("127.0.0.1", port, "k");
  t.teardown(() => client.close());
  const run = async (scenario: string) => {
    let heard = 0;
    const r = await client.streamChat({ model: "m", messages: [{ role: "user", content: scenario }] }, true, () => heard++);
    return { ...r, heard };
  };

  const complete = await run("complete");
  t.equal(complete.ok, true);
  t.equal(complete.deltas, 4, "the role chunk, the empty content and the finish chunk are not deltas");
  t.equal(complete.heard, 4, "onDelta hears every delta");
  t.equal(complete.completionTokens, 6);
  t.equal(complete.gapsMs.length, 3);
  t.ok(Number.isFinite(complete.ttftMs));

  const split = await run("split");
  t.equal(split.ok, true);
  t.equal(split.deltas, 2);
  t.equal(split.completionTokens, 2);

  const error = await run("error");
  t.equal(error.ok, false);
  t.equal(error.deltas, 2);
  t.match(error.error, /boom/);
  t.equal(error.completionTokens, 0);

  const truncated = await run("truncated");
  t.equal(truncated.ok, false);
  t.equal(truncated.error, "the stream ended without [DONE] after 2 content deltas", "a failure that says what happened, for the result file");

  const cut = await run("cut");
  t.equal(cut.ok, false);
  t.equal(cut.deltas, 3);
  t.equal(cut.completionTokens, 0);
  t.ok(cut.error, `a dropped connection says so too (${cut.error})`);
});

t.test("a request counts the deltas that arrived inside the window, its edges included", async (t) => {
  const window = { from: 10, to: 20 };
  t.same(tallyRequest([5, 9.9, 10, 15, 20, 20.1], window, { ok: false, completionTokens: 0 }), { deltasInWindow: 3, deltas: 6, completionTokens: undefined });
  t.same(tallyRequest([11, 12], window, { ok: true, completionTokens: 4 }), { deltasInWindow: 2, deltas: 2, completionTokens: 4 });
  t.same(tallyRequest([], window, { ok: false, completionTokens: 0 }), { deltasInWindow: 0, deltas: 0, completionTokens: undefined });
  // A failed request's partial usage is not trusted.
  t.equal(tallyRequest([11], window, { ok: false, completionTokens: 3 }).completionTokens, undefined);
});

t.test("tokens in the window: usage per delta for completed requests, their average for cut-off ones", async (t) => {
  // A request that began before the window and completed inside it: 8 tokens in 4 deltas, 3 inside.
  const startedBefore = { deltasInWindow: 3, deltas: 4, completionTokens: 8 };
  // One wholly inside: one token per delta.
  const inside = { deltasInWindow: 4, deltas: 4, completionTokens: 4 };
  // One still running at the window's end: 5 deltas inside, no usage.
  const cutOff = { deltasInWindow: 5, deltas: 5, completionTokens: undefined };
  const { tokens, tokensPerDelta } = tokensInWindow([startedBefore, inside, cutOff]);
  t.equal(tokensPerDelta, 12 / 8);
  t.equal(tokens, 3 * 2 + 4 * 1 + 5 * 1.5);
  t.same(tokensInWindow([cutOff]), { tokens: 5, tokensPerDelta: 1 }, "one token per delta when nothing completed");
  t.same(tokensInWindow([]), { tokens: 0, tokensPerDelta: 1 });
});
