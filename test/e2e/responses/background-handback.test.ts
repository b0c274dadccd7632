// tier: serial (a 3 s run must still be running when its host's 300 ms drain ends)
import t from "tap";
import { startStack } from "../../harness/stack.js";
import { startActorHost, TEST_KEY, TEST_MODEL, type ActorHost } from "../../harness/processes.js";

// An actor host that shuts down lets its background runs finish for its drain period, then hands
// the others back: a non-streamed response goes back to queued (not counted as an attempt) and
// the next host runs it from the start; a streamed one, whose events are out, ends failed with
// its stream. The sim engine makes runs long enough to stop the host during them.
const env = {
  TRIBUTARY_ENGINE: "sim",
  TRIBUTARY_MODEL_OVERRIDES: JSON.stringify({ [TEST_MODEL]: { sim: { tokens_per_second: 40, first_token_latency_ms: 0 } } }),
};
const actorsEnv = { TRIBUTARY_DRAIN_TIMEOUT_MS: "300", TRIBUTARY_BACKGROUND_ACK_WAIT_MS: "2000", TRIBUTARY_BACKGROUND_MAX_ATTEMPTS: "1" };
const stack = await startStack(t, { env, actorsEnv });
let actors: ActorHost = stack.actors;
const root = t;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Stops the actor host (SIGTERM: it drains) and starts another; resolves with the old one's exit code. */
async function replaceActorHost(): Promise<number | null> {
  const code = await actors.stop();
  actors = await startActorHost(stack.nats.url, { ...env, ...actorsEnv });
  const started = actors;
  root.teardown(() => started.kill());
  return code;
}

async function waitFor(id: string, pred: (status: string) => boolean, timeoutMs = 30_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const r = await stack.client.responses.retrieve(id);
    if (pred(r.status!)) return r;
    if (Date.now() > deadline) throw new Error(`${id}: still ${r.status}`);
    await sleep(25);
  }
}

t.test("a run cut by its host's shutdown goes back to the queue and runs again from the start", async (t) => {
  const created = await stack.client.responses.create({ model: TEST_MODEL, input: "go", background: true, max_output_tokens: 120 }); // 3 s
  await waitFor(created.id, (s) => s === "in_progress");
  await sleep(500); // some 20 tokens out: the hand-back must drop them
  const stopping = actors.stop();
  const handedBack = await waitFor(created.id, (s) => s !== "in_progress", 10_000);
  t.equal(handedBack.status, "queued", "handed back, not failed");
  t.same(handedBack.output, [], "nothing of the cut run is kept");
  t.equal(await stopping, 0);
  actors = await startActorHost(stack.nats.url, { ...env, ...actorsEnv });
  const host = actors;
  root.teardown(() => host.kill());
  // MAX_ATTEMPTS is 1: had the hand-back counted as an attempt, this run would not happen.
  const final = await waitFor(created.id, (s) => s !== "queued" && s !== "in_progress");
  t.equal(final.status, "incomplete");
  t.equal(final.usage!.output_tokens, 120, "run from the start by the next host");
});

t.test("a streamed run cut by its host's shutdown ends failed, its stream with response.failed", async (t) => {
  const res = await fetch(`${stack.gateway.baseURL}/responses`, {
    method: "POST",
    headers: { authorization: `Bearer ${TEST_KEY}`, "content-type": "application/json" },
    body: JSON.stringify({ model: TEST_MODEL, input: "go", background: true, stream: true, max_output_tokens: 400 }),
  });
  t.equal(res.status, 200);
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let text = "";
  let replaced: Promise<number | null> | undefined;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    text += decoder.decode(value, { stream: true });
    if (!replaced && text.includes("response.output_text.delta")) replaced = replaceActorHost();
  }
  t.equal(await replaced, 0, "the host stopped cleanly");
  const events = text.split("\n\n").filter((b) => b.startsWith("event:")).map((b) => JSON.parse(b.split("\n")[1]!.slice(6)) as { type: string; sequence_number: number; response?: { id: string; status: string; error: { message: string } | null } });
  const last = events.at(-1)!;
  t.equal(last.type, "response.failed");
  t.equal(last.response?.status, "failed");
  t.match(last.response?.error?.message, /worker running this response stopped/);
  t.same(events.map((e) => e.sequence_number), events.map((_, i) => i), "numbered without a gap");
  const stored = await stack.client.responses.retrieve(last.response!.id);
  t.equal(stored.status, "failed");
  t.ok(stored.output.length > 0, "the output streamed before the stop is kept");
});
