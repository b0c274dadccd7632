import type uWS from "uWebSockets.js";
import { randomToken } from "../../lib/ids.js";
import type { Logger } from "../../lib/log.js";
import type { Authenticator } from "../../modules/accounts/mod.js";
import { asDomainError, errors } from "../../modules/errors/mod.js";
import { openAIError } from "../../modules/openai/mod.js";
import type { ExecEvent, SandboxService, ShellSession } from "../../modules/sandboxes/mod.js";
import { statusLine } from "../http/status-line.js";

/** Output a client may leave unread before its session is ended (a terminal is never that far behind). */
const MAX_BUFFERED_BYTES = 4 * 1024 * 1024;
/** One input frame (a paste); the size of a terminal. */
const MAX_FRAME_BYTES = 64 * 1024;
const MAX_TERMINAL = 1_000;

interface ShellSocket {
  project: string;
  sandboxId: string;
  rows: number;
  cols: number;
  session?: ShellSession;
  /** Input that came before the shell started (bounded by the frame limit x a few frames). */
  early: Buffer[];
  closed: boolean;
}

function bounded(value: string | null, fallback: number, param: string): number {
  if (value === null) return fallback;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1 || n > MAX_TERMINAL) throw errors.invalidParam(param, `Invalid value for '${param}': expected an integer between 1 and ${MAX_TERMINAL}.`);
  return n;
}

/**
 * GET /v1/sandboxes/{id}/shell upgraded to a WebSocket: an interactive shell on a terminal of its
 * own in the sandbox (bash -i on a pty, the sandbox's limits). The key is checked on the upgrade
 * (Authorization header), and another project's sandbox is a 404 there. Binary frames from the
 * client are keyboard input; text frames are JSON: {"type": "resize", "rows", "cols"}. The server
 * sends the terminal's output as binary frames and, when the shell ends, a text frame
 * {"type": "exit", "exit_code", "signal"} before closing (1000).
 */
export function registerShellRoute(app: uWS.TemplatedApp, deps: { sandboxes: SandboxService; authenticator: Authenticator; log: Logger }): void {
  app.ws<ShellSocket>("/v1/sandboxes/:id/shell", {
    maxPayloadLength: MAX_FRAME_BYTES,
    idleTimeout: 120,
    maxBackpressure: MAX_BUFFERED_BYTES,
    upgrade: (res, req, context) => {
      const headers: Record<string, string> = {};
      req.forEach((k, v) => (headers[k] = v));
      const sandboxId = decodeURIComponent(req.getParameter(0) ?? "");
      const query = new URLSearchParams(req.getQuery() ?? "");
      const key = req.getHeader("sec-websocket-key");
      const protocol = req.getHeader("sec-websocket-protocol");
      const extensions = req.getHeader("sec-websocket-extensions");
      let aborted = false;
      res.onAborted(() => (aborted = true));
      (async (): Promise<ShellSocket> => {
        const principal = await deps.authenticator.authenticate(headers.authorization, headers);
        const rows = bounded(query.get("rows"), 24, "rows");
        const cols = bounded(query.get("cols"), 80, "cols");
        await deps.sandboxes.running(principal.projectId, sandboxId);
        return { project: principal.projectId, sandboxId, rows, cols, early: [], closed: false };
      })().then(
        (data) => {
          if (!aborted) res.cork(() => res.upgrade(data, key, protocol, extensions, context));
        },
        (err: unknown) => {
          if (aborted) return;
          const { status, body } = openAIError(asDomainError(err), `req_${randomToken(16)}`);
          res.cork(() => res.writeStatus(statusLine(status)).writeHeader("content-type", "application/json").end(JSON.stringify(body)));
        },
      );
    },
    open: (ws) => {
      const data = ws.getUserData();
      const onEvent = (event: ExecEvent) => {
        if (data.closed) return;
        if (event.t === "stdout" || event.t === "stderr") {
          ws.send(Buffer.from(event.d, "base64"), true);
          if (ws.getBufferedAmount() > MAX_BUFFERED_BYTES) {
            data.session?.kill();
            ws.end(1013, "client too slow");
          }
          return;
        }
        const payload = event.t === "exit" ? { type: "exit", exit_code: event.exit_code, signal: event.signal } : { type: "error", message: "message" in event ? event.message : "" };
        ws.send(JSON.stringify(payload), false);
        ws.end(1000, "shell ended");
      };
      deps.sandboxes.openShell(data.project, data.sandboxId, { rows: data.rows, cols: data.cols }, onEvent).then(
        (session) => {
          if (data.closed) {
            session.kill();
            session.close();
            return;
          }
          data.session = session;
          for (const input of data.early.splice(0)) session.input(input);
        },
        (err: unknown) => {
          if (data.closed) return;
          ws.send(JSON.stringify({ type: "error", message: asDomainError(err).message }), false);
          ws.end(1011, "the shell could not start");
        },
      );
    },
    message: (ws, message, isBinary) => {
      const data = ws.getUserData();
      // uWS reuses the message's memory after this call: copy it.
      const bytes = Buffer.from(message.slice(0));
      if (isBinary) {
        if (data.session) data.session.input(bytes);
        else if (data.early.length < 16) data.early.push(bytes);
        return;
      }
      try {
        const control = JSON.parse(bytes.toString("utf8")) as { type?: unknown; rows?: unknown; cols?: unknown };
        if (control.type === "resize" && Number.isInteger(control.rows) && Number.isInteger(control.cols)) {
          const rows = Math.min(MAX_TERMINAL, Math.max(1, control.rows as number));
          const cols = Math.min(MAX_TERMINAL, Math.max(1, control.cols as number));
          data.session?.resize(rows, cols);
        }
      } catch {
        // not a control frame: ignored
      }
    },
    close: (ws) => {
      const data = ws.getUserData();
      data.closed = true;
      data.session?.kill();
      data.session?.close();
    },
  });
}
