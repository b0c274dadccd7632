// tier: slow (a stack of its own)
import t from "tap";
import { createServer } from "node:net";
import { startStack } from "../../harness/stack.js";
import { TEST_MODEL } from "../../harness/processes.js";

const port = await new Promise<number>((resolve) => {
  const s = createServer().listen(0, "127.0.0.1", () => {
    const p = (s.address() as { port: number }).port;
    s.close(() => resolve(p));
  });
});
const stack = await startStack(t, { runnerEnv: { TRIBUTARY_RUNNER_HEALTH_PORT: String(port), TRIBUTARY_RUNNER_HEALTH_HOST: "127.0.0.1" } });
const base = `http://127.0.0.1:${port}`;

t.test("liveness and readiness of a runner process", async (t) => {
  t.equal((await fetch(`${base}/healthz`)).status, 200);
  const ready = await fetch(`${base}/readyz`);
  t.equal(ready.status, 200);
  const body = (await ready.json()) as { ready: boolean; runners: Array<{ model: string; state: string; slotsTotal: number }> };
  t.equal(body.ready, true);
  t.equal(body.runners[0]!.model, TEST_MODEL);
  t.equal(body.runners[0]!.state, "STATE_READY");
  t.equal((await fetch(`${base}/nothing`)).status, 404);
});

t.test("Prometheus metrics count admissions and generated tokens", async (t) => {
  await stack.client.chat.completions.create({ model: TEST_MODEL, messages: [{ role: "user", content: "hi" }], max_tokens: 7, temperature: 0 });
  const text = await (await fetch(`${base}/metrics`)).text();
  t.match(text, /# TYPE tributary_runner_slots gauge/);
  t.match(text, new RegExp(`tributary_runner_slots\\{model="${TEST_MODEL}",runner="r[A-Za-z0-9]+"\\} 8`));
  t.match(text, /tributary_runner_requests_admitted_total\{[^}]*\} [1-9]/);
  const tokens = Number(/tributary_runner_completion_tokens_total\{[^}]*\} (\d+)/.exec(text)![1]);
  t.ok(tokens >= 7, `${tokens} tokens counted`);
});
