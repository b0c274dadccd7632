// What `tributary start` prints while the stack comes up: "up" only once the gateway listens
// and every catalog model has a runner that can serve, and until then which models are still
// downloading or loading, from the runners' own log lines.

export interface StartupReportOptions {
  models: readonly string[];
  url: (port: number) => string;
  /** The lines printed once everything can serve (after the "up" line). */
  footer: string;
  write: (text: string) => void;
}

export class StartupReport {
  private port: number | undefined;
  private readonly ready = new Set<string>();
  private readonly progress = new Map<string, string>();
  private announced = false;
  private lastWaiting = "";

  constructor(private readonly options: StartupReportOptions) {}

  /** A log line of the gateway: each gateway that starts (a restarted one too) is announced once it can serve. */
  gatewayLine(line: string): void {
    const rec = parse(line);
    if (rec?.msg !== "gateway listening" || typeof rec.port !== "number") return;
    this.port = rec.port;
    this.announced = false;
    this.lastWaiting = "";
    this.update();
  }

  /** A log line of a runner of `model`. */
  runnerLine(model: string, line: string): void {
    const rec = parse(line);
    if (!rec) return;
    if (rec.msg === "runner ready") this.ready.add(model);
    else if (rec.msg === "model download progress")
      this.progress.set(model, rec.percent !== undefined ? `downloading ${rec.percent}% of ${rec.totalMb} MB` : `downloading ${rec.mb} MB`);
    else if (rec.msg === "model downloaded") this.progress.set(model, "loading");
    else if (rec.msg === "model load failed; retrying") this.progress.set(model, `failed (${String(rec.err ?? "see the log")}), retrying`);
    else return;
    this.update();
  }

  private update(): void {
    if (this.announced || this.port === undefined) return;
    const waiting = this.options.models.filter((m) => !this.ready.has(m));
    if (waiting.length === 0) {
      this.announced = true;
      this.options.write(`\nTributary is up: ${this.options.url(this.port)}  ${this.options.footer}`);
      return;
    }
    const text = waiting.map((m) => `${m} (${this.progress.get(m) ?? "loading"})`).join(", ");
    if (text === this.lastWaiting) return;
    this.lastWaiting = text;
    this.options.write(`Tributary is starting at ${this.options.url(this.port)}: waiting for ${text}\n`);
  }
}

function parse(line: string): Record<string, unknown> | undefined {
  if (!line.startsWith("{")) return undefined;
  try {
    return JSON.parse(line) as Record<string, unknown>;
  } catch {
    return undefined;
  }
}
