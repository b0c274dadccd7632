// tier: serial (hostile cases run beside another tenant's streams, whose timing they check)
import { readFileSync } from "node:fs";
import t, { type Test } from "tap";
import { BYSTANDER_MODEL, hostileCase, startHostileStack } from "../../harness/hostile.js";
import { rawConnect, rawRequest, rawWrite, requestHead, sleep, type RawConnection } from "../../harness/raw-http.js";

// Floods: more connections with a request in progress than one client address may hold (429),
// than the gateway holds in total (503), a thousand connections at once, heads over the header
// limits, and a crowd of SSE readers that never read crossing the gateway-wide pending bound.
// Every source address is a different loopback address (any 127.x.y.z reaches the gateway), so
// the other organization's stream and the checks, from 127.0.0.1, are another client.

const PER_ADDRESS = 20;
const TOTAL = 60;
const PENDING_TOTAL_BYTES = 8 * 1024;
const MiB = 1024 * 1024;
const FIREHOSE_MODEL = "test/sim-firehose";
const hostile = await startHostileStack(t, {
  extraModels: [{
    id: FIREHOSE_MODEL, engine: "sim", context_length: 200_000, max_output_tokens: 100_000, slots: 16, queue_limit: 16,
    sim: { tokens_per_second: 5_000, first_token_latency_ms: 0 }, rate_limits: { requests_per_minute: 10_000, tokens_per_minute: 100_000_000 },
  }],
  gatewayEnv: {
    TRIBUTARY_MAX_CONNECTIONS_PER_ADDRESS: String(PER_ADDRESS),
    TRIBUTARY_MAX_CONNECTIONS: String(TOTAL),
    TRIBUTARY_MAX_PENDING_TOTAL_BYTES: String(PENDING_TOTAL_BYTES),
  },
});
const { a, b } = hostile;
const port = hostile.stack.gateway.port;
const auth = { authorization: `Bearer ${a.key}`, "content-type": "application/json" };
/** A streamed completion of the bystander's sim model that lasts about a second (100 tokens/s). */
const secondLongStream = JSON.stringify({ model: BYSTANDER_MODEL, messages: [{ role: "user", content: "go" }], max_tokens: 100, stream: true });


/** Opens `count` streamed completions from `address` at once; resolves with each first answer's status (after checking refusals). */
async function flood(t: Test, addresses: string[], perAddress: number): Promise<{ statuses: number[]; conns: RawConnection[] }> {
  const conns = await Promise.all(addresses.flatMap((address) => Array.from({ length: perAddress }, () => rawRequest({ port, localAddress: address, path: "/v1/chat/completions", headers: auth, body: secondLongStream }))));
  const statuses: number[] = [];
  await Promise.all(conns.map(async (c) => {
    // A refusal is a complete answer; an admitted stream's head is enough.
    while (c.received() === 0 && !c.socket.destroyed) await sleep(10);
    await sleep(20);
    const res = await Promise.race([c.response, sleep(200).then(() => undefined)]);
    if (!res) return statuses.push(200);
    statuses.push(res.status);
    if (res.status === 200) return;
    const code = res.json().error.code;
    if (res.status === 429) t.equal(code, "too_many_connections");
    if (res.status === 503) t.equal(code, "server_overloaded");
    t.equal(res.headers.connection, "close", "a refusal closes the connection");
  }));
  return { statuses, conns };
}

const count = (xs: number[], x: number) => xs.filter((y) => y === x).length;

hostileCase(t, hostile, "one address over its cap is refused with 429s; the others are served", async (t) => {
  const { statuses, conns } = await flood(t, ["127.0.0.2"], 2 * PER_ADDRESS);
  t.equal(count(statuses, 200), PER_ADDRESS, `${PER_ADDRESS} streams admitted`);
  t.equal(count(statuses, 429), PER_ADDRESS, "the rest refused with 429 too_many_connections");
  for (const c of conns) c.destroy();
}, 3);

hostileCase(t, hostile, "many addresses over the total are refused with 503s", async (t) => {
  // Four addresses, each within its own cap, together over the total (the bystander holds one).
  const { statuses, conns } = await flood(t, ["127.0.0.3", "127.0.0.4", "127.0.0.5", "127.0.0.6"], PER_ADDRESS);
  t.equal(count(statuses, 200), TOTAL - 1, "admitted up to the total");
  t.equal(count(statuses, 503), 4 * PER_ADDRESS - (TOTAL - 1), "the rest refused with 503 server_overloaded");
  for (const c of conns) c.destroy();
  // Freed at once: the slots count requests in progress, not connections ever made.
  await sleep(200);
  const again = await flood(t, ["127.0.0.7"], 2);
  t.same(again.statuses, [200, 200], "admitted again once the flood left");
  for (const c of again.conns) c.destroy();
}, 3);

hostileCase(t, hostile, "a thousand connections at once: refused, idle or closed, and the gateway's memory stays bounded", async (t) => {
  const rssBefore = rss();
  const idle = await Promise.all(Array.from({ length: 500 }, (_, i) => rawConnect({ port, localAddress: `127.0.1.${1 + (i % 50)}` })));
  const requests = await Promise.all(Array.from({ length: 500 }, (_, i) => rawRequest({ port, localAddress: `127.0.2.${1 + (i % 5)}`, path: "/v1/chat/completions", headers: auth, body: secondLongStream })));
  await Promise.all(requests.map(async (c) => {
    while (c.received() === 0 && !c.socket.destroyed) await sleep(10);
  }));
  const peak = rss();
  t.ok(peak - rssBefore < 100 * MiB, `the gateway grew by ${((peak - rssBefore) / MiB).toFixed(0)} MiB for 1,000 connections`);
  for (const c of [...idle, ...requests]) c.destroy();
}, 3);

hostileCase(t, hostile, "heads over the header limits are refused with 431 before any work", async (t) => {
  const manyHeaders = Object.fromEntries(Array.from({ length: 33 }, (_, i) => [`x-h${i}`, "v"]));
  const tooMany = await rawRequest({ port, method: "GET", path: "/v1/models", headers: { authorization: `Bearer ${a.key}`, ...manyHeaders } });
  const res = await tooMany.response;
  t.equal(res?.status, 431);
  t.equal(res?.json().error.code, "request_header_fields_too_large");
  t.equal(res?.headers.connection, "close");
  // One large header, sent whole.
  const large = await rawRequest({ port, method: "GET", path: "/v1/models", headers: { authorization: `Bearer ${a.key}`, "x-large": "v".repeat(5000) } });
  t.equal((await large.response)?.status, 431);
  // Past what uWS parses at all (48 header lines, or a head over 4 KiB that arrives in pieces): closed unanswered.
  const way = await rawRequest({ port, method: "GET", path: "/v1/models", headers: Object.fromEntries(Array.from({ length: 60 }, (_, i) => [`x-h${i}`, "v"])) });
  t.equal(await way.ended, "closed");
  t.equal(await way.response, undefined);
  const split = await rawConnect({ port });
  const head = requestHead("GET", "/v1/models", { "x-large": "v".repeat(6000) });
  await rawWrite(split, head.slice(0, 3000));
  await sleep(50);
  await rawWrite(split, head.slice(3000));
  t.equal(await split.ended, "closed");
  t.equal(await split.response, undefined);
  for (const c of [tooMany, large]) c.destroy();
});

hostileCase(t, hostile, "a crowd of SSE readers that never read crosses the gateway-wide pending bound", async (t) => {
  const body = JSON.stringify({ model: FIREHOSE_MODEL, messages: [{ role: "user", content: "go" }], max_tokens: 50_000, stream: true });
  const conns = await Promise.all(Array.from({ length: 4 }, (_, i) => rawRequest({ port, localAddress: `127.0.3.${1 + i}`, path: "/v1/chat/completions", headers: auth, body, paused: true })));
  const before = hostile.stack.gateway.logs.length;
  const drops = () => hostile.stack.gateway.logs.slice(before).filter((r) => r.msg === "slow SSE client dropped");
  const deadline = performance.now() + 8_000;
  while (drops().length < conns.length && performance.now() < deadline) await sleep(100);
  t.equal(drops().length, conns.length, "every never-reading stream was dropped");
  t.ok(drops().some((r) => r.bound === "total"), "for the gateway-wide bound (each stream alone was far below its own 8 MiB)");
  t.ok(drops().every((r) => (r.heldBytes as number) < 8 * MiB));
  for (const c of conns) c.destroy();
});

function rss(): number {
  const kb = Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${hostile.stack.gateway.child.pid}/status`, "utf8"))![1]);
  return kb * 1024;
}
