import { createServer, type Server } from "node:http";

// A small Prometheus registry: counters, gauges and histograms with labels, rendered in the text
// exposition format (0.0.4). Recording is a map lookup and an add: cheap enough for every request;
// labels are bounded by the caller (routes, catalog models, status classes), never client input.

type Labels = Record<string, string>;

const escapeLabel = (v: string) => v.replace(/\\/g, "\\\\").replace(/\n/g, "\\n").replace(/"/g, '\\"');
const labelText = (names: readonly string[], values: readonly string[], extra = "") => {
  const parts = names.map((n, i) => `${n}="${escapeLabel(values[i] ?? "")}"`);
  if (extra) parts.push(extra);
  return parts.length > 0 ? `{${parts.join(",")}}` : "";
};
const num = (v: number) => (Number.isFinite(v) ? String(v) : v > 0 ? "+Inf" : v < 0 ? "-Inf" : "NaN");

interface Metric {
  render(out: string[]): void;
}

abstract class Family<T> implements Metric {
  protected readonly series = new Map<string, { values: string[]; data: T }>();
  constructor(readonly name: string, readonly help: string, readonly labelNames: readonly string[]) {}

  protected get(labels: Labels): T {
    const values = this.labelNames.map((n) => labels[n] ?? "");
    const key = values.join("\u0000");
    let s = this.series.get(key);
    if (!s) this.series.set(key, (s = { values, data: this.initial() }));
    return s.data;
  }

  protected abstract initial(): T;
  abstract render(out: string[]): void;
}

export class Counter extends Family<{ v: number }> {
  inc(labels: Labels = {}, by = 1): void {
    this.get(labels).v += by;
  }
  protected initial() {
    return { v: 0 };
  }
  render(out: string[]): void {
    out.push(`# HELP ${this.name} ${this.help}`, `# TYPE ${this.name} counter`);
    for (const s of this.series.values()) out.push(`${this.name}${labelText(this.labelNames, s.values)} ${num(s.data.v)}`);
  }
}

export class Gauge extends Family<{ v: number }> {
  set(labels: Labels, value: number): void {
    this.get(labels).v = value;
  }
  inc(labels: Labels = {}, by = 1): void {
    this.get(labels).v += by;
  }
  dec(labels: Labels = {}, by = 1): void {
    this.get(labels).v -= by;
  }
  protected initial() {
    return { v: 0 };
  }
  render(out: string[]): void {
    out.push(`# HELP ${this.name} ${this.help}`, `# TYPE ${this.name} gauge`);
    for (const s of this.series.values()) out.push(`${this.name}${labelText(this.labelNames, s.values)} ${num(s.data.v)}`);
  }
}

/** Values read when scraped (queue depths, buffer sizes, counts kept elsewhere). */
export class Collected implements Metric {
  constructor(
    readonly name: string,
    readonly help: string,
    readonly type: "gauge" | "counter",
    readonly labelNames: readonly string[],
    private readonly collect: () => Array<{ labels: Labels; value: number }>,
  ) {}
  render(out: string[]): void {
    out.push(`# HELP ${this.name} ${this.help}`, `# TYPE ${this.name} ${this.type}`);
    for (const { labels, value } of this.collect()) out.push(`${this.name}${labelText(this.labelNames, this.labelNames.map((n) => labels[n] ?? ""))} ${num(value)}`);
  }
}

interface HistogramData {
  counts: number[];
  sum: number;
  count: number;
}

export class Histogram extends Family<HistogramData> {
  constructor(name: string, help: string, labelNames: readonly string[], readonly buckets: readonly number[]) {
    super(name, help, labelNames);
  }
  observe(labels: Labels, value: number): void {
    const d = this.get(labels);
    d.sum += value;
    d.count++;
    for (let i = 0; i < this.buckets.length; i++) if (value <= this.buckets[i]!) d.counts[i]!++;
  }
  protected initial(): HistogramData {
    return { counts: this.buckets.map(() => 0), sum: 0, count: 0 };
  }
  render(out: string[]): void {
    out.push(`# HELP ${this.name} ${this.help}`, `# TYPE ${this.name} histogram`);
    for (const s of this.series.values()) {
      this.buckets.forEach((b, i) => out.push(`${this.name}_bucket${labelText(this.labelNames, s.values, `le="${num(b)}"`)} ${s.data.counts[i]}`));
      out.push(`${this.name}_bucket${labelText(this.labelNames, s.values, 'le="+Inf"')} ${s.data.count}`);
      out.push(`${this.name}_sum${labelText(this.labelNames, s.values)} ${num(s.data.sum)}`);
      out.push(`${this.name}_count${labelText(this.labelNames, s.values)} ${s.data.count}`);
    }
  }
}

/** Latency buckets in seconds, from 1 ms to 5 minutes. */
export const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300];

export class MetricsRegistry {
  private readonly metrics: Metric[] = [];

  counter(name: string, help: string, labelNames: readonly string[] = []): Counter {
    return this.add(new Counter(name, help, labelNames));
  }
  gauge(name: string, help: string, labelNames: readonly string[] = []): Gauge {
    return this.add(new Gauge(name, help, labelNames));
  }
  histogram(name: string, help: string, labelNames: readonly string[], buckets: readonly number[] = LATENCY_BUCKETS): Histogram {
    return this.add(new Histogram(name, help, labelNames, buckets));
  }
  collected(name: string, help: string, type: "gauge" | "counter", labelNames: readonly string[], collect: () => Array<{ labels: Labels; value: number }>): Collected {
    return this.add(new Collected(name, help, type, labelNames, collect));
  }

  private add<M extends Metric>(m: M): M {
    this.metrics.push(m);
    return m;
  }

  /** The Prometheus text exposition of every metric. */
  render(): string {
    const out: string[] = [];
    for (const m of this.metrics) m.render(out);
    return out.join("\n") + "\n";
  }
}

export const METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";

/** Whether the process can do its work now, and why (GET /readyz). */
export interface Readiness {
  ready: boolean;
  detail: Record<string, unknown>;
}

/**
 * Serves, on its own port, for processes without an HTTP server of their own (the actor host):
 *   GET /metrics  Prometheus text
 *   GET /healthz  200 while the process runs (liveness: never depends on NATS)
 *   GET /readyz   200 when `readiness` says ready, else 503 (readiness); 200 without one
 */
export function serveMetrics(registry: MetricsRegistry, port: number, host: string, readiness?: () => Readiness): Promise<Server> {
  const server = createServer((req, res) => {
    if (req.url === "/metrics") return void res.writeHead(200, { "content-type": METRICS_CONTENT_TYPE }).end(registry.render());
    if (req.url === "/healthz") return void res.writeHead(200, { "content-type": "application/json" }).end('{"status":"ok"}');
    if (req.url === "/readyz") {
      const state = readiness?.() ?? { ready: true, detail: {} };
      res.writeHead(state.ready ? 200 : 503, { "content-type": "application/json" }).end(JSON.stringify({ status: state.ready ? "ready" : "not ready", ...state.detail }));
      return;
    }
    res.writeHead(404).end();
  });
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => resolve(server));
  });
}
