// The small JSON route the hosted-app benches serve: a plain ASGI app, and the keep-alive load
// client that calls it.
import { Agent, request } from "node:http";

/** An ASGI app answering every HTTP request with BODY (Python's json.dumps of it: 47 bytes). */
export const JSON_APP = `
import json
BODY = json.dumps({"ok": True, "items": list(range(8))}).encode()
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(BODY)).encode())]})
    await send({"type": "http.response.body", "body": BODY})
`;

/** The bytes JSON_APP answers. */
export const JSON_APP_BODY = '{"ok": true, "items": [0, 1, 2, 3, 4, 5, 6, 7]}';

/** `clients` keep-alive loops of GET /; each `run(ms)` returns the latencies (ms) of the 200s and counts the rest. */
export function keepAliveLoops(port: number, clients: number, headers: Record<string, string> = {}) {
  const agent = new Agent({ keepAlive: true, maxSockets: clients });
  const once = () =>
    new Promise<number>((resolve) => {
      const started = performance.now();
      const req = request({ host: "127.0.0.1", port, path: "/", agent, headers }, (res) => {
        res.resume();
        res.on("end", () => resolve(res.statusCode === 200 ? performance.now() - started : -1));
      });
      req.on("error", () => resolve(-1));
      req.end();
    });
  return {
    async run(ms: number): Promise<{ latencies: number[]; errors: number }> {
      const latencies: number[] = [];
      let errors = 0;
      const until = performance.now() + ms;
      await Promise.all(
        Array.from({ length: clients }, async () => {
          while (performance.now() < until) {
            const latency = await once();
            if (latency < 0) errors++;
            else latencies.push(latency);
          }
        }),
      );
      return { latencies, errors };
    },
    close: () => agent.destroy(),
  };
}
