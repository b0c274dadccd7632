// tier: serial (a 1 s runner timeout: on a busy machine a live runner could look lost)
import t from "tap";
import type OpenAI from "openai";
import { startStack } from "../../harness/stack.js";
import { startRunner, TEST_MODEL, type Runner } from "../../harness/processes.js";

// A runner that dies mid-response: a streamed response ends with response.failed (error.code
// server_error) and is stored failed; a background one nobody has seen yet runs again on another
// runner. (The sim engine makes responses
// long enough to kill the runner during them; this is about the platform, not the model.)
const env = {
  TRIBUTARY_ENGINE: "sim",
  TRIBUTARY_RUNNER_TIMEOUT_MS: "1000",
  TRIBUTARY_MODEL_OVERRIDES: JSON.stringify({ [TEST_MODEL]: { sim: { tokens_per_second: 40, first_token_latency_ms: 0 } } }),
};
const stack = await startStack(t, { env });
let runner: Runner = stack.runners[0]!;

async function killRunnerAndReplace(): Promise<void> {
  await runner.kill();
  runner = await startRunner(stack.nats.url, env);
  const started = runner;
  t.teardown(() => started.kill());
}

t.test("a streamed response whose runner dies ends with response.failed and is stored failed", async (t) => {
  const stream = await stack.client.responses.create({ model: TEST_MODEL, input: "go", max_output_tokens: 400, stream: true });
  const events: OpenAI.Responses.ResponseStreamEvent[] = [];
  let replacing: Promise<void> | undefined;
  for await (const e of stream) {
    events.push(e);
    if (!replacing && events.filter((x) => x.type === "response.output_text.delta").length === 3) replacing = killRunnerAndReplace();
  }
  // The next test starts with one runner, ready, as this one did.
  await replacing;
  const last = events.at(-1) as OpenAI.Responses.ResponseFailedEvent;
  t.equal(last.type, "response.failed");
  t.equal(last.response.status, "failed");
  t.match(last.response.error, { code: "server_error", message: /runner/ });
  const itemDone = (events.at(-2) as OpenAI.Responses.ResponseOutputItemDoneEvent).item as OpenAI.Responses.ResponseOutputMessage;
  t.equal(itemDone.type, "message");
  t.equal(itemDone.status, "incomplete", "the interrupted message is incomplete");
  t.same(events.map((e) => e.sequence_number), events.map((_, i) => i));
  t.equal((await stack.client.responses.retrieve(last.response.id)).status, "failed", "stored as failed");
});

t.test("a background response whose runner dies starts over on another runner", async (t) => {
  const created = await stack.client.responses.create({ model: TEST_MODEL, input: "go", max_output_tokens: 400, background: true });
  const deadline = Date.now() + 30_000;
  let r = created;
  while (r.status !== "in_progress" && Date.now() < deadline) {
    await new Promise((res) => setTimeout(res, 25));
    r = await stack.client.responses.retrieve(created.id);
  }
  // Under way on the runner (a few tokens out), not just taken by a worker.
  await new Promise((res) => setTimeout(res, 300));
  await killRunnerAndReplace();
  while (["queued", "in_progress"].includes(r.status!) && Date.now() < deadline) {
    await new Promise((res) => setTimeout(res, 100));
    r = await stack.client.responses.retrieve(created.id);
  }
  t.equal(r.status, "incomplete", "finished by the new runner");
  t.equal(r.usage!.output_tokens, 400, "from the start: no half of the first attempt in it");
});
