import { downloadFailureTags } from "../modules/catalog/mod.js";
import type { LogRecord } from "../lib/log.js";

// What `tributary start` tells a person while the stack comes up, from its processes' log
// records: each model's download (a progress bar redrawn in place on a terminal, else a line
// every 10%), why a model cannot be downloaded or loaded and the way out, and "up" only once the
// gateway listens and every catalog model has a runner that can serve.

export interface StartupReportOptions {
  models: readonly string[];
  /** The API's base URL at the gateway's port. */
  url: (port: number) => string;
  apiKey: string;
  /** The lines printed after "Tributary is up" (the dashboard, the models, accounts), one each. */
  footer: (port: number) => string[];
  /** The catalog file, as the way out of a failed download names it. */
  catalogPath: string;
  /** Prints whole lines. */
  print: (text: string) => void;
  /** Shows status lines in place of the previous ones (a terminal); absent: progress is printed as lines. */
  status?: (lines: string[]) => void;
}

/** The port of a gateway's "gateway listening" record (the one record that says where it serves). */
export function listeningPort(record: LogRecord): number | undefined {
  return record.msg === "gateway listening" && typeof record.port === "number" ? record.port : undefined;
}

type ModelState =
  | { phase: "loading" }
  | { phase: "downloading"; mb: number; totalMb?: number; percent?: number }
  | { phase: "failed"; download: boolean }
  | { phase: "ready" };

const BAR_WIDTH = 24;

export class StartupReport {
  private port: number | undefined;
  private readonly states = new Map<string, ModelState>();
  /** Per model, the last tenth of its download printed as a line (no terminal). */
  private readonly printedStep = new Map<string, number>();
  private wayOutShown = false;
  private announced = false;
  private lastWaiting = "";

  constructor(private readonly options: StartupReportOptions) {
    for (const m of options.models) this.states.set(m, { phase: "loading" });
  }

  /** A log record of the gateway: each gateway that starts (a restarted one too) is announced once it can serve. */
  fromGateway(record: LogRecord): void {
    const port = listeningPort(record);
    if (port === undefined) return;
    this.port = port;
    this.announced = false;
    this.lastWaiting = "";
    this.update();
  }

  /** Whether the report shows what a runner's record says (a download's progress, a failure): a terminal need not show the log line too. */
  static shows(record: LogRecord): boolean {
    return record.msg === "model download progress" || record.msg === "model load failed; retrying";
  }

  /** A log record of a runner of `model`. */
  fromRunner(model: string, record: LogRecord): void {
    switch (record.msg) {
      case "runner ready":
        this.states.set(model, { phase: "ready" });
        break;
      case "model download progress":
        this.progress(model, record);
        break;
      case "model downloaded":
        this.states.set(model, { phase: "loading" });
        this.printedStep.delete(model);
        this.options.print(`${model}: downloaded; loading\n`);
        break;
      case "model load failed; retrying":
        this.failed(model, record);
        break;
      default:
        return;
    }
    this.drawStatus();
    this.update();
  }

  private progress(model: string, record: LogRecord): void {
    const mb = typeof record.mb === "number" ? record.mb : 0;
    const totalMb = typeof record.totalMb === "number" ? record.totalMb : undefined;
    const percent = typeof record.percent === "number" ? record.percent : undefined;
    this.states.set(model, { phase: "downloading", mb, totalMb, percent });
    if (this.options.status) return;
    // Without a terminal to redraw on, a line at each tenth (each 100 MB when the size is unknown).
    const step = percent !== undefined ? Math.floor(percent / 10) : Math.floor(mb / 100);
    const last = this.printedStep.get(model);
    if (last !== undefined && step <= last) return;
    this.printedStep.set(model, step);
    this.options.print(`${model}: ${downloadText({ mb, totalMb, percent })}\n`);
  }

  private failed(model: string, record: LogRecord): void {
    const cause = typeof record.cause === "string" ? record.cause : "";
    const download = downloadFailureTags.has(cause);
    this.states.set(model, { phase: "failed", download });
    this.printedStep.delete(model);
    const retry = typeof record.retryInMs === "number" ? `; retrying in ${seconds(record.retryInMs)} s` : "";
    this.options.print(`${model}: ${download ? "cannot download" : "cannot load"} (${typeof record.err === "string" ? record.err : "see the log"})${retry}\n`);
    // The same way out for every model: said once.
    if (cause === "NoNetwork" && !this.wayOutShown) {
      this.wayOutShown = true;
      this.options.print(
        "To serve now without a network: TRIBUTARY_CATALOG=catalog/test.yaml npm start (the tiny test model),\n" +
          `or tributary start --model /path/to/model.gguf, or edit the catalog file ${this.options.catalogPath}\n`,
      );
    }
  }

  private drawStatus(): void {
    if (!this.options.status) return;
    const downloading = [...this.states].filter((e): e is [string, Extract<ModelState, { phase: "downloading" }>] => e[1].phase === "downloading");
    const nameWidth = Math.max(0, ...downloading.map(([m]) => m.length));
    this.options.status(downloading.map(([m, s]) => `${m.padEnd(nameWidth)}  ${s.percent !== undefined ? `${bar(s.percent)} ` : ""}${downloadText(s)}`));
  }

  private update(): void {
    if (this.announced || this.port === undefined) return;
    const waiting = [...this.states].filter(([, s]) => s.phase !== "ready");
    if (waiting.length === 0) {
      this.announced = true;
      this.options.status?.([]);
      const footer = this.options.footer(this.port).map((l) => l + "\n").join("");
      this.options.print(`\nTributary is up: ${this.options.url(this.port)}  (API key: ${this.options.apiKey})\n${footer}\n`);
      return;
    }
    const text = waiting.map(([m, s]) => `${m} (${phaseText(s)})`).join(", ");
    if (text === this.lastWaiting) return;
    this.lastWaiting = text;
    this.options.print(`Tributary is starting at ${this.options.url(this.port)}: waiting for ${text}\n`);
  }
}

function phaseText(state: ModelState): string {
  if (state.phase === "failed") return state.download ? "cannot download" : "cannot load";
  return state.phase;
}

function downloadText(s: { mb: number; totalMb?: number; percent?: number }): string {
  return s.percent !== undefined && s.totalMb !== undefined ? `downloading ${s.percent}% of ${s.totalMb} MB` : `downloading ${s.mb} MB`;
}

function bar(percent: number): string {
  const filled = Math.round((Math.min(Math.max(percent, 0), 100) / 100) * BAR_WIDTH);
  return "[" + "#".repeat(filled) + "-".repeat(BAR_WIDTH - filled) + "]";
}

/** 2000 → "2", 1500 → "1.5". */
const seconds = (ms: number) => String(Math.round(ms / 100) / 10);
