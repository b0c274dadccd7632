// tier: serial (hostile cases run beside another tenant's streams, whose timing they check)
import t, { type Test } from "tap";
import { newId, newSortableId } from "../../../lib/ids.js";
import { hostileCase, startHostileStack } from "../../harness/hostile.js";
import { chunkFrame, rawConnect, rawRequest, rawWrite, requestHead, type RawResponse } from "../../harness/raw-http.js";

// Bodies that keep arriving after the gateway answered: a 2 MB POST without a key, to an
// unknown route, to routes that answer before reading their body, and bodies over the limit.
// uWS keeps delivering the rest of such a body after the response ended; touching the finished
// response from there used to throw inside uWS's native callback and kill the gateway. Each case
// checks the exact answer, that it arrived whole before the connection ended (no reset while the
// client was still sending a body the gateway would have accepted), and that the gateway, and
// another organization's stream running meanwhile, are untouched.

const MB = 1024 * 1024;
const BODY_LIMIT = 8 * MB; // TRIBUTARY_MAX_BODY_BYTES' default
const hostile = await startHostileStack(t);
const { a, b } = hostile;
const port = hostile.stack.gateway.port;
const twoMegabytes = Buffer.alloc(2 * MB, "x");


function assertError(t: Test, res: RawResponse | undefined, status: number, code: string | null, type = "invalid_request_error"): void {
  t.ok(res, "a complete answer arrived");
  if (!res) return;
  t.equal(res.status, status, `status ${status}`);
  const body = res.json();
  t.equal(body.error.code, code, `error code ${code}`);
  t.equal(body.error.type, type);
}

/**
 * A body the gateway would have accepted (at most the body limit) is read to its end after an
 * early answer: the client sends it all without a reset, gets the answer, and is told to close.
 */
async function drainedAfterAnswer(t: Test, request: Parameters<typeof rawRequest>[0], status: number, code: string | null) {
  const conn = await rawRequest(request);
  await conn.sent;
  const res = await conn.response;
  assertError(t, res, status, code);
  t.equal(res?.headers.connection, "close", "the answer tells the client to close the connection");
  t.equal(conn.writeError(), undefined, "the whole body was taken, without a reset");
  conn.destroy();
}

hostileCase(t, hostile, "a 2 MB POST without a key is a 401; the body is drained", async (t) => {
  await drainedAfterAnswer(t, { port, path: "/v1/chat/completions", headers: { "content-type": "application/json" }, body: twoMegabytes }, 401, null);
  // The same through a real client library.
  const res = await fetch(`${hostile.stack.gateway.url}/v1/chat/completions`, { method: "POST", body: twoMegabytes, headers: { "content-type": "application/json" } });
  t.equal(res.status, 401);
  t.equal(((await res.json()) as { error: { type: string } }).error.type, "invalid_request_error");
});

hostileCase(t, hostile, "a 2 MB POST with a wrong key is a 401 invalid_api_key", async (t) => {
  await drainedAfterAnswer(t, { port, path: "/v1/responses", headers: { authorization: "Bearer sk-nope" }, body: twoMegabytes }, 401, "invalid_api_key");
});

hostileCase(t, hostile, "a 2 MB POST to an unknown route is a 404, with or without a key", async (t) => {
  await drainedAfterAnswer(t, { port, path: "/v1/no/such/route", body: twoMegabytes }, 404, "unknown_url");
  await drainedAfterAnswer(t, { port, path: "/v1/no/such/route", headers: { authorization: `Bearer ${a.key}` }, body: twoMegabytes }, 404, "unknown_url");
});

hostileCase(t, hostile, "a 2 MB body to a route that answers without reading it", async (t) => {
  const auth = { authorization: `Bearer ${a.key}` };
  await drainedAfterAnswer(t, { port, path: `/v1/responses/${newId("resp_")}/cancel`, headers: auth, body: twoMegabytes }, 404, null);
  await drainedAfterAnswer(t, { port, path: `/v1/batches/${newSortableId("batch_")}/cancel`, headers: auth, body: twoMegabytes }, 404, null);
  await drainedAfterAnswer(t, { port, method: "PUT", path: "/v1/chat/completions", headers: auth, body: twoMegabytes }, 405, "method_not_allowed");
});

hostileCase(t, hostile, "a body declared over the limit is a 413, answered whole, then the connection closes", async (t) => {
  const conn = await rawRequest({ port, path: "/v1/chat/completions", headers: { authorization: `Bearer ${a.key}` }, body: Buffer.alloc(BODY_LIMIT + 1, "x") });
  assertError(t, await conn.response, 413, "request_too_large");
  t.equal((await conn.response)?.headers.connection, "close");
  t.not(await conn.ended, "destroyed", "the gateway ended the connection");
  // Unauthenticated, to the public invitation route (its own 64 KiB limit).
  const invite = await rawRequest({ port, path: "/v1/invitations/redeem", body: twoMegabytes });
  assertError(t, await invite.response, 413, "request_too_large");
  t.not(await invite.ended, "destroyed");
});

hostileCase(t, hostile, "a chunked body that crosses the limit is a 413 when it does", async (t) => {
  const conn = await rawConnect({ port });
  await rawWrite(conn, requestHead("POST", "/v1/chat/completions", { authorization: `Bearer ${a.key}`, "transfer-encoding": "chunked" }));
  const block = Buffer.alloc(MB, "y");
  const chunk = chunkFrame(block);
  let sent = 0;
  while (!conn.socket.destroyed && sent <= BODY_LIMIT + MB && (await Promise.race([conn.response.then(() => "answered"), rawWrite(conn, chunk).then(() => "sent")])) === "sent") sent += block.length;
  assertError(t, await conn.response, 413, "request_too_large");
  t.ok(sent > BODY_LIMIT - MB, `refused once the limit was crossed (${(sent / MB).toFixed(0)} MiB sent)`);
  t.equal((await conn.response)?.headers.connection, "close");
  // The rest is held unread rather than reset (slow-clients.test.ts follows such a connection to its end).
  t.equal(conn.writeError(), undefined, "the client, still sending, was not reset");
  conn.destroy();
});

hostileCase(t, hostile, "a client that leaves halfway through a body, before and after the answer", async (t) => {
  const early = await rawConnect({ port });
  await rawWrite(early, requestHead("POST", "/v1/chat/completions", { authorization: `Bearer ${a.key}`, "content-length": String(4 * MB) }));
  await rawWrite(early, twoMegabytes);
  early.destroy();
  const late = await rawRequest({ port, path: "/v1/no/such/route", headers: { "content-length": String(4 * MB) }, body: twoMegabytes });
  assertError(t, await late.response, 404, "unknown_url");
  late.destroy();
});
