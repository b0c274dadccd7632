import { connect, type Socket } from "node:net";
import type { StreamResult } from "./sse-client.js";

// A lean streaming client for high stream counts: one TCP connection per stream, the HTTP/1.1
// request written by hand, and the chunked SSE response scanned for "data: " events without an
// HTTP library. It does the same job as SseLoadClient with a fraction of its CPU, so that the
// load generator disturbs the system it measures less when it shares the machine with it.

const DATA = "data: ";

/** A stream's result, with the time (performance.now()) at which each gap ended. */
export interface TimedStreamResult extends StreamResult {
  gapEndsAt: number[];
}

export function rawStreamChat(port: number, apiKey: string, body: Record<string, unknown>): Promise<TimedStreamResult> {
  const payload = JSON.stringify({ ...body, stream: true });
  return new Promise((resolve) => {
    const result: TimedStreamResult = { ok: false, status: 0, ttftMs: NaN, gapsMs: [], gapEndsAt: [], deltas: 0, completionTokens: 0 };
    const started = performance.now();
    let last = 0;
    let headerDone = false;
    let text = "";
    const socket: Socket = connect({ port, host: "127.0.0.1", noDelay: true });
    socket.setEncoding("utf8");
    socket.on("connect", () => {
      socket.write(
        `POST /v1/chat/completions HTTP/1.1\r\nhost: bench\r\nauthorization: Bearer ${apiKey}\r\ncontent-type: application/json\r\n` +
          `content-length: ${Buffer.byteLength(payload)}\r\nconnection: close\r\n\r\n${payload}`,
      );
    });
    socket.on("data", (chunk: string) => {
      text += chunk;
      if (!headerDone) {
        const end = text.indexOf("\r\n\r\n");
        if (end < 0) return;
        result.status = Number(text.slice(9, 12));
        text = text.slice(end + 4);
        headerDone = true;
      }
      // Events end with a blank line; chunk-size lines between them are skipped by looking for "data: ".
      let at: number;
      while ((at = text.indexOf("\n\n")) !== -1) {
        const event = text.slice(0, at);
        text = text.slice(at + 2);
        const d = event.indexOf(DATA);
        if (d < 0) continue;
        const data = event.slice(d + DATA.length);
        if (data === "[DONE]") result.ok = result.status === 200 && !result.error;
        else if (data.includes('"content":"') && !data.includes('"content":""')) {
          const now = performance.now();
          if (result.deltas === 0) result.ttftMs = now - started;
          else {
            result.gapsMs.push(now - last);
            result.gapEndsAt.push(now);
          }
          last = now;
          result.deltas++;
        } else if (data.startsWith('{"error"')) result.error = data;
      }
    });
    const done = () => {
      if (result.status !== 200 && !result.error) result.error = `HTTP ${result.status}`;
      resolve(result);
    };
    socket.on("end", done);
    socket.on("error", (err) => {
      result.error = err.message;
      resolve(result);
    });
  });
}
