import { createServer, type Server } from "node:http";
import type { RunnerStatus } from "./runner-actor.js";

/**
 * Probes and metrics of a runner process, for Kubernetes and Prometheus:
 *   GET /healthz  200 while the process serves requests (liveness)
 *   GET /readyz   200 when every model of the process is loaded (readiness, startup)
 *   GET /metrics  Prometheus text: slots, queue, admissions, generated tokens per model; decode
 *                 threads by step width where they are tuned
 */
export function startHealthServer(port: number, host: string, statuses: () => RunnerStatus[]): Promise<Server> {
  const server = createServer((req, res) => {
    const all = statuses();
    if (req.url === "/healthz") return void res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ status: "ok" }));
    if (req.url === "/readyz") {
      const ready = all.length > 0 && all.every((s) => s.state === "STATE_READY");
      res.writeHead(ready ? 200 : 503, { "content-type": "application/json" }).end(JSON.stringify({ ready, runners: all }));
      return;
    }
    if (req.url === "/metrics") return void res.writeHead(200, { "content-type": "text/plain; version=0.0.4" }).end(renderMetrics(all));
    res.writeHead(404).end();
  });
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => resolve(server));
  });
}

const METRICS: Array<[name: string, type: "gauge" | "counter", help: string, value: (s: RunnerStatus) => number]> = [
  ["tributary_runner_ready", "gauge", "1 when the model is loaded and serving", (s) => (s.state === "STATE_READY" ? 1 : 0)],
  ["tributary_runner_slots", "gauge", "decoding slots", (s) => s.slotsTotal],
  ["tributary_runner_slots_busy", "gauge", "slots decoding now", (s) => s.slotsBusy],
  ["tributary_runner_queue_length", "gauge", "requests waiting for a slot", (s) => s.queueLength],
  ["tributary_runner_queue_limit", "gauge", "queue bound", (s) => s.queueLimit],
  ["tributary_runner_requests_admitted_total", "counter", "requests admitted", (s) => s.admitted],
  ["tributary_runner_requests_rejected_total", "counter", "requests rejected at admission", (s) => s.rejected],
  ["tributary_runner_completion_tokens_total", "counter", "tokens generated", (s) => s.completionTokens],
];

const labels = (s: RunnerStatus) => `model=${JSON.stringify(s.model)},runner=${JSON.stringify(s.runnerId)}`;

export function renderMetrics(statuses: RunnerStatus[]): string {
  const lines: string[] = [];
  for (const [name, type, help, value] of METRICS) {
    lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`);
    for (const s of statuses) lines.push(`${name}{${labels(s)}} ${value(s)}`);
  }
  const tuned = statuses.filter((s) => s.decodeThreads);
  if (tuned.length > 0) {
    lines.push("# HELP tributary_runner_decode_threads CPU threads decode steps of step_tokens_from tokens and up run on, as chosen while serving", "# TYPE tributary_runner_decode_threads gauge");
    for (const s of tuned) for (const w of s.decodeThreads!.byWidth) lines.push(`tributary_runner_decode_threads{${labels(s)},step_tokens_from="${w.fromTokens}"} ${w.threads}`);
    for (const [name, help, key] of [
      ["tributary_runner_decode_thread_probes_total", "short runs of decode steps on another thread count, to time it", "probes"],
      ["tributary_runner_decode_thread_changes_total", "changes of a step width's decode threads", "changes"],
    ] as const) {
      lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} counter`);
      for (const s of tuned) lines.push(`${name}{${labels(s)}} ${s.decodeThreads![key]}`);
    }
  }
  return lines.join("\n") + "\n";
}
