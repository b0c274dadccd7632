// tier: serial (a runner stopped and killed mid-admission, observed for seconds)
import t from "tap";
import { startStack } from "../../harness/stack.js";
import { TEST_MODEL } from "../../harness/processes.js";

// A runner lost under a steady stream load. Requests sent to it after it went away get no
// admission reply; the gateway must give up on it once its directory declares it lost (silent
// for the runner timeout) and admit the request on the other runner, not hold it for the whole
// admission timeout. The admission timeout is far longer than the runner timeout here, so a
// request held until it expired stands out by seconds.
//
// On one machine a process killed with -9 closes its socket at once, NATS drops its
// subscriptions and answers "no responders", so nothing waits. A runner whose node dies (or
// whose host hangs) keeps its connection open until the server's pings time out (minutes):
// requests are delivered and never answered. SIGSTOP is that runner; it is killed (-9) after.

const RUNNER_TIMEOUT_MS = 3_000;
const ADMISSION_TIMEOUT_MS = 15_000;
/** Slack over the runner timeout for the directory's check period and a loaded 2-core machine. */
const MARGIN_MS = 3_000;

const stack = await startStack(t, {
  runners: 2,
  env: {
    TRIBUTARY_ENGINE: "sim",
    TRIBUTARY_MODEL_OVERRIDES: JSON.stringify({ [TEST_MODEL]: { sim: { tokens_per_second: 50, first_token_latency_ms: 10 } } }),
  },
  gatewayEnv: { TRIBUTARY_RUNNER_TIMEOUT_MS: String(RUNNER_TIMEOUT_MS), TRIBUTARY_ADMISSION_TIMEOUT_MS: String(ADMISSION_TIMEOUT_MS) },
  runnerEnv: { TRIBUTARY_HEARTBEAT_MS: "250" },
});

interface Outcome {
  start: number;
  /** From the request to its response headers (the gateway answers once a runner admitted it). */
  admittedAfterMs: number | undefined;
  result: "finished" | "error event" | "refused";
  detail?: string;
}
const outcomes: Outcome[] = [];

async function oneStream(): Promise<void> {
  const start = performance.now();
  const outcome: Outcome = { start, admittedAfterMs: undefined, result: "refused" };
  outcomes.push(outcome);
  try {
    const stream = await stack.client.chat.completions.create(
      { model: TEST_MODEL, messages: [{ role: "user", content: "go" }], max_tokens: 10, stream: true },
      { signal: AbortSignal.timeout(30_000) },
    );
    outcome.admittedAfterMs = performance.now() - start;
    try {
      for await (const _ of stream);
      outcome.result = "finished";
    } catch (err) {
      outcome.result = "error event";
      outcome.detail = String(err).slice(0, 120);
    }
  } catch (err) {
    outcome.admittedAfterMs = performance.now() - start;
    outcome.detail = String(err).slice(0, 120);
  }
}

let running = true;
const worker = async () => {
  while (running) await oneStream();
};
const workers = Array.from({ length: 6 }, worker);
await new Promise((r) => setTimeout(r, 1_500));
const victim = stack.runners[0]!;
victim.child.kill("SIGSTOP");
const killedAt = performance.now();
// A burst right after the loss: requests are spread over both runners by load, so some are sent
// to the lost one before anyone can know it is gone.
const burst = Array.from({ length: 8 }, oneStream);
await new Promise((r) => setTimeout(r, RUNNER_TIMEOUT_MS + 3_000));
await victim.kill();
running = false;
await Promise.all([...workers, ...burst]);

t.test("requests sent to the lost runner moved to the other one after the runner timeout", async (t) => {
  const abandoned = stack.gateway.logs.filter((r) => r.msg === "runner lost during admission; trying another" && r.runnerId === victim.runnerId);
  t.ok(abandoned.length > 0, `${abandoned.length} admissions to the lost runner were given up`);
  const after = outcomes.filter((o) => o.start >= killedAt);
  t.ok(after.length >= 8, `${after.length} requests after the runner was lost`);
  const slow = after.filter((o) => (o.admittedAfterMs ?? Infinity) > RUNNER_TIMEOUT_MS + MARGIN_MS);
  t.equal(slow.length, 0, `no request waited for admission longer than the runner timeout + ${MARGIN_MS} ms: ${JSON.stringify(slow)}`);
  const refused = after.filter((o) => o.result === "refused");
  t.equal(refused.length, 0, `no request after the loss was refused: ${JSON.stringify(refused)}`);
  const counts = { finished: after.filter((o) => o.result === "finished").length, errorEvents: after.filter((o) => o.result === "error event").length };
  t.equal(counts.errorEvents, 0, `requests sent after the loss ran on the survivor: ${JSON.stringify(counts)}`);
});

t.test("streams in flight on the lost runner ended with an error event, none hung", async (t) => {
  const before = outcomes.filter((o) => o.start < killedAt);
  t.equal(before.filter((o) => o.result === "refused").length, 0, "no request before the loss was refused");
  for (const o of before.filter((o) => o.result === "error event")) t.match(o.detail, /runner stopped responding/);
});
