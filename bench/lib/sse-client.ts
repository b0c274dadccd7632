import http from "node:http";

// A streaming chat-completions client for load tests: keep-alive sockets, an SSE parser that
// works on raw chunks, and per-request timings (time to first token, gaps between tokens).

export interface StreamResult {
  ok: boolean;
  status: number;
  error?: string;
  /** ms from sending the request to the first content delta. */
  ttftMs: number;
  /** ms between consecutive content deltas. */
  gapsMs: number[];
  /** Content deltas received. */
  deltas: number;
  /** Completion tokens from the usage chunk (0 if absent). */
  completionTokens: number;
  /** Prompt tokens from the usage chunk (NaN if absent): shows that servers compared render the same prompt. */
  promptTokens?: number;
}

export class SseLoadClient {
  private readonly agent: http.Agent;

  constructor(private readonly host: string, private readonly port: number, private readonly apiKey: string) {
    this.agent = new http.Agent({ keepAlive: true, maxSockets: Infinity, maxFreeSockets: 4096 });
  }

  close(): void {
    this.agent.destroy();
  }

  /** `onDelta` hears the time (performance.now()) of every content delta as it arrives. */
  streamChat(body: Record<string, unknown>, recordGaps = true, onDelta?: (at: number) => void, retried = false): Promise<StreamResult> {
    const payload = JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true } });
    return new Promise((resolve) => {
      const started = performance.now();
      const result: StreamResult = { ok: false, status: 0, ttftMs: NaN, gapsMs: [], deltas: 0, completionTokens: 0 };
      let last = 0;
      let buffer = "";
      const req = http.request(
        {
          host: this.host,
          port: this.port,
          method: "POST",
          path: "/v1/chat/completions",
          agent: this.agent,
          headers: { "content-type": "application/json", authorization: `Bearer ${this.apiKey}`, "content-length": Buffer.byteLength(payload) },
        },
        (res) => {
          result.status = res.statusCode ?? 0;
          res.setEncoding("utf8");
          res.on("data", (chunk: string) => {
            buffer += chunk;
            let end: number;
            while ((end = buffer.indexOf("\n\n")) !== -1) {
              const event = buffer.slice(0, end);
              buffer = buffer.slice(end + 2);
              if (!event.startsWith("data: ")) continue;
              const data = event.slice(6);
              if (data === "[DONE]") {
                result.ok = result.status === 200 && !result.error;
                continue;
              }
              if (data.includes('"content":"') && !data.includes('"content":""')) {
                const now = performance.now();
                if (result.deltas === 0) result.ttftMs = now - started;
                else if (recordGaps) result.gapsMs.push(now - last);
                last = now;
                result.deltas++;
                onDelta?.(now);
              } else if (data.startsWith('{"error"')) {
                result.error = data;
              } else if (data.includes('"usage":{')) {
                const usage = (JSON.parse(data) as { usage: { completion_tokens: number; prompt_tokens?: number } }).usage;
                result.completionTokens = usage.completion_tokens;
                result.promptTokens = usage.prompt_tokens ?? NaN;
              }
            }
          });
          res.on("end", () => {
            if (result.status !== 200 && !result.error) result.error = `HTTP ${result.status}: ${buffer.slice(0, 200)}`;
            // A 200 stream the server ended without its [DONE] (a failure it could not report in-stream).
            else if (!result.ok && !result.error) result.error = `the stream ended without [DONE] after ${result.deltas} content deltas`;
            resolve(result);
          });
          res.on("error", (err) => {
            result.error = err.message;
            resolve(result);
          });
        },
      );
      req.on("error", (err) => {
        // A kept-alive socket the server closed after its last answer (llama-server's HTTP library
        // does so after every streamed response): retried once on a new socket, as HTTP clients do
        // for a request that never reached a server, so the comparison does not count the client's
        // stale sockets as the server's errors.
        if (!retried && req.reusedSocket && result.status === 0) {
          resolve(this.streamChat(body, recordGaps, onDelta, true));
          return;
        }
        result.error = err.message;
        resolve(result);
      });
      req.end(payload);
    });
  }
}
