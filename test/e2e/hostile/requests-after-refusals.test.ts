// tier: serial (hostile cases run beside another tenant's streams, whose timing they check)
import t, { type Test } from "tap";
import { BYSTANDER_MODEL, hostileCase, startHostileStack } from "../../harness/hostile.js";
import { rawRequest, sendInOneWrite, sleep, type OneWriteResult, type RawConnection, type RawResponse } from "../../harness/raw-http.js";

// Refusals that close the connection, decided while uWS is still reading what came with the
// request: a 431 for a head over the header limits, a 429 or 503 from the connection limits, a
// 413 for a body declared over the limit. Such a refusal is answered whole on its own, and a
// request pipelined behind it in the same write is never dispatched: no route runs for it, it
// gets no answer of its own, and the connection closes. (The refusal used to be written inside
// uWS's callback, only corked: uWS then dispatched the request behind it, the route ran and
// answered, and the connection stayed open.) uWS 20.30 cannot send the refusal and skip what
// follows it in the same read: it closes the connection on the pipelined request while the
// refusal is unanswered, and the refusal goes with it. So behind a pipelined request the
// refusal arrives only when the rest came in a later read: at most one answer, the refusal's.
// Every case runs while another organization streams (one stream a case: with caps this small, a
// relay of streams from one address would be refused), and ends with the gateway still serving.

const PER_ADDRESS = 2;
const TOTAL = 6;
const BODY_LIMIT = 64 * 1024;
const hostile = await startHostileStack(t, {
  gatewayEnv: {
    TRIBUTARY_MAX_CONNECTIONS_PER_ADDRESS: String(PER_ADDRESS),
    TRIBUTARY_MAX_CONNECTIONS: String(TOTAL),
    // The chat route's limit, as the public invitation route's own: a body over it is small to send.
    TRIBUTARY_MAX_BODY_BYTES: String(BODY_LIMIT),
  },
});
const { a } = hostile;
const port = hostile.stack.gateway.port;
const key = `authorization: Bearer ${a.key}\r\n`;

/** What is sent right behind a refused request, in the same write. */
const PIPELINED = {
  "GET /v1/models": `GET /v1/models HTTP/1.1\r\nhost: tributary.test\r\n${key}\r\n`,
  "an unknown path": "GET /v1/no/such/route HTTP/1.1\r\nhost: tributary.test\r\n\r\n",
};

interface Sent extends OneWriteResult {
  /** The status of every response that began to arrive, in order. */
  statuses: number[];
}

/** Sends `raw` in one write on a fresh connection from `localAddress`. */
async function send(raw: string | Buffer, localAddress: string): Promise<Sent> {
  const sent = await sendInOneWrite(raw, { port, localAddress });
  return { ...sent, statuses: [...sent.received.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((m) => Number(m[1])) };
}

function errorOf(res: RawResponse | undefined): { type?: unknown; code?: unknown; message?: unknown } {
  try {
    return res?.json().error ?? {};
  } catch {
    return {};
  }
}

/** tributary_http_requests_total summed over the series of `route`. */
async function requestsRecorded(route: string): Promise<number> {
  const text = await (await fetch(hostile.stack.gateway.url + "/metrics")).text();
  let total = 0;
  for (const line of text.split("\n")) if (line.startsWith(`tributary_http_requests_total{route="${route}",`)) total += Number(line.slice(line.lastIndexOf(" ") + 1));
  return total;
}

interface Refusal {
  status: number;
  code: string;
  type: string;
}

/**
 * `raw` is refused with `expected` and the connection closes; sent again with each of PIPELINED
 * right behind it in the same write, nothing but the refusal comes back, the connection closes,
 * and (`countRoutes`) GET /v1/models never ran.
 */
async function refusedAndNothingBehind(t: Test, what: string, raw: string | Buffer, expected: Refusal, localAddress: string, countRoutes = true): Promise<void> {
  const alone = await send(raw, localAddress);
  const error = errorOf(alone.res);
  t.strictSame(
    { statuses: alone.statuses, type: error.type, code: error.code, message: typeof error.message, connection: alone.res?.headers.connection, ended: alone.ended },
    { statuses: [expected.status], type: expected.type, code: expected.code, message: "string", connection: "close", ended: "closed" },
    `${what}: a ${expected.status} ${expected.code}, then the gateway closes the connection`,
  );
  for (const [name, behind] of Object.entries(PIPELINED)) {
    const before = countRoutes ? await requestsRecorded("/v1/models") : 0;
    const piped = await send(Buffer.concat([Buffer.from(raw), Buffer.from(behind)]), localAddress);
    t.ok(piped.statuses.length <= 1 && piped.statuses.every((s) => s === expected.status), `${what}, ${name} behind it: no answer but the refusal (got ${JSON.stringify(piped.statuses)})`);
    if (piped.res) t.equal(errorOf(piped.res).code, expected.code, `${what}, ${name} behind it: the refusal's code`);
    t.notOk(piped.received.includes('"object":"list"') || piped.received.includes("unknown_url"), `${what}, ${name} behind it: the pipelined request got no answer`);
    t.equal(piped.ended, "closed", `${what}, ${name} behind it: the gateway closed the connection`);
    if (countRoutes) {
      await sleep(200); // a request that ran is counted once its exchange finished
      t.equal(await requestsRecorded("/v1/models"), before, `${what}, ${name} behind it: no route ran for it`);
    }
  }
}

const headersTooLarge: Refusal = { status: 431, code: "request_header_fields_too_large", type: "invalid_request_error" };

hostileCase(t, hostile, "a head over the header limits is a 431; nothing pipelined behind it is served", async (t) => {
  const many = Array.from({ length: 32 }, (_, i) => `x-header-${i}: v\r\n`).join(""); // with Host: 33 lines, the limit is 32
  await refusedAndNothingBehind(t, "33 header lines", `GET /healthz HTTP/1.1\r\nhost: tributary.test\r\n${many}\r\n`, headersTooLarge, "127.0.0.31");
  await refusedAndNothingBehind(t, "a 5 kB header", `GET /healthz HTTP/1.1\r\nhost: tributary.test\r\nx-big: ${"v".repeat(5000)}\r\n\r\n`, headersTooLarge, "127.0.0.31");
  await refusedAndNothingBehind(t, "a 5 kB header on a POST with a body", `POST /v1/chat/completions HTTP/1.1\r\nhost: tributary.test\r\n${key}x-big: ${"v".repeat(5000)}\r\ncontent-length: 5\r\n\r\nhello`, headersTooLarge, "127.0.0.31");
}, 4);

hostileCase(t, hostile, "a body declared over the limit is a 413; nothing pipelined behind it is served", async (t) => {
  const tooLarge: Refusal = { status: 413, code: "request_too_large", type: "invalid_request_error" };
  const body = "x".repeat(BODY_LIMIT + 1);
  // The public invitation route refuses it as its handler starts; the chat route once the key is checked.
  const invitation = `POST /v1/invitations/redeem HTTP/1.1\r\nhost: tributary.test\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body}`;
  await refusedAndNothingBehind(t, "an invitation body over 64 KiB", invitation, tooLarge, "127.0.0.32");
  const chat = `POST /v1/chat/completions HTTP/1.1\r\nhost: tributary.test\r\n${key}content-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body}`;
  await refusedAndNothingBehind(t, "a chat body over 64 KiB", chat, tooLarge, "127.0.0.32");
}, 4);

/** Streamed completions from `address` that last about four seconds, each admitted (its first bytes arrived). */
async function hold(address: string, count: number): Promise<RawConnection[]> {
  const body = JSON.stringify({ model: BYSTANDER_MODEL, messages: [{ role: "user", content: "go" }], max_tokens: 400, stream: true });
  const conns = await Promise.all(Array.from({ length: count }, () => rawRequest({ port, localAddress: address, path: "/v1/chat/completions", headers: { authorization: `Bearer ${a.key}`, "content-type": "application/json" }, body })));
  for (const c of conns) while (c.received() === 0 && !c.socket.destroyed) await sleep(10);
  return conns;
}

/** Drops held streams; their slots are free once their exchanges finished. */
async function release(conns: RawConnection[]): Promise<void> {
  for (const c of conns) c.destroy();
  await sleep(200);
}

hostileCase(t, hostile, "a request over the connection limits is a 429 or 503; nothing pipelined behind it is served", async (t) => {
  const probe = "GET /healthz HTTP/1.1\r\nhost: tributary.test\r\n\r\n";
  // The limiter refuses before any route (and the request behind would be refused as well): what
  // is checked here is that the request behind gets no answer of its own. The metrics route
  // itself would be refused while the gateway is full, so routes are not counted.
  const mine = await hold("127.0.0.41", PER_ADDRESS);
  await refusedAndNothingBehind(t, "one request over the address's cap", probe, { status: 429, code: "too_many_connections", type: "requests" }, "127.0.0.41", false);
  await release(mine);
  // The bystander's stream holds one slot; these fill the rest, each address within its cap.
  const full = [...(await hold("127.0.0.42", PER_ADDRESS)), ...(await hold("127.0.0.43", PER_ADDRESS)), ...(await hold("127.0.0.44", TOTAL - 1 - 2 * PER_ADDRESS))];
  await refusedAndNothingBehind(t, "one request over the gateway's total", probe, { status: 503, code: "server_overloaded", type: "server_error" }, "127.0.0.45", false);
  await release(full);
}, 4);
