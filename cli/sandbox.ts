import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import WebSocket from "ws";
import { commonConfig, gatewayConfig, optionToUndefined, readConfig } from "../lib/config.js";

// `tributary sandbox shell <id>`: a terminal in a sandbox, over the gateway's WebSocket
// (GET /v1/sandboxes/{id}/shell). The local terminal goes raw; keys go to the sandbox's shell,
// its output comes back, and a window resize is passed on.

export const sandboxUsage = `usage: tributary sandbox shell SANDBOX_ID [--url http://127.0.0.1:8080] [--key KEY]

  The key is --key, else TRIBUTARY_API_KEY, else $TRIBUTARY_HOME/api-key (the local stack's).
  The shell ends with exit (or Ctrl-D); its exit code is this command's.
`;

export async function runSandbox(argv: string[]): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs({ args: argv, allowPositionals: true, options: { url: { type: "string" }, key: { type: "string" }, help: { type: "boolean", short: "h", default: false } } });
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n\n${sandboxUsage}`);
    return 2;
  }
  const [action, id] = parsed.positionals;
  if (parsed.values.help || action !== "shell" || !id) {
    process.stderr.write(sandboxUsage);
    return parsed.values.help ? 0 : 2;
  }
  const gateway = readConfig(gatewayConfig);
  const home = readConfig(commonConfig).home;
  const keyFile = join(home, "api-key");
  const key = parsed.values.key ?? optionToUndefined(gateway.apiKey) ?? (existsSync(keyFile) ? readFileSync(keyFile, "utf8").trim() : undefined);
  if (!key) {
    process.stderr.write("no API key: pass --key or set TRIBUTARY_API_KEY\n");
    return 2;
  }
  const base = (parsed.values.url ?? `http://${gateway.host}:${gateway.port}`).replace(/^http/, "ws").replace(/\/+$/, "");
  const stdin = process.stdin;
  const size = () => ({ rows: process.stdout.rows || 24, cols: process.stdout.columns || 80 });
  const ws = new WebSocket(`${base}/v1/sandboxes/${encodeURIComponent(id)}/shell?rows=${size().rows}&cols=${size().cols}`, { headers: { authorization: `Bearer ${key}` } });
  return new Promise<number>((resolve) => {
    let exitCode = 1;
    const restore = () => {
      if (stdin.isTTY) stdin.setRawMode(false);
      stdin.pause();
    };
    ws.on("unexpected-response", (_req, res) => {
      let body = "";
      res.on("data", (d: Buffer) => (body += d.toString()));
      res.on("end", () => {
        let message = body;
        try {
          message = (JSON.parse(body) as { error: { message: string } }).error.message;
        } catch {
          // not an API error body
        }
        process.stderr.write(`cannot open a shell (${res.statusCode}): ${message}\n`);
        resolve(1);
      });
    });
    ws.on("error", (err) => {
      restore();
      process.stderr.write(`connection failed: ${err.message}\n`);
      resolve(1);
    });
    ws.on("open", () => {
      if (stdin.isTTY) stdin.setRawMode(true);
      stdin.on("data", (chunk: Buffer) => ws.send(chunk, { binary: true }));
      stdin.resume();
      process.stdout.on("resize", () => ws.send(JSON.stringify({ type: "resize", ...size() })));
    });
    ws.on("message", (data: Buffer, isBinary: boolean) => {
      if (isBinary) {
        process.stdout.write(data);
        return;
      }
      const control = JSON.parse(data.toString()) as { type: string; exit_code?: number | null; message?: string };
      if (control.type === "exit") exitCode = control.exit_code ?? 1;
      if (control.type === "error") process.stderr.write(`\r\n${control.message}\r\n`);
    });
    ws.on("close", () => {
      restore();
      resolve(exitCode);
    });
  });
}
