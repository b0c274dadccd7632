import { accessSync, constants, statSync } from "node:fs";
import { resolve } from "node:path";
import { CatalogError, singleModelOf, type SingleModel } from "../modules/catalog/mod.js";
import { intOption, parseCommand, UsageError } from "./args.js";

// `tributary start`'s flags. Each maps onto a setting the stack already reads from the environment
// (docs/configuration.md), so the flag and the variable mean the same; the flag wins.

export const startUsage = `usage: tributary start [--model GGUF] [--catalog FILE] [--port N] [--host ADDRESS]

Runs the whole stack on this machine: an embedded nats-server (unless NATS_URL names one), the
actor host, a runner per model, a sandbox host and the gateway. Ctrl-C drains and stops it.

  --model GGUF      serve this one model: a local .gguf file, or the https://huggingface.co/
                    address of one (.../resolve/main/FILE.gguf, downloaded once). Its id is the
                    file's name: local/stories260K for stories260K.gguf
  --catalog FILE    the model catalog (TRIBUTARY_CATALOG; default catalog/default.yaml)
  --port N          the gateway's port, 0 for any free one (TRIBUTARY_PORT; default 8080)
  --host ADDRESS    the gateway's bind address (TRIBUTARY_HOST; default 127.0.0.1)

Every other setting is an environment variable: docs/configuration.md.
`;

export interface StartOptions {
  /** Settings given as flags, as the environment variables they stand for. */
  env: Record<string, string>;
  /** --model: the one model to serve. */
  model?: SingleModel;
}

/** The flags of `tributary start`, checked; a UsageError names what is wrong. */
export function parseStartOptions(argv: readonly string[]): StartOptions {
  const { values } = parseCommand(argv, {
    name: "tributary start",
    usage: startUsage,
    options: { model: { type: "string" }, catalog: { type: "string" }, port: { type: "string" }, host: { type: "string" } },
  });
  const env: Record<string, string> = {};
  const port = intOption("tributary start", "port", values.port, 0, 65535);
  if (port !== undefined) env.TRIBUTARY_PORT = String(port);
  if (values.host !== undefined) {
    const host = values.host.trim().replace(/^\[(.*)\]$/, "$1");
    if (!/^[A-Za-z0-9.:%-]+$/.test(host)) throw new UsageError(`tributary start: --host: expected an address such as 127.0.0.1, 0.0.0.0 or ::1, got '${values.host}'`);
    env.TRIBUTARY_HOST = host;
  }
  if (values.model !== undefined && values.catalog !== undefined) throw new UsageError("tributary start: --model and --catalog exclude each other (--model serves one model without a catalog)", startUsage);
  if (values.catalog !== undefined) env.TRIBUTARY_CATALOG = readableFile(values.catalog, "--catalog");
  if (values.model === undefined) return { env };
  try {
    return { env, model: singleModelOf(values.model) };
  } catch (err) {
    if (err instanceof CatalogError) throw new UsageError(`tributary start: --model: ${err.message}`);
    throw err;
  }
}

/** The absolute path of a file that exists and can be read. */
function readableFile(path: string, option: string): string {
  const absolute = resolve(path);
  try {
    if (!statSync(absolute).isFile()) throw new UsageError(`tributary start: ${option}: ${absolute} is not a file`);
    accessSync(absolute, constants.R_OK);
  } catch (err) {
    if (err instanceof UsageError) throw err;
    const code = (err as NodeJS.ErrnoException).code;
    throw new UsageError(`tributary start: ${option}: ${code === "ENOENT" ? `no such file: ${absolute}` : code === "EACCES" ? `cannot read ${absolute} (permission denied)` : (err as Error).message}`);
  }
  return absolute;
}
