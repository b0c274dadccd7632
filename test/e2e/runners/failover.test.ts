// tier: serial (a killed runner must be noticed within 3 s; both runners must share 16 requests)
import t from "tap";
import { APIError } from "openai";
import { startStack } from "../../harness/stack.js";
import { TEST_MODEL } from "../../harness/processes.js";

const RUNNER_TIMEOUT_MS = 1500;
const stack = await startStack(t, {
  runners: 2,
  env: { TRIBUTARY_MODEL_OVERRIDES: JSON.stringify({ [TEST_MODEL]: { max_output_tokens: 1500 } }) },
  gatewayEnv: { TRIBUTARY_RUNNER_TIMEOUT_MS: String(RUNNER_TIMEOUT_MS) },
  runnerEnv: { TRIBUTARY_HEARTBEAT_MS: "250" },
});
// startStack returns once the gateway has heard both runners ready (waitForReadyRunners).
const messages = [{ role: "user" as const, content: "Tell me a story." }];

t.test("two runners of one model share the load", async (t) => {
  const served = await Promise.all(
    Array.from({ length: 16 }, async () => {
      const { response } = await stack.client.chat.completions.create({ model: TEST_MODEL, messages, max_tokens: 40 }).withResponse();
      return response.headers.get("x-tributary-runner");
    }),
  );
  const counts = new Map<string, number>();
  for (const id of served) counts.set(id!, (counts.get(id!) ?? 0) + 1);
  t.same(new Set(counts.keys()), new Set(stack.runners.map((r) => r.runnerId)), `both runners served requests: ${JSON.stringify([...counts])}`);
  for (const [, n] of counts) t.ok(n >= 4, "neither runner got only a trickle");
});

t.test("a runner killed mid-stream: its client gets an error event, new requests go to the survivor", async (t) => {
  const { data: stream, response } = await stack.client.chat.completions
    .create({ model: TEST_MODEL, messages, max_tokens: 1500, stream: true })
    .withResponse();
  const servingId = response.headers.get("x-tributary-runner");
  const serving = stack.runners.find((r) => r.runnerId === servingId)!;
  const survivor = stack.runners.find((r) => r !== serving)!;
  t.ok(serving, "the response names its runner");
  let chunks = 0;
  let killedAt = 0;
  const error = await (async () => {
    try {
      for await (const _ of stream) {
        if (++chunks === 3) {
          killedAt = performance.now();
          await serving.kill();
        }
      }
      return undefined;
    } catch (err) {
      return err;
    }
  })();
  const detectedAfter = performance.now() - killedAt;
  t.ok(error instanceof APIError, `the stream ended with an APIError (${String(error)})`);
  t.match((error as APIError).message, /runner stopped responding/);
  t.ok(detectedAfter < RUNNER_TIMEOUT_MS + 1500, `detected ${detectedAfter.toFixed(0)} ms after the kill`);

  for (let i = 0; i < 6; i++) {
    const { response: r } = await stack.client.chat.completions.create({ model: TEST_MODEL, messages, max_tokens: 5 }).withResponse();
    t.equal(r.headers.get("x-tributary-runner"), survivor.runnerId, "served by the survivor");
  }
});
