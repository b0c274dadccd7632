import { logConfig, readConfig } from "./config.js";

// Structured logs: one JSON object per line on stderr, so that the supervisor, kubectl logs
// and log shippers can all read them. Kept tiny on purpose: it is called on request paths.

export type LogLevel = "debug" | "info" | "warn" | "error";
const rank: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };

const threshold = rank[readConfig(logConfig).level];

export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
  child(fields: Record<string, unknown>): Logger;
  enabled(level: LogLevel): boolean;
}

function serializeError(err: unknown): unknown {
  if (err instanceof Error) return { name: err.name, message: err.message, stack: err.stack };
  return err;
}

export function createLogger(component: string, base: Record<string, unknown> = {}): Logger {
  const bound = { component, ...base };
  const write = (level: LogLevel, msg: string, fields?: Record<string, unknown>) => {
    if (rank[level] < threshold) return;
    const record: Record<string, unknown> = { t: new Date().toISOString(), level, msg, ...bound };
    if (fields) for (const k in fields) record[k] = k === "err" ? serializeError(fields[k]) : fields[k];
    process.stderr.write(JSON.stringify(record) + "\n");
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
