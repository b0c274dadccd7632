// The floor under bench/sim-streams: what this machine gives the same load (N streams at 20
// tokens/s each, one TCP connection per stream, the same hand-parsing load generator in this
// process) when none of Tributary's code serves it. Alternating rounds of:
//
//   uws        a bare uWebSockets.js server that times the tokens itself and writes each as one
//              corked write of a chunk of the gateway's shape and size (an SSE front's floor)
//   uws+nats   the same front, with the tokens timed in a second process (a runner's floor) that
//              publishes the ids of the streams due each millisecond as one NATS message, as the
//              runner packs a step's events for a gateway
//   relay      the same two processes doing what any relay of the stack's shape must per token,
//              with the stack's own code for the wire: the producer sends each due token through
//              the runner's reply path (ReplyPublisher and Outbox: a RunnerEvent naming the request
//              and carrying a sequence number and the text, kept for a resend and packed with the
//              turn's others into one NATS message); the front reads the batch with the gateway's
//              reader, finds each event's stream by request id, checks its sequence number and
//              writes the text, JSON-escaped, in a chunk of the gateway's shape
//   stack      the real stack of sim-streams: gateway, actor host, runner (sim engine), nats-server
//
// No authorization, rate limits, flow control, tracing or usage accounting in the floors (nor, in
// relay, the runner's other events, resends, or a failed-over request's check of the runner id):
// each is a lower bound for what the stack can cost at that load. A level passes as in
// sim-streams: no stream fails or loses a token (in relay, no event comes out of sequence), and
// the p99 gap between tokens is within 5 ms of the cadence.
//
//   node dist/bench/sim-streams-floor.js [--levels 1000,2000] [--rounds 2] [--hold 12] [--configs uws,uws+nats,relay,stack] [--out sim-streams-floor.md]
import type { ChildProcess } from "node:child_process";
import { loadavg } from "node:os";
import { parseArgs } from "node:util";
import { freePort } from "../test/harness/cluster.js";
import { cpuMs, startNats, startNodeSource as startNode, startPlacedStack, TEST_KEY, TEST_MODEL } from "./lib/processes.js";
import { driveSimLoad, simStackEnv } from "./lib/sim-load.js";
import { fmt, median, percentile } from "./lib/stats.js";
import { machineLine, markdownTable, writeResults } from "./lib/table.js";

const { values } = parseArgs({
  options: {
    levels: { type: "string", default: "1000,2000" },
    rounds: { type: "string", default: "2" },
    hold: { type: "string", default: "12" },
    rate: { type: "string", default: "20" },
    ramp: { type: "string", default: "2" },
    tolerance: { type: "string", default: "5" },
    configs: { type: "string", default: "uws,uws+nats,relay,stack" },
    out: { type: "string", default: "sim-streams-floor.md" },
  },
});
const levels = values.levels!.split(",").map(Number);
const rounds = Number(values.rounds);
const holdSeconds = Number(values.hold);
const rate = Number(values.rate);
const rampSeconds = Number(values.ramp);
const toleranceMs = Number(values.tolerance);
const configs = values.configs!.split(",") as Config[];
const cadenceMs = 1000 / rate;
const tokens = Math.round(rate * holdSeconds);
const FIRST_TOKEN_MS = 50;

type Config = "uws" | "uws+nats" | "relay" | "stack";

/**
 * Tokens due, by the millisecond they are due in (the sim engine's scheme): `due(id)` returns
 * whether the stream wants another token, one cadence later. `onTick` runs after each tick's tokens.
 */
const TICKER = `
function ticker(intervalMs, due, onTick = () => {}) {
  const buckets = new Map();
  let timer, armedFor = Infinity;
  const put = (id, at) => {
    const ms = Math.floor(at);
    const b = buckets.get(ms);
    if (b) b.push(id, at); else buckets.set(ms, [id, at]);
    if (at < armedFor) arm(at);
  };
  const arm = (at) => {
    if (timer) clearTimeout(timer);
    armedFor = at;
    timer = setTimeout(tick, Math.max(0, at - performance.now()));
  };
  const tick = () => {
    timer = undefined; armedFor = Infinity;
    const now = performance.now();
    let next = Infinity;
    for (const [ms, b] of buckets) {
      if (ms > now) { if (ms < next) next = ms; continue; }
      buckets.delete(ms);
      for (let i = 0; i < b.length; i += 2) if (due(b[i])) put(b[i], b[i + 1] + intervalMs);
    }
    onTick();
    for (const ms of buckets.keys()) if (ms < next) next = ms;
    if (next !== Infinity && next < armedFor) arm(next);
  };
  return { start: (id, firstMs) => put(id, performance.now() + firstMs) };
}
`;

/** The sim engine's words (runners/engines/sim): a stream's first token is one, each later one has a leading space. */
const SIM_WORDS = `
const WORDS = ("the river runs past old mills and quiet towns where children play by the water " +
  "while boats drift slowly toward the sea carrying stories from one bank to another").split(" ");
const SPACED = WORDS.map((w) => " " + w);
`;

/**
 * The SSE front: answers every POST with a stream of chunks shaped like the gateway's. With "relay"
 * its tokens come as the runner's packed RunnerEvents, by request id; without, as stream ids.
 */
const FRONT = `
import uWS from "uWebSockets.js";
import { connect } from "@nats-io/transport-node";
import { readRunnerEventBatch } from "./dist/modules/inference/event-batch-reader.js";
${TICKER}
${SIM_WORDS}
const [port, tokens, intervalMs, firstMs, natsUrl, mode] = process.argv.slice(1);
const T = Number(tokens);
const relay = mode === "relay";
const SUFFIX = '"},"logprobs":null,"finish_reason":null}]}\\n\\n';
const CONTENT_SUFFIX = '},"logprobs":null,"finish_reason":null}]}\\n\\n';
const streams = new Map();
let nextId = 1;
/** Events whose seq was not the stream's next one (relay). */
let gaps = 0;
/** Writes a token's frame (the stream's last one ends it); false once the stream is done. */
const deliver = (key, s, frame) => {
  const last = s.sent === T;
  if (last) frame += s.head + '{},"logprobs":null,"finish_reason":"length"}]}\\n\\ndata: [DONE]\\n\\n';
  s.res.cork(() => { if (last) s.res.end(frame); else s.res.write(frame); });
  if (last) streams.delete(key);
  return !last;
};
const token = (id) => {
  const s = streams.get(id);
  if (!s) return false;
  if (s.aborted) { streams.delete(id); return false; }
  const word = s.sent === 0 ? WORDS[id % WORDS.length] : SPACED[(id + s.sent) % WORDS.length];
  s.sent++;
  return deliver(id, s, s.prefix + word + SUFFIX);
};
/** Where the gateway's batch reader hands the relay's events: each text delta to its stream, by request id. */
const relaySink = {
  delta(requestId, seq, _runnerId, delta) {
    const s = streams.get(requestId);
    if (!s) return;
    if (s.aborted) { streams.delete(requestId); return; }
    if (seq !== s.sent + 1) gaps++;
    s.sent = seq;
    deliver(requestId, s, s.contentPrefix + JSON.stringify(delta.text) + CONTENT_SUFFIX);
  },
  // The relay's producer sends text deltas only: anything else is counted as out of sequence.
  event() { gaps++; },
};
const nc = natsUrl ? await connect({ servers: natsUrl }) : undefined;
const local = nc ? undefined : ticker(Number(intervalMs), token);
if (nc) nc.subscribe("floor.due", { callback: (err, msg) => {
  if (err) return;
  if (relay) return readRunnerEventBatch(msg.data, relaySink);
  const ids = new Uint32Array(msg.data.buffer.slice(msg.data.byteOffset, msg.data.byteOffset + msg.data.length));
  for (const id of ids) token(id);
} });
const startBytes = new Uint8Array(4);
uWS.App().post("/v1/chat/completions", (res) => {
  const id = nextId++;
  const chatId = "chatcmpl-" + id.toString(36).padStart(24, "0");
  // As long as the gateway's request ids (req_ and 24 characters), which is what its runner events name.
  const key = relay ? "req_" + id.toString(36).padStart(24, "0") : id;
  const head = 'data: {"id":"' + chatId + '","object":"chat.completion.chunk","created":' + Math.floor(Date.now() / 1000) +
    ',"model":"test/stories-260k","service_tier":"default","choices":[{"index":0,"delta":';
  const s = { res, head, prefix: head + '{"content":"', contentPrefix: head + '{"content":', sent: 0, aborted: false };
  res.onAborted(() => { s.aborted = true; });
  res.onData((_chunk, isLast) => {
    if (!isLast || s.aborted) return;
    streams.set(key, s);
    res.cork(() => {
      res.writeStatus("200 OK").writeHeader("content-type", "text/event-stream; charset=utf-8").writeHeader("cache-control", "no-cache");
      res.write(": ok\\n\\n" + head + '{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}]}\\n\\n');
    });
    if (local) local.start(id, Number(firstMs));
    else if (relay) nc.publish("floor.start", key);
    else { new DataView(startBytes.buffer).setUint32(0, id, true); nc.publish("floor.start", startBytes); }
  });
}).get("/floor/gaps", (res) => {
  res.end(String(gaps));
}).listen("127.0.0.1", Number(port), (ok) => { if (!ok) process.exit(1); if (nc) nc.flush().then(() => process.stdout.write("ready\\n")); else process.stdout.write("ready\\n"); });
`;

/** The runner's floor: times every stream's tokens and publishes each millisecond's due ids as one message. */
const PRODUCER = `
import { connect } from "@nats-io/transport-node";
${TICKER}
const [natsUrl, tokens, intervalMs, firstMs] = process.argv.slice(1);
const T = Number(tokens);
const nc = await connect({ servers: natsUrl });
const left = new Map();
let due = [];
const t = ticker(Number(intervalMs), (id) => {
  due.push(id);
  const n = left.get(id) - 1;
  if (n === 0) { left.delete(id); return false; }
  left.set(id, n);
  return true;
}, () => {
  if (due.length === 0) return;
  nc.publish("floor.due", new Uint8Array(Uint32Array.from(due).buffer));
  due = [];
});
nc.subscribe("floor.start", { callback: (err, msg) => {
  if (err) return;
  const id = new DataView(msg.data.buffer, msg.data.byteOffset, 4).getUint32(0, true);
  left.set(id, T);
  t.start(id, Number(firstMs));
} });
await nc.flush();
process.stdout.write("ready\\n");
`;

/**
 * The runner's floor for relay: the same timing, and each due token goes out through the runner's
 * own reply path (runners/reply-publisher.ts: the event encoded in the runner's bytes and kept for
 * a resend; lib/nats/outbox.ts: a turn's events for a gateway packed into one message).
 */
const RELAY_PRODUCER = `
import { connect } from "@nats-io/transport-node";
import { createLogger } from "./dist/lib/log.js";
import { Outbox } from "./dist/lib/nats/outbox.js";
import { ReplyPublisher } from "./dist/runners/reply-publisher.js";
${TICKER}
${SIM_WORDS}
const [natsUrl, tokens, intervalMs, firstMs] = process.argv.slice(1);
const T = Number(tokens);
const nc = await connect({ servers: natsUrl });
const outbox = new Outbox(nc);
const log = createLogger("relay-floor");
// As long as a runner's id (r and 12 characters).
const RUNNER_ID = "rRelayFloor01";
let started = 0;
const t = ticker(Number(intervalMs), (s) => {
  s.publisher.delta(0, s.sent === 0 ? WORDS[s.word] : SPACED[s.word], 1);
  s.word = (s.word + 1) % WORDS.length;
  return ++s.sent < T;
});
nc.subscribe("floor.start", { callback: (err, msg) => {
  if (err) return;
  const publisher = new ReplyPublisher(outbox, "", msg.string(), RUNNER_ID, log, undefined, false, "floor.due");
  t.start({ publisher, sent: 0, word: started++ % WORDS.length }, Number(firstMs));
} });
await nc.flush();
process.stdout.write("ready\\n");
`;

async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null) return;
  const exited = new Promise((r) => child.once("exit", r));
  child.kill("SIGKILL");
  await exited;
}

/** The processes serving one configuration: the port to load, and the pids whose CPU is counted (front, producer, nats). */
interface Served {
  port: number;
  pids: { front: number; producer?: number; nats?: number };
  close(): Promise<void>;
}

async function serve(config: Config, maxStreams: number): Promise<Served> {
  const interval = String(cadenceMs);
  if (config === "uws") {
    const port = await freePort();
    const front = await startNode(FRONT, [String(port), String(tokens), interval, String(FIRST_TOKEN_MS)]);
    return { port, pids: { front: front.pid! }, close: () => stopChild(front) };
  }
  if (config === "uws+nats" || config === "relay") {
    // The floor's nats-server takes no credentials (the stack's checks them once per connection, not per message).
    const nats = await startNats(undefined, { auth: false });
    const producer = await startNode(config === "relay" ? RELAY_PRODUCER : PRODUCER, [nats.url, String(tokens), interval, String(FIRST_TOKEN_MS)]);
    const port = await freePort();
    const front = await startNode(FRONT, [String(port), String(tokens), interval, String(FIRST_TOKEN_MS), nats.url, config]);
    return {
      port,
      pids: { front: front.pid!, producer: producer.pid!, nats: nats.child.pid! },
      async close() {
        await stopChild(front);
        await stopChild(producer);
        await nats.stop();
      },
    };
  }
  // sim-streams' stack and settings, nothing pinned (as sim-streams runs it).
  const stack = await startPlacedStack(simStackEnv(maxStreams, rate, FIRST_TOKEN_MS), { runner: undefined, services: undefined, description: "not pinned" });
  return {
    port: stack.gateway.port,
    pids: { front: stack.gateway.child.pid!, producer: stack.runner.child.pid!, nats: stack.nats.child.pid! },
    close: () => stack.close(),
  };
}

interface Round {
  config: Config;
  streams: number;
  p99: number;
  p50: number;
  errors: number;
  /** Events the relay's front received out of sequence (lost, repeated or reordered on the way); 0 in the other configurations. */
  gaps: number;
  /** CPU µs per delivered token: front, producer, nats-server, load generator. */
  usPerToken: [number, number, number, number];
  /** CPU % of one core: front, producer, nats-server, load generator. */
  percent: [number, number, number, number];
}

async function measure(config: Config, streams: number): Promise<Round> {
  const served = await serve(config, streams);
  try {
    const cpu = (pid?: number) => (pid === undefined ? 0 : cpuMs(pid));
    const before = [cpu(served.pids.front), cpu(served.pids.producer), cpu(served.pids.nats)];
    const selfBefore = process.cpuUsage();
    const load = await driveSimLoad(served.port, TEST_KEY, TEST_MODEL, { streams, tokens, rampSeconds, holdSeconds });
    const self = process.cpuUsage(selfBefore);
    const used = [cpu(served.pids.front) - before[0]!, cpu(served.pids.producer) - before[1]!, cpu(served.pids.nats) - before[2]!, (self.user + self.system) / 1000];
    const gaps = config === "relay" ? Number(await (await fetch(`http://127.0.0.1:${served.port}/floor/gaps`)).text()) : 0;
    const round: Round = {
      config,
      streams,
      p50: percentile(load.gaps, 50),
      p99: percentile(load.gaps, 99),
      errors: load.errors,
      gaps,
      usPerToken: used.map((ms) => (ms * 1000) / load.delivered) as Round["usPerToken"],
      percent: used.map((ms) => (ms / 1000 / load.wall) * 100) as Round["percent"],
    };
    process.stderr.write(`${JSON.stringify({ ...round, errorKinds: load.errorKinds })}\n`);
    return round;
  } finally {
    await served.close();
  }
}

async function main(): Promise<void> {
  const loadStart = loadavg()[0]!;
  const all: Round[] = [];
  for (let round = 0; round < rounds; round++)
    for (const streams of levels)
      // Alternating order, so neither side always runs first on a warmer (or busier) machine.
      for (const config of round % 2 === 0 ? configs : [...configs].reverse()) {
        process.stderr.write(`round ${round + 1}: ${config} at ${streams} streams...\n`);
        all.push(await measure(config, streams));
        await new Promise((r) => setTimeout(r, 1000));
      }
  /** Serving CPU µs per token (front, producer and nats-server), the median over rounds. */
  const servingUs = (config: Config, streams: number) =>
    median(all.filter((r) => r.config === config && r.streams === streams).map((r) => r.usPerToken[0] + r.usPerToken[1] + r.usPerToken[2]));
  const rows: Array<Array<string | number>> = [];
  for (const streams of levels)
    for (const config of configs) {
      const mine = all.filter((r) => r.config === config && r.streams === streams);
      const med = (pick: (r: Round) => number) => median(mine.map(pick));
      const p99 = med((r) => r.p99);
      const errors = Math.max(...mine.map((r) => r.errors));
      const gaps = Math.max(...mine.map((r) => r.gaps));
      const part = (i: number, digits: number, pick: (r: Round) => number[]) => (config === "uws" && (i === 1 || i === 2) ? "-" : fmt(med((r) => pick(r)[i]!), digits));
      rows.push([
        config,
        streams,
        `${fmt(med((r) => r.p50), 1)} / ${fmt(p99, 1)}`,
        mine.map((r) => fmt(r.p99, 1)).join(", "),
        errors,
        [0, 1, 2, 3].map((i) => part(i, 0, (r) => r.percent)).join(" / "),
        [0, 1, 2, 3].map((i) => part(i, 1, (r) => r.usPerToken)).join(" / "),
        fmt(servingUs(config, streams), 1),
        errors === 0 && gaps === 0 && p99 <= cadenceMs + toleranceMs ? "yes" : "no",
      ]);
    }
  // The stack against each floor, and what the relay's per-token work adds to uws+nats: for the pairs this run has.
  const pairs = (
    [
      ["stack", "uws+nats"],
      ["stack", "relay"],
      ["relay", "uws+nats"],
    ] as const
  ).filter(([a, b]) => configs.includes(a) && configs.includes(b));
  const ratios = markdownTable(
    ["streams", ...pairs.map(([a, b]) => `${a} / ${b}`)],
    levels.map((streams) => [streams, ...pairs.map(([a, b]) => fmt(servingUs(a, streams) / servingUs(b, streams), 2))]),
  );
  const relayGaps = all.filter((r) => r.config === "relay").reduce((sum, r) => sum + r.gaps, 0);
  writeResults(values.out!, "The floor under sim-streams: the same load without Tributary's code", [
    machineLine(),
    `${tokens} tokens per stream at ${rate} tokens/s (gap ${cadenceMs} ms), first token after ${FIRST_TOKEN_MS} ms, streams started over ${rampSeconds} s; ` +
      `gaps in the steady state (from 1 s after the last stream started until 1 s before the first one ended). ${rounds} rounds, alternating order; medians over rounds. ` +
      "uws: a bare uWebSockets.js server timing the tokens itself, one corked write per token of a chunk of the gateway's shape. " +
      "uws+nats: the same front; a second process times the tokens and publishes each millisecond's due stream ids as one NATS message. " +
      "relay: the same two processes doing a relay's per-token work with the stack's wire code: the second process sends each due token " +
      "(a sim-engine word) through the runner's ReplyPublisher and Outbox (encoded, kept for a resend, a turn's events packed into one NATS message); " +
      "the front reads the batch with the gateway's reader, finds each event's stream by request id, checks its seq and writes " +
      "the text, JSON-escaped, in a chunk of the gateway's shape (a level passes only if no event came out of sequence). " +
      "stack: sim-streams' stack (gateway, actor host, runner with the sim engine, nats-server). " +
      "Front is the uWS server or the gateway, producer the token-timing process or the runner. The load generator is this process in every configuration.",
    markdownTable(
      ["config", "streams", "gap p50 / p99 ms", "p99 per round", "failed streams (worst round)", "CPU % front / producer / nats / load generator", "CPU µs per token front / producer / nats / load generator", "serving CPU µs per token", "pass"],
      rows,
    ),
    ...(pairs.length > 0 ? [`Serving CPU µs per token, ratios of the medians over rounds:\n\n${ratios}`] : []),
    ...(configs.includes("relay") ? [`Events the relay's front received out of sequence, over all rounds: ${relayGaps}.`] : []),
    `Command: \`npm run build && node dist/bench/sim-streams-floor.js${process.argv.slice(2).map((a) => " " + a).join("")}\``,
    `Load average (1 min) at start and end: ${loadStart.toFixed(1)}, ${loadavg()[0]!.toFixed(1)}.`,
  ]);
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
