// tier: serial (hostile cases run beside another tenant's streams, whose timing they check)
import t, { type Test } from "tap";
import { TEST_MODEL } from "../../harness/processes.js";
import { hostileCase, startHostileStack } from "../../harness/hostile.js";
import { bytesTakenOfMore, chunkFrame, rawConnect, rawRequest, rawWrite, requestHead, sleep, type RawConnection } from "../../harness/raw-http.js";

// Slow and abandoned clients: request heads sent a byte at a time (slowloris), connections that
// never send a request or stay idle after one, bodies that trickle in, SSE readers that never
// read, and clients that vanish mid-stream. Each is cut off by a bound (uWS's fixed 10 s for
// heads, idle connections and bodies under 16 KiB/s; the body timeout; the pending bytes of a
// stream) while another organization's stream runs untouched.

const BODY_TIMEOUT_MS = 2000;
const PENDING_STREAM_BYTES = 4096;
const MAX_HELD = 3;
/** uWebSockets.js 20.30's fixed HTTP_IDLE_TIMEOUT_S (its timers tick every 4 s, so 8-12 s). */
const UWS_IDLE_CUTOFF_MS = 10_000;
/** A sim model that produces far faster than a socket that is not read can absorb. */
const FIREHOSE_MODEL = "test/sim-firehose";
const hostile = await startHostileStack(t, {
  extraModels: [{ id: FIREHOSE_MODEL, engine: "sim", context_length: 200_000, max_output_tokens: 100_000, slots: 16, queue_limit: 16, sim: { tokens_per_second: 5_000, first_token_latency_ms: 0 }, rate_limits: { requests_per_minute: 10_000, tokens_per_minute: 100_000_000 } }],
  gatewayEnv: { TRIBUTARY_BODY_TIMEOUT_MS: String(BODY_TIMEOUT_MS), TRIBUTARY_MAX_PENDING_STREAM_BYTES: String(PENDING_STREAM_BYTES), TRIBUTARY_MAX_HELD_CONNECTIONS: String(MAX_HELD) },
});
const { a, b } = hostile;
const port = hostile.stack.gateway.port;
const auth = { authorization: `Bearer ${a.key}`, "content-type": "application/json" };


/** Sends `data` one byte every `everyMs` until the connection ends or `stop()` says so. */
async function trickle(conn: RawConnection, data: Buffer, everyMs: number, stop: () => boolean = () => false): Promise<number> {
  let sent = 0;
  for (; sent < data.length && !conn.socket.destroyed && !stop(); sent++) {
    await rawWrite(conn, data.subarray(sent, sent + 1));
    await sleep(everyMs);
  }
  return sent;
}

hostileCase(t, hostile, "slowloris heads, silent connections and idle keep-alives are closed within uWS's 10 s, unanswered", async (t) => {
  const started = performance.now();
  const heads = await Promise.all(Array.from({ length: 10 }, () => rawConnect({ port })));
  const silent = await Promise.all(Array.from({ length: 10 }, () => rawConnect({ port })));
  const keepAlive = await rawRequest({ port, method: "GET", path: "/healthz" });
  t.equal((await keepAlive.response)?.status, 200);
  const head = Buffer.from(requestHead("POST", "/v1/chat/completions", { ...auth, "content-length": "2" }));
  const trickling = heads.map((c) => trickle(c, head, 500));
  const endings = await Promise.all([...silent, keepAlive].map((c) => c.ended));
  // A trickling client may write its next byte as the gateway closes: its kernel then answers
  // the write with a reset. Closed or reset, the gateway ended it; never the client.
  const headEndings = await Promise.all(heads.map((c) => c.ended));
  const elapsed = performance.now() - started;
  t.same([...new Set(endings)], ["closed"], "every silent or idle connection was closed by the gateway");
  t.ok(headEndings.every((e) => e === "closed" || e === "reset"), `every trickling one was ended by the gateway: ${[...new Set(headEndings)].join(", ")}`);
  t.ok(elapsed < UWS_IDLE_CUTOFF_MS + 5000, `within ${(elapsed / 1000).toFixed(1)} s`);
  const sent = await Promise.all(trickling);
  t.ok(sent.every((n) => n < head.length), "no head was ever completed");
  t.same(await Promise.all(heads.map((c) => c.response)), heads.map(() => undefined), "no head got an answer");
});

hostileCase(t, hostile, "a JSON body that does not arrive within the body timeout is a 408, then closed", async (t) => {
  const body = Buffer.from(JSON.stringify({ model: TEST_MODEL, messages: [{ role: "user", content: "x".repeat(100) }] }));
  const conn = await rawConnect({ port });
  const started = performance.now();
  await rawWrite(conn, requestHead("POST", "/v1/chat/completions", { ...auth, "content-length": String(body.length) }));
  let answered = false;
  void conn.response.then(() => (answered = true));
  await trickle(conn, body, 100, () => answered);
  const res = await conn.response;
  const elapsed = performance.now() - started;
  t.equal(res?.status, 408);
  t.equal(res?.json().error.code, "request_timeout");
  t.equal(res?.headers.connection, "close");
  t.ok(elapsed >= BODY_TIMEOUT_MS && elapsed < BODY_TIMEOUT_MS + 2000, `answered after ${elapsed.toFixed(0)} ms`);
  t.equal(await conn.ended, "closed", "the gateway closed the connection");
});

hostileCase(t, hostile, "a client that goes on sending after its 413 is read no further, then closed within uWS's 10 s", async (t) => {
  const MB = 1024 * 1024;
  const block = chunkFrame(Buffer.alloc(MB, "w"));
  const conn = await rawConnect({ port });
  await rawWrite(conn, requestHead("POST", "/v1/chat/completions", { ...auth, "transfer-encoding": "chunked" }));
  // Past the 8 MiB body limit (TRIBUTARY_MAX_BODY_BYTES' default) within 12 blocks.
  for (let i = 0; i < 12 && (await Promise.race([conn.response.then(() => "answered"), rawWrite(conn, block).then(() => "sent")])) === "sent"; i++);
  const res = await conn.response;
  const answeredAt = performance.now();
  t.equal(res?.status, 413);
  t.equal(res?.headers.connection, "close");
  const taken = await bytesTakenOfMore(conn, 64);
  t.ok(taken < 32 * MB, `the gateway stopped reading (${(taken / MB).toFixed(1)} of 64 MiB more left the client)`);
  const ended = await conn.ended;
  const elapsed = performance.now() - answeredAt;
  t.not(ended, "destroyed", `the gateway ended the connection (${ended})`);
  t.ok(elapsed < UWS_IDLE_CUTOFF_MS + 5000, `within ${(elapsed / 1000).toFixed(1)} s of the answer`);
});

hostileCase(t, hostile, "an upload is exempt from the body timeout: a 3 s upload at 40 KB/s is stored", async (t) => {
  const boundary = "----slow";
  const form = Buffer.concat([
    Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nuser_data\r\n--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="slow.bin"\r\n\r\n`),
    Buffer.alloc(120_000, "s"),
    Buffer.from(`\r\n--${boundary}--\r\n`),
  ]);
  const conn = await rawConnect({ port });
  await rawWrite(conn, requestHead("POST", "/v1/files", { authorization: `Bearer ${a.key}`, "content-type": `multipart/form-data; boundary=${boundary}`, "content-length": String(form.length) }));
  for (let at = 0; at < form.length; at += 4000) {
    await rawWrite(conn, form.subarray(at, at + 4000));
    await sleep(100);
  }
  const res = await conn.response;
  t.equal(res?.status, 200, "stored");
  const file = res?.json<{ id: string; bytes: number }>();
  t.equal(file?.bytes, 120_000);
  conn.destroy();
  if (file) await a.client.files.delete(file.id);
});

hostileCase(t, hostile, "SSE readers that never read are dropped at their pending bound", async (t) => {
  const body = JSON.stringify({ model: FIREHOSE_MODEL, messages: [{ role: "user", content: "go" }], max_tokens: 50_000, stream: true });
  const conns = await Promise.all(Array.from({ length: 3 }, () => rawRequest({ port, path: "/v1/chat/completions", headers: auth, body, paused: true })));
  const drops = () => hostile.stack.gateway.logs.filter((r) => r.msg === "slow SSE client dropped" && r.bound === "stream");
  const deadline = performance.now() + 8_000;
  while (drops().length < conns.length && performance.now() < deadline) await sleep(100);
  t.equal(drops().length, conns.length, "each never-reading stream was dropped for its own bound");
  t.ok(drops().every((r) => (r.heldBytes as number) > PENDING_STREAM_BYTES), "once it held more than the bound");
  for (const c of conns) c.destroy();
});

/** The gateway's tributary_held_connections gauge. */
async function heldConnections(): Promise<number> {
  const text = await (await fetch(`${hostile.stack.gateway.url}/metrics`)).text();
  return Number(/^tributary_held_connections (\d+)$/m.exec(text)?.[1] ?? NaN);
}

hostileCase(t, hostile, `at most TRIBUTARY_MAX_HELD_CONNECTIONS (${MAX_HELD}) connections are held unread; past it, the answer closes its connection`, async (t) => {
  // The 413 case left a held connection, counted for some 13 s after its answer: this case runs
  // after the upload and SSE cases (some 7 s), rather than right after that one, so that it
  // rarely waits for it.
  for (let i = 0; i < 40 && (await heldConnections()) > 0; i++) await sleep(250);
  t.equal(await heldConnections(), 0, "nothing held to begin with");
  // Chunked bodies without a key: each is a 401 before its body is read, its rest unknown.
  const refused: RawConnection[] = [];
  for (let i = 0; i <= MAX_HELD; i++) {
    const conn = await rawConnect({ port });
    await rawWrite(conn, requestHead("POST", "/v1/chat/completions", { "content-type": "application/json", "transfer-encoding": "chunked" }) + "2\r\n{}\r\n");
    t.equal((await conn.response)?.status, 401, `request ${i + 1}: 401`);
    refused.push(conn);
  }
  const stillOpen = (conn: RawConnection) => Promise.race([conn.ended.then((how) => how), sleep(1000).then(() => "open")]);
  const last = refused.pop()!;
  t.not(await Promise.race([last.ended, sleep(3000).then(() => "open")]), "open", `request ${MAX_HELD + 1}: its connection closed at once`);
  t.same(await Promise.all(refused.map(stillOpen)), refused.map(() => "open"), `the first ${MAX_HELD} are held open`);
  t.equal(await heldConnections(), MAX_HELD, "the gauge counts them");
  for (const conn of refused) conn.destroy();
});

hostileCase(t, hostile, "clients that vanish mid-stream, more of them than the model has slots", async (t) => {
  const body = JSON.stringify({ model: TEST_MODEL, messages: [{ role: "user", content: "Once upon a time" }], max_tokens: 1024, stream: true });
  const conns = await Promise.all(Array.from({ length: 12 }, () => rawRequest({ port, path: "/v1/chat/completions", headers: auth, body })));
  const deadline = performance.now() + 10_000;
  while (conns.some((c) => c.received() === 0) && performance.now() < deadline) await sleep(20);
  t.ok(conns.every((c) => c.received() > 0), "every stream had started");
  for (const c of conns) c.destroy();
  const res = await a.client.chat.completions.create({ model: TEST_MODEL, messages: [{ role: "user", content: "hello" }], max_tokens: 8 });
  t.equal(res.choices[0]?.finish_reason, "length", "the model still serves");
});
