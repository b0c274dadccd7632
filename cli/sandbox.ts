import { constants } from "node:os";
import { CommandFailed, intOption, keyValueOptions, parseCommand, pickAction, UsageError } from "./args.js";
import { gatewayClient, gatewayOptions, gatewayOptionsUsage, type GatewayClient } from "./gateway-client.js";
import { formatTime, pageTable, printResult } from "./table.js";

// `tributary sandbox ...`: the sandboxes API (docs/platform.md, "Sandboxes") for people and
// scripts. `shell` is a terminal in a sandbox over the gateway's WebSocket
// (GET /v1/sandboxes/{id}/shell): the local terminal goes raw, keys go to the sandbox's shell, its
// output comes back, and a window resize is passed on.

export const sandboxUsage = `usage: tributary sandbox <action> [options]

  create [--json] [RESOURCES]               start a sandbox; prints its id (--json: the sandbox)
  list [--status STATUS] [--limit N] [--json]
  exec SANDBOX_ID [--cwd DIR] [--env K=V]... [--timeout S] [--stdin] [--json] [--] COMMAND [ARGS...]
                                            run a command, its output shown as it comes; exits with its
                                            exit code. One word is run by /bin/sh -c ('ls | wc -l');
                                            more are the argv. --stdin passes this command's stdin
  shell SANDBOX_ID                          a terminal in the sandbox (exit or Ctrl-D ends it; its exit
                                            code is this command's)
  stop SANDBOX_ID [--json]                  stop it (kept in the list as stopped)
  rm SANDBOX_ID [--json]                    stop it if need be, and remove it

RESOURCES (create; the same for tributary jobs create):
  --timeout S      seconds it may live (default 300)      --memory-mb N   memory limit (default 512)
  --idle-timeout S stopped after S s without a command    --disk-mb N     size of /workspace (default 512)
  --cpu-mhz N      CPU quota (1000: one core)            --network none|egress   (default none)
  --env K=V        an environment variable (repeatable)   --secret NAME   a project secret as a variable (repeatable)
  --metadata K=V   a label (repeatable; list filters on it in the API)

${gatewayOptionsUsage}`;

const ACTIONS = ["create", "list", "exec", "shell", "stop", "rm"] as const;
const MAX_SECONDS = 86_400;
const MAX_QUANTITY = 1_000_000;

/** The flags of a sandbox's resources and settings, shared by `sandbox create` and `jobs create`. */
export const sandboxSettingsOptions = {
  "cpu-mhz": { type: "string" },
  "memory-mb": { type: "string" },
  "disk-mb": { type: "string" },
  network: { type: "string" },
  env: { type: "string", multiple: true },
  secret: { type: "string", multiple: true },
  metadata: { type: "string", multiple: true },
} as const;

type SettingsValues = { [K in keyof typeof sandboxSettingsOptions]?: (typeof sandboxSettingsOptions)[K] extends { multiple: true } ? string[] : string };

/** Those flags as the fields of a create body (the API checks each bound and names the field it refuses). */
export function sandboxSettingsBody(command: string, values: SettingsValues): Record<string, unknown> {
  const body: Record<string, unknown> = {
    cpu_mhz: intOption(command, "cpu-mhz", values["cpu-mhz"], 1, MAX_QUANTITY),
    memory_mb: intOption(command, "memory-mb", values["memory-mb"], 1, MAX_QUANTITY),
    disk_mb: intOption(command, "disk-mb", values["disk-mb"], 1, MAX_QUANTITY),
    network: values.network,
  };
  if (values.env?.length) body.env = keyValueOptions(command, "env", values.env);
  if (values.metadata?.length) body.metadata = keyValueOptions(command, "metadata", values.metadata);
  if (values.secret?.length) body.secrets = values.secret;
  return body;
}

/** A command given as words: one word is a shell string (/bin/sh -c), more are the argv. */
export const commandOf = (words: string[]): string | string[] => (words.length === 1 ? words[0]! : words);

export async function runSandbox(argv: string[]): Promise<number> {
  const [action, rest] = pickAction(argv, { name: "tributary sandbox", usage: sandboxUsage, actions: ACTIONS });
  const name = `tributary sandbox ${action}`;
  switch (action) {
    case "create": {
      const { values } = parseCommand(rest, {
        name,
        usage: sandboxUsage,
        options: { ...gatewayOptions, ...sandboxSettingsOptions, json: { type: "boolean" }, timeout: { type: "string" }, "idle-timeout": { type: "string" } },
      });
      const body = {
        ...sandboxSettingsBody(name, values),
        timeout_seconds: intOption(name, "timeout", values.timeout, 1, MAX_SECONDS),
        idle_timeout_seconds: intOption(name, "idle-timeout", values["idle-timeout"], 1, MAX_SECONDS),
      };
      const sandbox = await gatewayClient(values).json("POST", "/v1/sandboxes", body);
      printResult(!!values.json, sandbox, `${sandbox.id}\n`);
      return 0;
    }
    case "list": {
      const { values } = parseCommand(rest, { name, usage: sandboxUsage, options: { ...gatewayOptions, json: { type: "boolean" }, status: { type: "string" }, limit: { type: "string" } } });
      const query = new URLSearchParams({ limit: String(intOption(name, "limit", values.limit, 1, 100) ?? 100) });
      if (values.status !== undefined) query.set("status", values.status);
      const page = await gatewayClient(values).json("GET", `/v1/sandboxes?${query}`);
      printResult(
        !!values.json,
        page,
        pageTable(page, ["ID", "STATUS", "CREATED", "EXPIRES", "NETWORK", "CPU MHZ", "MEMORY MB"], (s) => [s.id, s.termination_reason ? `${s.status} (${s.termination_reason})` : s.status, formatTime(s.created_at), formatTime(s.expires_at), s.network, String(s.resources?.cpu_mhz ?? "-"), String(s.resources?.memory_mb ?? "-")]),
      );
      return 0;
    }
    case "exec": {
      const { values, positionals } = parseCommand(rest, {
        name,
        usage: sandboxUsage,
        positionals: ["SANDBOX_ID", "COMMAND..."],
        options: { ...gatewayOptions, json: { type: "boolean" }, cwd: { type: "string" }, env: { type: "string", multiple: true }, timeout: { type: "string" }, stdin: { type: "boolean" } },
      });
      const [id, ...words] = positionals;
      const body = {
        command: commandOf(words),
        cwd: values.cwd,
        env: values.env?.length ? keyValueOptions(name, "env", values.env) : undefined,
        timeout_seconds: intOption(name, "timeout", values.timeout, 1, 3_600),
        stdin: values.stdin ? await readStdin() : undefined,
      };
      const client = gatewayClient(values);
      const path = `/v1/sandboxes/${encodeURIComponent(id!)}/exec`;
      if (values.json) {
        printResult(true, await client.json("POST", path, body), "");
        return 0;
      }
      return streamExec(client, path, body);
    }
    case "shell": {
      const { values, positionals } = parseCommand(rest, { name, usage: sandboxUsage, positionals: ["SANDBOX_ID"], options: { ...gatewayOptions } });
      // Loaded here: only the shell needs a WebSocket.
      const { default: WebSocket } = await import("ws");
      return shell(WebSocket, gatewayClient(values), positionals[0]!);
    }
    case "stop":
    case "rm": {
      const { values, positionals } = parseCommand(rest, { name, usage: sandboxUsage, positionals: ["SANDBOX_ID"], options: { ...gatewayOptions, json: { type: "boolean" } } });
      const path = `/v1/sandboxes/${encodeURIComponent(positionals[0]!)}`;
      const client = gatewayClient(values);
      const answer = action === "stop" ? await client.json("POST", `${path}/stop`) : await client.json("DELETE", path);
      printResult(!!values.json, answer, action === "stop" ? `${answer.id} ${answer.status}\n` : `${answer.id} removed\n`);
      return 0;
    }
  }
}

/** Runs the exec as SSE: output as it comes, then the command's exit code (a signal: 128 + its number, as a shell says). */
async function streamExec(client: GatewayClient, path: string, body: Record<string, unknown>): Promise<number> {
  const res = await client.request("POST", path, { body: JSON.stringify({ ...body, stream: true }), contentType: "application/json" });
  for await (const { event, data } of client.events(res)) {
    const payload = JSON.parse(data) as { data?: string; message?: string; exit_code?: number | null; signal?: string | null; timed_out?: boolean; truncated?: boolean; oom_killed?: boolean };
    if (event === "stdout") process.stdout.write(payload.data ?? "");
    else if (event === "stderr") process.stderr.write(payload.data ?? "");
    else if (event === "error") throw new CommandFailed(payload.message || "the command failed to run");
    else if (event === "exit") {
      if (payload.truncated) process.stderr.write("tributary: output truncated (beyond the sandbox's exec output bound)\n");
      if (payload.timed_out) process.stderr.write("tributary: the command timed out and was killed\n");
      else if (payload.oom_killed) process.stderr.write("tributary: the command ran out of memory and was killed\n");
      else if (payload.signal) process.stderr.write(`tributary: the command was killed by ${payload.signal}\n`);
      if (payload.exit_code !== null && payload.exit_code !== undefined) return payload.exit_code;
      if (payload.timed_out) return 124;
      const signal = payload.signal ? constants.signals[payload.signal as keyof typeof constants.signals] : undefined;
      return signal ? 128 + signal : 1;
    }
  }
  throw new CommandFailed("the gateway ended the output before the command's exit");
}

async function readStdin(): Promise<string> {
  if (process.stdin.isTTY) throw new UsageError("tributary sandbox exec: --stdin passes piped input; stdin is a terminal here");
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString("utf8");
}

/** A terminal in the sandbox until its shell exits: the shell's exit code. */
function shell(WebSocket: typeof import("ws").default, client: GatewayClient, id: string): Promise<number> {
  const stdin = process.stdin;
  const size = () => ({ rows: process.stdout.rows || 24, cols: process.stdout.columns || 80 });
  const ws = new WebSocket(client.websocketUrl(`/v1/sandboxes/${encodeURIComponent(id)}/shell?rows=${size().rows}&cols=${size().cols}`), {
    headers: { authorization: `Bearer ${client.target.key}` },
  });
  return new Promise<number>((resolve, reject) => {
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
        reject(new CommandFailed(`cannot open a shell (${res.statusCode}): ${message}`));
      });
    });
    ws.on("error", (err) => {
      restore();
      reject(new CommandFailed(`cannot reach the gateway at ${client.target.url} (${err.message}; from ${client.target.urlFrom})`));
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
