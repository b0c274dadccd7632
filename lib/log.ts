import { logConfig, readConfig } from "./config.js";

// Logs on stderr, in a format decided once when this module loads (TRIBUTARY_LOG_FORMAT):
//   json    one JSON object per line: what `tributary start`'s supervisor, kubectl logs and log
//           shippers read;
//   pretty  one readable line per event, for a person at a terminal.
// `formatLogLine` is the one pretty rendering: of this process's records, and of the JSON lines
// `tributary start` reads from its processes (`renderChildLine`). Kept cheap: it is called on
// request paths.

export type LogLevel = "debug" | "info" | "warn" | "error";
const rank: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };

export type LogFormat = "pretty" | "json";

/** How this process writes its log lines. */
export interface LogStyle {
  format: LogFormat;
  /** The lowest level written; at `debug` a pretty line shows an error's stack too. */
  level: LogLevel;
  /** ANSI colours in pretty lines. */
  colors: boolean;
}

/** A parsed log line: `t`, `level`, `msg`, `component`, then the event's fields. */
export type LogRecord = Record<string, unknown>;

export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
  child(fields: Record<string, unknown>): Logger;
  enabled(level: LogLevel): boolean;
}

/** `auto` is pretty on a terminal, JSON anywhere else (a pipe, a file, a container's log). */
export function resolveLogFormat(setting: "pretty" | "json" | "auto", stderrIsTTY: boolean): LogFormat {
  return setting === "auto" ? (stderrIsTTY ? "pretty" : "json") : setting;
}

/** FORCE_COLOR (unless `0` or `false`) wins, then NO_COLOR, then whether the terminal shows colours. */
export function colorsWanted(env: { noColor: string; forceColor: string }, stream: { isTTY?: boolean; hasColors?: () => boolean }): boolean {
  if (env.forceColor !== "") return env.forceColor !== "0" && env.forceColor !== "false";
  if (env.noColor !== "") return false;
  return stream.isTTY === true && (stream.hasColors?.() ?? false);
}

const config = readConfig(logConfig);
const format = resolveLogFormat(config.format, process.stderr.isTTY === true);
/** The style of this process's log lines. */
export const logStyle: LogStyle = { format, level: config.level, colors: format === "pretty" && colorsWanted(config, process.stderr) };
const threshold = rank[logStyle.level];

let writeLine = (text: string): void => void process.stderr.write(text);

/**
 * Where this process's log lines go (stderr unless set): `tributary start` writes them around the
 * progress bars it updates in place on the terminal.
 */
export function setLogWriter(write: (text: string) => void): void {
  writeLine = write;
}

/** Writes text already formatted (lines ending in a newline) where this process's log lines go. */
export function writeLogText(text: string): void {
  writeLine(text);
}

function serializeError(err: unknown, depth = 0): unknown {
  if (!(err instanceof Error)) return err;
  const cause = err.cause !== undefined && depth < 3 ? serializeError(err.cause, depth + 1) : undefined;
  return { name: err.name, message: err.message, stack: err.stack, ...(cause !== undefined ? { cause } : {}) };
}

export function createLogger(component: string, base: Record<string, unknown> = {}): Logger {
  const bound = { component, ...base };
  const write = (level: LogLevel, msg: string, fields?: Record<string, unknown>) => {
    if (rank[level] < threshold) return;
    if (logStyle.format === "pretty") {
      writeLine(formatLogLine({ t: new Date(), level, msg, ...bound, ...fields }, component, logStyle) + "\n");
      return;
    }
    const record: Record<string, unknown> = { t: new Date().toISOString(), level, msg, ...bound };
    if (fields) for (const k in fields) record[k] = k === "err" ? serializeError(fields[k]) : fields[k];
    writeLine(JSON.stringify(record) + "\n");
  };
  return {
    debug: (m, f) => write("debug", m, f),
    info: (m, f) => write("info", m, f),
    warn: (m, f) => write("warn", m, f),
    error: (m, f) => write("error", m, f),
    child: (fields) => createLogger(component, { ...base, ...fields }),
    enabled: (level) => rank[level] >= threshold,
  };
}

/** A JSON log line parsed; undefined for any other line. */
export function parseLogRecord(line: string): LogRecord | undefined {
  if (!line.startsWith("{")) return undefined;
  try {
    const value: unknown = JSON.parse(line);
    return typeof value === "object" && value !== null && !Array.isArray(value) ? (value as LogRecord) : undefined;
  } catch {
    return undefined;
  }
}

const isLevel = (value: unknown): value is LogLevel => typeof value === "string" && Object.hasOwn(rank, value);

/**
 * A line another process wrote (a child of `tributary start`), as this process shows it in its own
 * style: a JSON record rendered (pretty) or passed on (json); any other line, whose level nobody
 * knows, counts as a warning (a crash's trace, a native library's complaint) and is shown prefixed
 * by `name` (pretty) or wrapped in a record (json). Undefined when below the style's level.
 */
export function renderChildLine(style: LogStyle, name: string, line: string, record = parseLogRecord(line)): string | undefined {
  const level = record && isLevel(record.level) ? record.level : "warn";
  if (rank[level] < rank[style.level]) return undefined;
  if (style.format === "json") return record ? line : JSON.stringify({ t: new Date().toISOString(), level, msg: line, component: name });
  if (record) return formatLogLine(record, name, style);
  return `${paint(style, DIM, clock(new Date()))} ${paint(style, CYAN, name.padEnd(LABEL_WIDTH))} ${line}`;
}

// The pretty line: "14:03:07 gateway      INFO  gateway listening host=127.0.0.1 port=8080".

const LABEL_WIDTH = 12;
const VALUE_MAX = 160;
const RESET = "\x1b[0m";
const DIM = "\x1b[2m";
const CYAN = "\x1b[36m";
const levelColor: Record<LogLevel, string> = { debug: "\x1b[90m", info: "\x1b[32m", warn: "\x1b[33m", error: "\x1b[31m" };
/** Fields that name the process or the line itself: the label and the columns show them already. */
const shownElsewhere = new Set(["t", "level", "msg", "component", "pid", "gatewayId", "hostId"]);

const paint = (style: LogStyle, color: string, text: string) => (style.colors ? color + text + RESET : text);
const two = (n: number) => (n < 10 ? "0" : "") + n;
const clock = (d: Date) => `${two(d.getHours())}:${two(d.getMinutes())}:${two(d.getSeconds())}`;

/** An error (an Error, or one serialized in a JSON line) as one line: "Name: message (cause: ...)". */
function errorText(err: unknown): string {
  if (typeof err !== "object" || err === null) return String(err);
  const { name, message, cause } = err as { name?: unknown; message?: unknown; cause?: unknown };
  if (typeof message !== "string") return compact(err);
  const head = typeof name === "string" && name !== "Error" ? `${name}: ${message}` : message;
  return cause !== undefined && cause !== null ? `${head} (cause: ${errorText(cause)})` : head;
}

function errorStack(err: unknown): string[] {
  const stack = typeof err === "object" && err !== null ? (err as { stack?: unknown }).stack : undefined;
  return typeof stack === "string" ? stack.split("\n").filter((l) => /^\s+at /.test(l)) : [];
}

function compact(value: unknown): string {
  let text: string;
  try {
    text = JSON.stringify(value) ?? String(value);
  } catch {
    text = String(value);
  }
  return text.length > VALUE_MAX ? text.slice(0, VALUE_MAX - 1) + "…" : text;
}

const bare = /^[^\s"=\\]+$/;

function formatValue(value: unknown): string {
  if (typeof value === "string") return bare.test(value) ? value : compact(value);
  if (typeof value === "number" || typeof value === "boolean" || typeof value === "bigint") return String(value);
  return compact(value);
}

/**
 * One record as a pretty line: local time, `label` (the process or component), level, message,
 * then the event's fields as key=value (long values cut short). An error field shows its message
 * in full, the lines after its first on indented lines below; its stack (and a `stack` field)
 * follows only when the style's level is `debug`.
 */
export function formatLogLine(record: LogRecord, label: string, style: LogStyle): string {
  const level = isLevel(record.level) ? record.level : "info";
  const time = record.t instanceof Date ? record.t : new Date(typeof record.t === "string" ? record.t : Date.now());
  let line = `${paint(style, DIM, clock(Number.isNaN(time.getTime()) ? new Date() : time))} ${paint(style, CYAN, label.padEnd(LABEL_WIDTH))} ${paint(style, levelColor[level], level.toUpperCase().padEnd(5))} ${String(record.msg ?? "")}`;
  // Lines below the line: the rest of a message of several lines (in full), stacks at debug.
  let below: string[] = [];
  for (const key in record) {
    const value = record[key];
    if (value === undefined || shownElsewhere.has(key)) continue;
    if (key === "stack") {
      if (style.level === "debug") below = below.concat(errorStack({ stack: value }));
      continue;
    }
    if (key === "err" || value instanceof Error) {
      const [first, ...rest] = errorText(value).split("\n");
      line += ` ${paint(style, DIM, key + "=")}${bare.test(first!) ? first : JSON.stringify(first)}`;
      below = below.concat(rest);
      if (style.level === "debug") below = below.concat(errorStack(value));
      continue;
    }
    line += ` ${paint(style, DIM, key + "=")}${formatValue(value)}`;
  }
  return below.length > 0 ? line + "\n" + below.map((l) => "    " + l.trim()).join("\n") : line;
}
