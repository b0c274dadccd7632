// The gateway's memory and service under hostile clients: 200 SSE readers that never read, and a
// 1,000-connection flood (streams that are never read, and connections that never send a
// request), each optionally under CPU load. Meanwhile a probe keeps asking /healthz and a short
// completion with another key, so the table says whether everyone else was still served.
//   flock /tmp/tributary-cpu.lock node dist/bench/edge-bounds.js [--readers 200] [--flood 1000] [--hold 20] [--load 2]
import { connect, type Socket } from "node:net";
import { parseArgs } from "node:util";
import { Worker } from "node:worker_threads";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parse, stringify } from "yaml";
import { rssMiB, startActorHost, startGateway, startNats, startRunner, TEST_KEY, TEST_MODEL, testCatalog } from "./lib/processes.js";
import { fmt, percentile } from "./lib/stats.js";
import { machineLine, markdownTable, writeResults } from "./lib/table.js";

const { values } = parseArgs({
  options: {
    readers: { type: "string", default: "200" },
    flood: { type: "string", default: "1000" },
    hold: { type: "string", default: "20" },
    load: { type: "string", default: "2" },
    /** Tokens/s of each never-read stream of the readers phase (the flood's streams run at 20). */
    rate: { type: "string", default: "100" },
    /** Readers that do read (the same load without backpressure), for comparison. */
    reading: { type: "boolean", default: false },
  },
});
const readers = Number(values.readers);
const flood = Number(values.flood);
const holdSeconds = Number(values.hold);
const cpuLoad = Number(values.load);
const rate = Number(values.rate);
const PROBE_KEY = "sk-bench-probe";
/** The flood's streams: the same sim engine at 20 tokens/s. */
const FLOOD_MODEL = "test/sim-flood";

// The sim engine produces output far faster than the never-reading clients take it, so every
// stream hits its pending-bytes bound: the worst case for the gateway's memory.
const env = {
  TRIBUTARY_ENGINE: "sim",
  TRIBUTARY_RATE_LIMITS: "off",
  TRIBUTARY_API_KEYS: `${PROBE_KEY}=proj_probe`,
  TRIBUTARY_MODEL_OVERRIDES: JSON.stringify({
    [TEST_MODEL]: {
      slots: 4096, queue_limit: 4096, context_length: 1_000_000, max_output_tokens: 1_000_000,
      sim: { tokens_per_second: rate, first_token_latency_ms: 0 },
    },
  }),
  TRIBUTARY_CATALOG: floodCatalog(),
};

/** The test catalog plus the flood's model. */
function floodCatalog(): string {
  const catalog = parse(readFileSync(testCatalog, "utf8")) as { models: Array<Record<string, unknown>> };
  catalog.models.push({
    id: FLOOD_MODEL, engine: "sim", context_length: 1_000_000, max_output_tokens: 1_000_000, slots: 4096, queue_limit: 4096,
    sim: { tokens_per_second: 20, first_token_latency_ms: 0 },
  });
  const path = join(mkdtempSync(join(tmpdir(), "tributary-edge-bench-")), "catalog.yaml");
  writeFileSync(path, stringify(catalog));
  return path;
}

/** Lets never-reading clients read again, and counts those the gateway had already ended. */
async function countEnded(sockets: Socket[], counters: { closed: number }): Promise<number> {
  for (const s of sockets) s.resume();
  await new Promise((r) => setTimeout(r, 2000));
  return counters.closed;
}

interface Phase {
  name: string;
  peakRss: number;
  endRss: number;
  probes: number;
  probeFailures: number;
  healthP99: number;
  healthMax: number;
  completionP99: number;
  refused: number;
  droppedOrClosed: number;
}

/** A client that sends a streamed completion and never reads the answer. */
function neverReader(port: number, localAddress: string, model: string, counters: { refused: number; closed: number }): Socket {
  const payload = JSON.stringify({ model, messages: [{ role: "user", content: "go" }], max_tokens: 500_000, stream: true });
  const socket = connect({ port, host: "127.0.0.1", localAddress });
  socket.on("error", () => {});
  socket.once("connect", () => {
    socket.write(`POST /v1/chat/completions HTTP/1.1\r\nhost: bench\r\nauthorization: Bearer ${TEST_KEY}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(payload)}\r\n\r\n${payload}`);
    // Read only the status line, then never again.
    socket.once("data", (d: Buffer) => {
      if (!d.toString("latin1", 0, 12).endsWith("200")) {
        counters.refused++;
        if (process.env.BENCH_DEBUG) process.stderr.write(d.toString("latin1", 0, 400) + "\n");
      }
      if (!values.reading) socket.pause();
    });
  });
  socket.once("close", () => counters.closed++);
  return socket;
}

/** An idle connection: connects and never sends a byte. */
function idleConnection(port: number, localAddress: string, counters: { closed: number }): Socket {
  const socket = connect({ port, host: "127.0.0.1", localAddress });
  socket.on("error", () => {});
  socket.once("close", () => counters.closed++);
  return socket;
}

async function probeWhile(port: number, pid: number, seconds: number): Promise<Omit<Phase, "name" | "refused" | "droppedOrClosed">> {
  const health: number[] = [];
  const completions: number[] = [];
  let failures = 0;
  let peakRss = rssMiB(pid);
  const end = performance.now() + seconds * 1000;
  while (performance.now() < end) {
    let t0 = performance.now();
    const h = await fetch(`http://127.0.0.1:${port}/healthz`, { signal: AbortSignal.timeout(5000) }).then((r) => r.status, () => 0);
    health.push(performance.now() - t0);
    if (h !== 200) failures++;
    t0 = performance.now();
    const c = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${PROBE_KEY}`, "content-type": "application/json" },
      body: JSON.stringify({ model: TEST_MODEL, messages: [{ role: "user", content: "hi" }], max_tokens: 8 }),
      signal: AbortSignal.timeout(10_000),
    }).then(async (r) => (await r.text(), r.status), () => 0);
    completions.push(performance.now() - t0);
    if (c !== 200) failures++;
    peakRss = Math.max(peakRss, rssMiB(pid));
    await new Promise((r) => setTimeout(r, 200));
  }
  return {
    peakRss,
    endRss: rssMiB(pid),
    probes: health.length,
    probeFailures: failures,
    healthP99: percentile(health, 99),
    healthMax: Math.max(...health),
    completionP99: percentile(completions, 99),
  };
}

async function main(): Promise<void> {
  const nats = await startNats();
  const actors = await startActorHost(nats.url, env);
  const runner = await startRunner(nats.url, env);
  const gateway = await startGateway(nats.url, env);
  const pid = gateway.child.pid!;
  const port = gateway.port;
  const loaders = Array.from({ length: cpuLoad }, () => new Worker("for (;;) {}", { eval: true }));
  const phases: Phase[] = [];
  try {
    const idle = await probeWhile(port, pid, 3);
    phases.push({ name: "idle", ...idle, refused: 0, droppedOrClosed: 0 });

    // 200 never-reading SSE clients from one address (under the per-address cap of 256).
    let counters = { refused: 0, closed: 0 };
    let sockets = Array.from({ length: readers }, () => neverReader(port, "127.0.0.2", TEST_MODEL, counters));
    const slow = await probeWhile(port, pid, holdSeconds);
    phases.push({ name: `${readers} SSE readers that never read (${rate} tokens/s each)`, ...slow, refused: counters.refused, droppedOrClosed: await countEnded(sockets, counters) });
    for (const s of sockets) s.destroy();
    await new Promise((r) => setTimeout(r, 2000));

    // A flood of streams from four addresses (250 each) and as many idle connections.
    counters = { refused: 0, closed: 0 };
    sockets = Array.from({ length: flood }, (_, i) => neverReader(port, `127.0.0.${3 + (i % 4)}`, FLOOD_MODEL, counters));
    const streams = await probeWhile(port, pid, holdSeconds);
    phases.push({ name: `${flood} never-read streams (4 addresses, 20 tokens/s each)`, ...streams, refused: counters.refused, droppedOrClosed: await countEnded(sockets, counters) });
    for (const s of sockets) s.destroy();
    await new Promise((r) => setTimeout(r, 2000));

    const idleCounters = { closed: 0 };
    sockets = Array.from({ length: flood }, (_, i) => idleConnection(port, `127.0.0.${10 + (i % 4)}`, idleCounters));
    const idleFlood = await probeWhile(port, pid, Math.max(holdSeconds, 12));
    phases.push({ name: `${flood} connections that send nothing`, ...idleFlood, refused: 0, droppedOrClosed: idleCounters.closed });
    for (const s of sockets) s.destroy();
  } finally {
    for (const w of loaders) await w.terminate();
    for (const p of [gateway, runner, actors]) await p.kill();
    await nats.stop();
  }

  const table = markdownTable(
    ["phase", "gateway RSS peak (MiB)", "RSS at end (MiB)", "probes", "failed probes", "/healthz p99 / max (ms)", "short completion p99 (ms)", "refused", "closed by the gateway"],
    phases.map((p) => [p.name, fmt(p.peakRss, 0), fmt(p.endRss, 0), p.probes, p.probeFailures, `${fmt(p.healthP99, 1)} / ${fmt(p.healthMax, 1)}`, fmt(p.completionP99, 1), p.refused, p.droppedOrClosed]),
  );
  writeResults("edge-bounds.md", "Gateway memory and service under hostile clients", [
    machineLine(),
    `Sim engine, default edge limits (8 MiB pending per stream, 256 MiB in total, 256 connections per address), ${cpuLoad} busy-looping threads of CPU load, each phase held ${holdSeconds} s while a probe asks /healthz and an 8-token completion with another key.`,
    table,
  ]);
}

await main();
process.exit(0);
