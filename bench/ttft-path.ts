// Where the stack's time to first token goes at concurrency 1: the same request, one at a time,
// (a) to the engine in process, (b) straight to the runner process over NATS (protobuf, two NATS
// hops, no gateway), (c) through the gateway over HTTP/SSE on one keep-alive connection. The
// differences split the TTFT the stack adds (stack-vs-engine's target) between NATS and gateway;
// (d) the gateway again through Node's http client shows what a client library adds on top.
//   node dist/bench/ttft-path.js [--requests 200] [--rounds 2] [--max-tokens 8,128]
import { connect as tcpConnect, type Socket } from "node:net";
import { parseArgs } from "node:util";
import type { NatsConnection } from "@nats-io/transport-node";
import { loadCatalog } from "../modules/catalog/mod.js";
import { catalogOverridesConfig, readConfig } from "../lib/config.js";
import { subjects } from "../lib/nats/subjects.js";
import { GenerateRequest, Priority, RunnerEvent, RunnerEventBatch } from "../proto/gen/tributary/v1/inference.js";
import { benchLayout, placeSelf } from "./lib/cpu-layout.js";
import { InProcessEngine } from "./lib/engine-baseline.js";
import { SseLoadClient } from "./lib/sse-client.js";
import { startPlacedStack, TEST_KEY, TEST_MODEL, testCatalog } from "./lib/processes.js";
import { fmt, percentile } from "./lib/stats.js";
import { machineLine, markdownTable, writeResults } from "./lib/table.js";

const { values } = parseArgs({
  options: {
    requests: { type: "string", default: "200" },
    rounds: { type: "string", default: "2" },
    "max-tokens": { type: "string", default: "8,128" },
  },
});
const requests = Number(values.requests);
const rounds = Number(values.rounds);
const maxTokensLevels = values["max-tokens"]!.split(",").map(Number);
const prompt = "Once upon a time, in a small village by the river,";
const unlimited = { requests_per_minute: 10_000_000, tokens_per_minute: 1_000_000_000 };
const env = { TRIBUTARY_MODEL_OVERRIDES: JSON.stringify({ [TEST_MODEL]: { slots: 64, queue_limit: 1024, rate_limits: unlimited } }) };
const spec = loadCatalog(testCatalog, readConfig(catalogOverridesConfig, { ...process.env, ...env })).find((m) => m.id === TEST_MODEL)!;
const layout = benchLayout(spec.threads);

/**
 * One streamed request straight to a runner over NATS: ms to the first non-empty delta. It names
 * reply subjects as a gateway does (under the gateway identity's grants): the packed batch
 * subject, and the per-request one that a runner not knowing the batch field uses.
 */
function overNats(nc: NatsConnection, runnerId: string, id: number, maxTokens: number): Promise<number> {
  const requester = `ttft${id}`;
  const replySubject = subjects.reply(requester, `ttft-${id}`);
  const batchReplySubject = subjects.replyBatch(requester);
  const started = performance.now();
  return new Promise((resolve, reject) => {
    let first = NaN;
    const subs = [
      nc.subscribe(replySubject, { callback: (err, msg) => (err ? reject(err) : onEvent(RunnerEvent.decode(msg.data))) }),
      nc.subscribe(batchReplySubject, { callback: (err, msg) => (err ? reject(err) : RunnerEventBatch.decode(msg.data).events.forEach(onEvent)) }),
    ];
    const onEvent = ({ event }: RunnerEvent) => {
      if (event?.$case === "delta" && event.value.text && Number.isNaN(first)) first = performance.now() - started;
      if (event?.$case !== "final") return;
      for (const sub of subs) sub.unsubscribe();
      if (event.value.error) reject(new Error(event.value.error.message));
      else resolve(first);
    };
    const request = GenerateRequest.fromPartial({
      requestId: `ttft-${id}`, model: TEST_MODEL, messages: [{ role: "user", content: prompt }],
      sampling: { temperature: 0.8, maxTokens, n: 1 }, parallelToolCalls: true, priority: Priority.PRIORITY_INTERACTIVE, replySubject, batchReplySubject,
    });
    nc.request(subjects.runnerGenerate(runnerId), GenerateRequest.encode(request).finish(), { timeout: 10_000 }).catch(reject);
  });
}

/** Streamed chat completions over one keep-alive HTTP/1.1 connection, written and scanned by hand. */
class KeepAliveChat {
  private socket!: Socket;

  async open(port: number): Promise<void> {
    this.socket = tcpConnect({ port, host: "127.0.0.1", noDelay: true });
    this.socket.setEncoding("utf8");
    await new Promise<void>((resolve, reject) => this.socket.once("connect", resolve).once("error", reject));
  }

  close(): void {
    this.socket.destroy();
  }

  /** ms to the first content delta; resolves when the response's last chunk has arrived. */
  stream(maxTokens: number): Promise<number> {
    const payload = JSON.stringify({ model: TEST_MODEL, messages: [{ role: "user", content: prompt }], max_tokens: maxTokens, temperature: 0.8, stream: true });
    const started = performance.now();
    return new Promise((resolve, reject) => {
      let text = "";
      let first = NaN;
      const onClose = () => reject(new Error("the gateway closed the connection"));
      const onData = (chunk: string) => {
        text += chunk;
        if (Number.isNaN(first) && /"content":"[^"]/.test(text)) first = performance.now() - started;
        if (!text.startsWith("HTTP/1.1 200")) {
          this.socket.off("data", onData).off("close", onClose);
          reject(new Error(text.slice(0, 200)));
        } else if (text.endsWith("\r\n0\r\n\r\n")) {
          this.socket.off("data", onData).off("close", onClose);
          resolve(first);
        }
      };
      this.socket.on("data", onData).once("close", onClose);
      this.socket.write(
        `POST /v1/chat/completions HTTP/1.1\r\nhost: bench\r\nauthorization: Bearer ${TEST_KEY}\r\ncontent-type: application/json\r\n` +
          `content-length: ${Buffer.byteLength(payload)}\r\n\r\n${payload}`,
      );
    });
  }
}

async function sample(n: number, one: (i: number) => Promise<number>): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) out.push(await one(i));
  return out;
}

async function main(): Promise<void> {
  const engine = new InProcessEngine(spec);
  await engine.load();
  const { nats, runner, gateway, close } = await startPlacedStack(env, layout);
  const nc = await nats.connect("gateway");
  let http: KeepAliveChat | undefined;
  const samples = new Map<string, number[]>();
  const add = (key: string, values: number[]) => samples.set(key, [...(samples.get(key) ?? []), ...values]);
  let id = 0;
  try {
    for (let round = 0; round < rounds; round++) {
      for (const maxTokens of maxTokensLevels) {
        process.stderr.write(`round ${round + 1}/${rounds}, max_tokens ${maxTokens}\n`);
        placeSelf(layout.runner);
        await sample(10, () => engine.chat(prompt, maxTokens).then((r) => r.ttftMs));
        add(`in-process ${maxTokens}`, await sample(requests, () => engine.chat(prompt, maxTokens).then((r) => r.ttftMs)));
        // The clients stay off the runner's CPUs, as clients on other machines would.
        placeSelf(layout.services);
        await sample(10, () => overNats(nc, runner.runnerId, id++, maxTokens));
        add(`nats ${maxTokens}`, await sample(requests, () => overNats(nc, runner.runnerId, id++, maxTokens)));
        // A fresh connection per phase: uWS closes keep-alive connections idle for about 10 s.
        http = new KeepAliveChat();
        await http.open(gateway.port);
        await sample(10, () => http!.stream(maxTokens));
        add(`http ${maxTokens}`, await sample(requests, () => http!.stream(maxTokens)));
        http.close();
        // The same through Node's HTTP client (stack-vs-engine's load client): what a client library adds.
        const nodeHttp = new SseLoadClient("127.0.0.1", gateway.port, TEST_KEY);
        const body = { model: TEST_MODEL, messages: [{ role: "user", content: prompt }], max_tokens: maxTokens, temperature: 0.8 };
        await sample(10, () => nodeHttp.streamChat(body).then((r) => r.ttftMs));
        add(`node-http ${maxTokens}`, await sample(requests, () => nodeHttp.streamChat(body).then((r) => r.ttftMs)));
        nodeHttp.close();
      }
    }
  } finally {
    placeSelf(undefined);
    http?.close();
    await nc.close();
    await close();
    await engine.dispose();
  }

  const rows = maxTokensLevels.map((maxTokens) => {
    const [inproc, nats_, http_, node_] = ["in-process", "nats", "http", "node-http"].map((k) => samples.get(`${k} ${maxTokens}`)!);
    const p50 = (v: number[]) => percentile(v, 50);
    return [
      maxTokens,
      `${fmt(p50(inproc!), 2)} / ${fmt(percentile(inproc!, 99), 2)}`,
      `${fmt(p50(nats_!), 2)} / ${fmt(percentile(nats_!, 99), 2)}`,
      `${fmt(p50(http_!), 2)} / ${fmt(percentile(http_!, 99), 2)}`,
      fmt(p50(nats_!) - p50(inproc!), 2),
      fmt(p50(http_!) - p50(nats_!), 2),
      fmt(p50(http_!) - p50(inproc!), 2),
      `${fmt(p50(node_!), 2)} / ${fmt(percentile(node_!, 99), 2)}`,
    ];
  });
  writeResults("ttft-path.md", "Where the stack's time to first token goes (concurrency 1)", [
    machineLine(),
    `Model ${TEST_MODEL}, 64 slots, threads ${spec.threads}; ${rounds} rounds of ${requests} sequential requests per path and max_tokens (after 10 warm-up requests each), pooled. ` +
      `Paths: the engine and scheduler in process; a GenerateRequest straight to the runner process over NATS; a streamed chat completion through the gateway on one keep-alive HTTP connection written and read by hand; the same through Node's http client with a keep-alive agent (the load client of stack-vs-engine), whose own parsing and bookkeeping are not the stack's. Placement: ${layout.description}.`,
    markdownTable(
      ["max_tokens", "in-process p50/p99 ms", "runner over NATS p50/p99 ms", "gateway over HTTP p50/p99 ms", "NATS adds (p50)", "gateway adds (p50)", "stack adds (p50)", "gateway via Node's http client p50/p99 ms"],
      rows,
    ),
    "Command: `npm run build && node dist/bench/ttft-path.js`",
  ]);
}

main().then(() => process.exit(0), (err: unknown) => {
  console.error(err);
  process.exit(1);
});
