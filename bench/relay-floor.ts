// The floor under the hosted-app relay: what the cheapest possible relay of the same shape costs
// in CPU per request on this machine, hop by hop, with none of Tributary's code in it. Each
// configuration answers the same 60-byte JSON body to the same keep-alive load client
// (bench/hosted-app.ts's) at 16 concurrent clients:
//
//   direct      uvicorn (Debian's) over TCP: hosted-app's baseline
//   uws         a bare uWebSockets.js server answering by itself (an HTTP front's floor)
//   uws+nats    the uWS server sends each request as one NATS request; a bare nats.js responder
//               answers it (the floor of gateway -> NATS -> app host, no app)
//   relay       as uws+nats, and the responder fetches the body from uvicorn over a Unix socket
//               with a hand-written HTTP/1.1 exchange on kept-alive connections (the floor of the
//               whole hosted path: gateway -> NATS -> app host -> uvicorn)
//
// No authorization, no API key check, no routing, no flow control, no streaming, no limits: so
// each figure is a lower bound for what the product's relay can cost. The ceiling it sets for
// issue 13's throughput ratio on this machine is printed with it.
//
//   node dist/bench/relay-floor.js [--seconds 5] [--rounds 2] [--clients 16]
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { freePort } from "../test/harness/cluster.js";
import { cpuMs, startNats, startNodeSource as startNode } from "./lib/processes.js";
import { JSON_APP, JSON_APP_BODY, keepAliveLoops } from "./lib/json-app.js";
import { fmt, percentile } from "./lib/stats.js";
import { machineLine, markdownTable, writeResults } from "./lib/table.js";

const { values } = parseArgs({
  options: {
    seconds: { type: "string", default: "5" },
    rounds: { type: "string", default: "2" },
    clients: { type: "string", default: "16" },
  },
});
const seconds = Number(values.seconds);
const rounds = Number(values.rounds);
const clients = Number(values.clients);

const BODY = JSON_APP_BODY;

/** The front: uWS answers by itself, or relays each request as one NATS request. */
const FRONT = `
import uWS from "uWebSockets.js";
import { connect } from "@nats-io/transport-node";
const [port, natsUrl] = process.argv.slice(1);
const body = ${JSON.stringify(BODY)};
const nc = natsUrl ? await connect({ servers: natsUrl }) : undefined;
const encoder = new TextEncoder();
const decoder = new TextDecoder();
uWS.App().any("/*", (res, req) => {
  if (!nc) {
    res.cork(() => res.writeHeader("content-type", "application/json").end(body));
    return;
  }
  let aborted = false;
  res.onAborted(() => { aborted = true; });
  const head = req.getMethod() + " " + req.getUrl();
  nc.request("floor", encoder.encode(head), { timeout: 5000 }).then(
    (msg) => { if (!aborted) res.cork(() => res.writeHeader("content-type", "application/json").end(decoder.decode(msg.data))); },
    () => { if (!aborted) res.cork(() => res.writeStatus("502 Bad Gateway").end()); },
  );
}).listen("127.0.0.1", Number(port), (token) => { if (!token) process.exit(1); process.stdout.write("ready\\n"); });
`;

/** The responder: answers by itself, or fetches the body from uvicorn on a Unix socket. */
const RESPONDER = `
import { connect } from "@nats-io/transport-node";
import net from "node:net";
const [natsUrl, socketPath] = process.argv.slice(1);
const body = new TextEncoder().encode(${JSON.stringify(BODY)});
const nc = await connect({ servers: natsUrl });
const idle = [];
const REQUEST = Buffer.from("GET / HTTP/1.1\\r\\nhost: app\\r\\n\\r\\n");
function exchange() {
  return new Promise((resolve, reject) => {
    const conn = idle.pop() ?? net.createConnection(socketPath);
    let buffered = Buffer.alloc(0);
    const onData = (chunk) => {
      buffered = buffered.length ? Buffer.concat([buffered, chunk]) : chunk;
      const end = buffered.indexOf("\\r\\n\\r\\n");
      if (end < 0) return;
      const length = Number(/content-length: *(\\d+)/i.exec(buffered.subarray(0, end).toString("latin1"))[1]);
      if (buffered.length < end + 4 + length) return;
      conn.off("data", onData);
      conn.off("error", reject);
      idle.push(conn);
      resolve(buffered.subarray(end + 4, end + 4 + length));
    };
    conn.on("data", onData);
    conn.on("error", reject);
    conn.write(REQUEST);
  });
}
nc.subscribe("floor", {
  callback: (err, msg) => {
    if (err) return;
    if (!socketPath) { msg.respond(body); return; }
    exchange().then((answer) => msg.respond(answer), () => msg.respond(new Uint8Array()));
  },
});
await nc.flush();
process.stdout.write("ready\\n");
`;

async function waitForHttp(port: number): Promise<void> {
  for (let i = 0; i < 200; i++) {
    try {
      await fetch(`http://127.0.0.1:${port}/`);
      return;
    } catch {
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  throw new Error(`nothing answers on ${port}`);
}

interface Measured {
  rps: number;
  p50: number;
  errors: number;
  /** CPU µs per request by process name. */
  cpuPerRequest: Record<string, number>;
}

/** `clients` keep-alive loops of GET / (1 s warm-up, then `seconds` measured). */
async function load(port: number, pids: Record<string, number>): Promise<Measured> {
  const loops = keepAliveLoops(port, clients);
  const all = { ...pids, "load client": process.pid };
  const cpu = () => Object.fromEntries(Object.entries(all).map(([name, pid]) => [name, cpuMs(pid)]));
  await loops.run(1_000);
  const before = cpu();
  const started = performance.now();
  const { latencies, errors } = await loops.run(seconds * 1_000);
  const wallMs = performance.now() - started;
  const after = cpu();
  loops.close();
  const n = latencies.length;
  return {
    rps: (n * 1_000) / wallMs,
    p50: percentile(latencies, 50),
    errors,
    cpuPerRequest: Object.fromEntries(Object.keys(all).map((name) => [name, ((after[name]! - before[name]!) * 1_000) / Math.max(1, n)])),
  };
}

const CONFIGS = ["direct", "uws", "uws+nats", "relay"] as const;
type Config = (typeof CONFIGS)[number];

const loadStart = loadavg()[0]!;
const appDir = mkdtempSync(join(tmpdir(), "bench-floor-"));
writeFileSync(join(appDir, "app.py"), JSON_APP);
const socketPath = join(appDir, "app.sock");
const directPort = await freePort();
const uvicornTcp = spawn("/usr/bin/python3", ["-m", "uvicorn", "app:app", "--host", "127.0.0.1", "--port", String(directPort), "--no-access-log"], { cwd: appDir, stdio: "ignore" });
const uvicornUds = spawn("/usr/bin/python3", ["-m", "uvicorn", "app:app", "--uds", socketPath, "--no-access-log"], { cwd: appDir, stdio: "ignore" });
const nats = await startNats(undefined, { auth: false });
const results = new Map<Config, Measured[]>(CONFIGS.map((c) => [c, []]));
try {
  await waitForHttp(directPort);
  for (let round = 0; round < rounds; round++) {
    const order = round % 2 === 0 ? CONFIGS : [...CONFIGS].reverse();
    for (const config of order) {
      let started: ChildProcess[] = [];
      let port = directPort;
      let pids: Record<string, number> = { uvicorn: uvicornTcp.pid! };
      if (config !== "direct") {
        port = await freePort();
        const front = await startNode(FRONT, config === "uws" ? [String(port)] : [String(port), nats.url]);
        started = [front];
        pids = { front: front.pid! };
        if (config !== "uws") {
          const responder = await startNode(RESPONDER, config === "relay" ? [nats.url, socketPath] : [nats.url]);
          started.push(responder);
          pids = { ...pids, "nats-server": nats.child.pid!, responder: responder.pid! };
          if (config === "relay") pids.uvicorn = uvicornUds.pid!;
        }
        await waitForHttp(port);
      }
      const measured = await load(port, pids);
      results.get(config)!.push(measured);
      process.stderr.write(`round ${round + 1} ${config}: ${fmt(measured.rps, 0)} req/s, errors ${measured.errors}\n`);
      for (const child of started) child.kill("SIGKILL");
    }
  }
} finally {
  uvicornTcp.kill("SIGKILL");
  uvicornUds.kill("SIGKILL");
  await nats.stop();
  rmSync(appDir, { recursive: true, force: true });
}

const median = (xs: number[]) => percentile(xs, 50);
const PROCESSES = ["front", "nats-server", "responder", "uvicorn", "load client"];
const cpuOf = (config: Config, name: string) => {
  const values = results.get(config)!.map((m) => m.cpuPerRequest[name]).filter((v): v is number => v !== undefined);
  return values.length ? median(values) : undefined;
};
const rows = CONFIGS.map((config) => {
  const ms = results.get(config)!;
  return [
    config,
    fmt(median(ms.map((m) => m.rps)), 0),
    fmt(median(ms.map((m) => m.p50)), 2),
    ...PROCESSES.map((name) => {
      const v = cpuOf(config, name);
      return v === undefined ? "" : fmt(v, 0);
    }),
    ms.reduce((n, m) => n + m.errors, 0),
  ];
});
const sum = (config: Config, names: string[]) => names.reduce((s, name) => s + (cpuOf(config, name) ?? 0), 0);
// A side's bound on 2 cores: its busiest process gets at most one core, all of them two.
const bound = (config: Config) => {
  const names = PROCESSES.filter((name) => cpuOf(config, name) !== undefined);
  const busiest = Math.max(...names.map((name) => cpuOf(config, name)!));
  return Math.min(1e6 / busiest, 2e6 / sum(config, names));
};
const relayCost = sum("relay", ["front", "nats-server", "responder"]);
const directBound = bound("direct");
const budget = 2e6 / (0.8 * directBound) - sum("relay", ["uvicorn", "load client"]);

writeResults("relay-floor.md", "The floor under the hosted-app relay", [
  machineLine(),
  `Load average (1 min): ${fmt(loadStart, 2)} at the start, ${fmt(loadavg()[0]!, 2)} at the end.`,
  `${clients} keep-alive clients, GET / answering a ${BODY.length}-byte JSON body; ${rounds} rounds of ${seconds} s per configuration (after 1 s of warm-up), alternating order; medians over rounds. ` +
    "direct: Debian's uvicorn over TCP (hosted-app's baseline). uws: a bare uWebSockets.js server answering by itself. uws+nats: each request crosses NATS to a bare nats.js responder that answers. " +
    "relay: the same, and the responder fetches the body from uvicorn on a Unix socket (hand-written HTTP/1.1 on kept-alive connections). No authorization, key check, routing, flow control or limits: every figure is a lower bound for a relay of this shape.",
  markdownTable(["configuration", "req/s", "p50 ms", ...PROCESSES.map((p) => `${p} CPU µs/req`), "errors"], rows),
  [
    `The bare relay's own CPU per request (front + nats-server + responder): **${fmt(relayCost, 0)} µs**.`,
    `Issue 13's target, hosted >= 0.8x direct, with every process on these 2 cores: direct is bounded at ${fmt(directBound, 0)} req/s here, so the hosted side must reach ${fmt(0.8 * directBound, 0)} req/s, ` +
      `i.e. spend at most ${fmt(2e6 / (0.8 * directBound), 0)} µs of CPU per request in all; uvicorn and the load client take ${fmt(sum("relay", ["uvicorn", "load client"]), 0)} µs of it, ` +
      `which leaves **${fmt(budget, 0)} µs** for the relay. The relay-shaped floor's best ratio: ${fmt(bound("relay") / directBound, 2)}.`,
  ].join("\n"),
  `Command: \`npm run build && node dist/bench/relay-floor.js --seconds ${seconds} --rounds ${rounds} --clients ${clients}\``,
]);
