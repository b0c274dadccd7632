// tier: slow (a stack of its own)
import t from "tap";
import type OpenAI from "openai";
import { startStack } from "../../harness/stack.js";
import { TEST_MODEL } from "../../harness/processes.js";
import { SHORT_JSON } from "./helpers.js";

// The runner behind streamed responses logs no error over its whole life: replies that complete,
// replies cut by max_output_tokens, and a client that leaves mid-stream (its request cancelled).
// A stack of its own, because the runner's logs are read from its start (stream.test.ts checks
// the events themselves, on the shared stack). Debug logs say when the runner ends a request.
const stack = await startStack(t, { runnerEnv: { TRIBUTARY_LOG_LEVEL: "debug" } });
const runner = stack.runners[0]!;

async function stream(params: Record<string, unknown>): Promise<OpenAI.Responses.ResponseStreamEvent[]> {
  const events: OpenAI.Responses.ResponseStreamEvent[] = [];
  const s = await stack.client.responses.create({ model: TEST_MODEL, stream: true, ...params } as OpenAI.Responses.ResponseCreateParamsStreaming);
  for await (const e of s) events.push(e);
  return events;
}

t.test("the runner logs no error through completed, cut and abandoned streams", async (t) => {
  t.equal((await stream({ input: "A cat, as JSON.", max_output_tokens: 300, text: SHORT_JSON })).at(-1)?.type, "response.completed");
  t.equal((await stream({ input: "Tell me a story.", max_output_tokens: 20 })).at(-1)?.type, "response.incomplete");

  const abort = new AbortController();
  const res = await stack.fetch("/v1/responses", { method: "POST", body: JSON.stringify({ model: TEST_MODEL, input: "A long story.", max_output_tokens: 1000, stream: true }), signal: abort.signal });
  const requestId = res.headers.get("x-request-id")!;
  const reader = res.body!.getReader();
  let text = "";
  while (!text.includes("response.output_text.delta")) text += new TextDecoder().decode((await reader.read()).value);
  abort.abort();
  const finished = await runner.waitForLog((r) => r.msg === "request finished" && r.requestId === requestId, 10_000);
  t.equal(finished.error, "ERROR_CODE_CANCELLED", "the runner stopped the abandoned request");

  const errors = runner.logs.filter((l) => l.level === "error");
  t.same(errors, [], "the runner logged no error");
});
