// tier: slow (a stack of its own)
import t from "tap";
import { createServer } from "node:net";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startStack } from "../../harness/stack.js";
import { startProcess, TEST_KEY, TEST_MODEL } from "../../harness/processes.js";

// /metrics on the gateway and the actor host, in Prometheus's text format, scraped by a real
// Prometheus server (Debian's prometheus package) whose query API computes a histogram quantile.
// The trace writer's buffer holds one trace here, so logged requests beyond it are dropped:
// counted in tributary_traces_dropped_total, while the requests themselves succeed.

const freePort = () =>
  new Promise<number>((resolve) => {
    const s = createServer().listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });

const actorsPort = await freePort();
const stack = await startStack(t, {
  env: { TRIBUTARY_TRACE_BUFFER: "1", TRIBUTARY_TRACE_FLUSH_MS: "60000" },
  actorsEnv: { TRIBUTARY_ACTORS_METRICS_PORT: String(actorsPort), TRIBUTARY_ACTORS_METRICS_HOST: "127.0.0.1" },
});

async function chat(body: Record<string, unknown>) {
  const res = await fetch(stack.gateway.url + "/v1/chat/completions", {
    method: "POST",
    headers: { authorization: `Bearer ${TEST_KEY}`, "content-type": "application/json" },
    body: JSON.stringify({ model: TEST_MODEL, messages: [{ role: "user", content: "Once" }], max_tokens: 8, ...body }),
  });
  await res.text();
  return res.status;
}

const metricsText = async (url: string) => {
  const res = await fetch(url);
  return { status: res.status, type: res.headers.get("content-type"), text: await res.text() };
};
const value = (text: string, series: string) => {
  const line = text.split("\n").find((l) => l.startsWith(series + " "));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
};

t.test("the gateway's exposition counts what happened", async (t) => {
  const statuses: number[] = [];
  for (let i = 0; i < 4; i++) statuses.push(await chat({ stream: i % 2 === 0 }));
  for (let i = 0; i < 3; i++) statuses.push(await chat({ log: true }));
  statuses.push(await chat({ max_tokens: 5000 }));
  t.same(statuses, [200, 200, 200, 200, 200, 200, 200, 400], "dropped traces never fail a request");
  const m = await metricsText(stack.gateway.url + "/metrics");
  t.equal(m.status, 200, "no key needed");
  t.match(m.type, /^text\/plain; version=0\.0\.4/);
  const model = JSON.stringify(TEST_MODEL);
  t.equal(value(m.text, `tributary_generation_requests_total{model=${model},endpoint="/v1/chat/completions",status="success"}`), 7);
  t.equal(value(m.text, `tributary_generation_requests_total{model=${model},endpoint="/v1/chat/completions",status="error"}`), 1);
  t.equal(value(m.text, `tributary_http_requests_total{route="/v1/chat/completions",method="POST",status="200"}`), 7);
  t.equal(value(m.text, `tributary_http_requests_total{route="/v1/chat/completions",method="POST",status="400"}`), 1);
  t.equal(value(m.text, `tributary_tokens_total{model=${model},kind="output"}`), 56);
  t.equal(value(m.text, `tributary_time_to_first_token_seconds_count{model=${model}}`), 7);
  t.equal(value(m.text, `tributary_time_to_first_token_seconds_bucket{model=${model},le="+Inf"}`), 7);
  t.equal(value(m.text, `tributary_request_duration_seconds_count{model=${model},endpoint="/v1/chat/completions"}`), 7);
  t.equal(value(m.text, `tributary_inter_token_latency_seconds_count{model=${model}}`), 7);
  t.equal(value(m.text, `tributary_queue_wait_seconds_count{model=${model}}`), 7);
  t.equal(value(m.text, "tributary_traces_dropped_total"), 2, "one trace fits the buffer: two dropped");
  t.equal(value(m.text, "tributary_trace_buffer"), 1);
  t.equal(value(m.text, `tributary_runners{model=${model},state="ready"}`), 1);
  t.equal(value(m.text, "tributary_active_streams"), 0);
  t.equal(value(m.text, "tributary_sse_pending_bytes"), 0);
  t.ok(value(m.text, "tributary_requests_in_flight")! >= 1, "the scrape itself");
  t.ok(m.text.includes("# TYPE tributary_time_to_first_token_seconds histogram"));
  t.ok(m.text.includes("# TYPE tributary_rate_limit_rejections_total counter"));
  const a = await metricsText(`http://127.0.0.1:${actorsPort}/metrics`);
  t.equal(a.status, 200);
  t.ok(a.text.includes("# TYPE tributary_usage_rows_folded_total counter"));
  t.ok(a.text.includes("# TYPE tributary_batch_lines_total counter"));
});

t.test("a real Prometheus scrapes both and computes a TTFT quantile", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "tributary-prom-"));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const promPort = await freePort();
  writeFileSync(
    join(dir, "prometheus.yml"),
    [
      "global: { scrape_interval: 1s, evaluation_interval: 1s }",
      "scrape_configs:",
      `  - job_name: gateway`,
      `    static_configs: [{ targets: ["127.0.0.1:${stack.gateway.port}"] }]`,
      `  - job_name: actors`,
      `    static_configs: [{ targets: ["127.0.0.1:${actorsPort}"] }]`,
      "",
    ].join("\n"),
  );
  const prom = startProcess("prometheus", [`--config.file=${join(dir, "prometheus.yml")}`, `--storage.tsdb.path=${join(dir, "data")}`, `--web.listen-address=127.0.0.1:${promPort}`], {}, "prometheus");
  t.teardown(() => prom.kill());
  const api = `http://127.0.0.1:${promPort}/api/v1`;
  const query = async (q: string) => {
    const res = await fetch(`${api}/query?query=${encodeURIComponent(q)}`).catch(() => undefined);
    if (!res?.ok) return undefined;
    return ((await res.json()) as { data: { result: Array<{ metric: Record<string, string>; value: [number, string] }> } }).data.result;
  };
  // Requests spread over a few scrapes, so rate() has points to work with.
  let quantile: number | undefined;
  let up: string[] = [];
  for (let i = 0; i < 60 && (quantile === undefined || up.length < 2); i++) {
    await chat({ stream: true });
    await new Promise((r) => setTimeout(r, 250));
    up = ((await query("up == 1")) ?? []).map((r) => r.metric.job!).sort();
    const q = await query(`histogram_quantile(0.5, sum by (le) (rate(tributary_time_to_first_token_seconds_bucket[30s])))`);
    const v = q?.[0] ? Number(q[0].value[1]) : NaN;
    if (Number.isFinite(v)) quantile = v;
  }
  t.same(up, ["actors", "gateway"], "both targets up");
  t.ok(quantile !== undefined && quantile > 0 && quantile < 5, `median TTFT from Prometheus: ${quantile} s`);
});
