// tier: serial (hostile cases run beside another tenant's streams, whose timing they check)
import t, { type Test } from "tap";
import { hostileCase, startHostileStack } from "../../harness/hostile.js";
import { chunkFrame, rawConnect, rawRequest, rawWrite, requestHead, type RawResponse } from "../../harness/raw-http.js";

// Hostile uploads at the edges of the multipart reader: files just over the file limit (which
// used to hang forever once the file store stopped reading), bodies over the form's limit,
// malformed and oversized forms. Each case checks the exact answer, then that the gateway and
// another organization's stream running meanwhile are untouched. The file limit is lowered so
// that the edges are a few megabytes away.

const MB = 1024 * 1024;
const FILE_LIMIT = 4 * MB;
const FORM_OVERHEAD = MB; // gateway/routes/files.ts: room for boundaries and fields around the file
const hostile = await startHostileStack(t, { env: { TRIBUTARY_MAX_FILE_BYTES: String(FILE_LIMIT) } });
const { a, b } = hostile;
const port = hostile.stack.gateway.port;
const boundary = "----tributary-hostile";


function assertError(t: Test, res: RawResponse | undefined, status: number, code: string | null, param?: string | null): void {
  t.ok(res, "a complete answer arrived");
  if (!res) return;
  t.equal(res.status, status, `status ${status}`);
  const body = res.json();
  t.equal(body.error.code, code, `error code ${code}`);
  t.equal(body.error.type, "invalid_request_error");
  if (param !== undefined) t.equal(body.error.param, param, `param ${param}`);
}

/** A multipart form: fields, then (optionally) a file part of `fileBytes` bytes named `fileField`. */
function form(fields: Record<string, string>, file?: { bytes: number; field?: string; filename?: string }, extraFiles = 0): Buffer {
  const parts: Buffer[] = [];
  for (const [name, value] of Object.entries(fields)) parts.push(Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="${name}"\r\n\r\n${value}\r\n`));
  for (let i = 0; i <= extraFiles && file; i++) {
    parts.push(Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="${file.field ?? "file"}"; filename="${file.filename ?? "data.jsonl"}"\r\nContent-Type: application/octet-stream\r\n\r\n`));
    parts.push(Buffer.alloc(file.bytes, "z"), Buffer.from("\r\n"));
  }
  parts.push(Buffer.from(`--${boundary}--\r\n`));
  return Buffer.concat(parts);
}

const upload = (body: Buffer, headers: Record<string, string> = {}) =>
  rawRequest({ port, path: "/v1/files", headers: { authorization: `Bearer ${a.key}`, "content-type": `multipart/form-data; boundary=${boundary}`, ...headers }, body });

/** The answer, or a failed check when none comes within `ms` (the old bug was a request that never ended). */
async function answerWithin(t: Test, conn: { response: Promise<RawResponse | undefined>; destroy(): void }, ms = 10_000): Promise<RawResponse | undefined> {
  let timer: NodeJS.Timeout | undefined;
  const res = await Promise.race([conn.response, new Promise<"late">((r) => (timer = setTimeout(() => r("late"), ms)))]);
  clearTimeout(timer);
  conn.destroy();
  if (res === "late") {
    t.fail(`no answer within ${ms} ms`);
    return undefined;
  }
  return res;
}

hostileCase(t, hostile, "a file 1 MB over the file limit, in a body under the form limit, is a 400 file_too_large", async (t) => {
  const body = form({ purpose: "user_data" }, { bytes: FILE_LIMIT + MB - 4096 });
  t.ok(body.length <= FILE_LIMIT + FORM_OVERHEAD, "the body itself is within the form's limit");
  assertError(t, await answerWithin(t, await upload(body)), 400, "file_too_large", "file");
  const files = await a.client.files.list();
  t.equal(files.data.length, 0, "nothing was stored");
});

hostileCase(t, hostile, "a file one byte over the limit is refused, one at the limit is stored", async (t) => {
  assertError(t, await answerWithin(t, await upload(form({ purpose: "user_data" }, { bytes: FILE_LIMIT + 1 }))), 400, "file_too_large", "file");
  const ok = await answerWithin(t, await upload(form({ purpose: "user_data" }, { bytes: FILE_LIMIT, filename: "edge.bin" })));
  t.equal(ok?.status, 200);
  const file = ok?.json<{ id: string; bytes: number }>();
  t.equal(file?.bytes, FILE_LIMIT);
  if (file) await a.client.files.delete(file.id);
});

hostileCase(t, hostile, "a body declared over the form limit is a 413 before the file store sees it; the connection then closes", async (t) => {
  const conn = await upload(form({ purpose: "user_data" }, { bytes: FILE_LIMIT + FORM_OVERHEAD + 1 }));
  assertError(t, await conn.response, 413, "request_too_large");
  t.not(await conn.ended, "destroyed", "the gateway closed the connection");
});

hostileCase(t, hostile, "a chunked upload that never ends is a 413 once it crosses the form limit", async (t) => {
  const conn = await rawConnect({ port });
  await rawWrite(conn, requestHead("POST", "/v1/files", { authorization: `Bearer ${a.key}`, "content-type": `multipart/form-data; boundary=${boundary}`, "transfer-encoding": "chunked" }));
  const head = Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nuser_data\r\n--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="x.bin"\r\n\r\n`);
  await rawWrite(conn, chunkFrame(head));
  const block = Buffer.alloc(MB, "z");
  for (let i = 0; i < 12 && !conn.socket.destroyed; i++) {
    const step = await Promise.race([conn.response.then(() => "answered"), rawWrite(conn, chunkFrame(block)).then(() => "sent")]);
    if (step === "answered") break;
  }
  // The file store refuses the file past its limit first (a 400), or the body reader past the form's (a 413).
  const res = await answerWithin(t, conn);
  t.ok(res?.status === 400 || res?.status === 413, `refused (${res?.status})`);
  t.equal(res?.json().error.code, res?.status === 400 ? "file_too_large" : "request_too_large");
});

hostileCase(t, hostile, "malformed and oversized forms are 400s naming the problem", async (t) => {
  // No boundary in the content type.
  assertError(t, await answerWithin(t, await upload(form({ purpose: "user_data" }, { bytes: 10 }), { "content-type": "multipart/form-data" })), 400, "invalid_value", "file");
  // Not multipart at all.
  assertError(t, await answerWithin(t, await upload(Buffer.from("{}"), { "content-type": "application/json" })), 400, "invalid_content_type", "file");
  // A body cut off in the middle of the file part.
  const whole = form({ purpose: "user_data" }, { bytes: 64 * 1024 });
  assertError(t, await answerWithin(t, await upload(whole.subarray(0, whole.length - 1000))), 400, "invalid_value", "file");
  // Two file parts.
  assertError(t, await answerWithin(t, await upload(form({ purpose: "user_data" }, { bytes: 1000 }, 1))), 400, "invalid_value", "file");
  // A file under another name.
  assertError(t, await answerWithin(t, await upload(form({ purpose: "user_data" }, { bytes: 1000, field: "document" }))), 400, "unknown_parameter", "document");
  // Too many fields, and a field too long.
  const many = Object.fromEntries(Array.from({ length: 40 }, (_, i) => [`f${i}`, "v"]));
  assertError(t, await answerWithin(t, await upload(form(many, { bytes: 10 }))), 400, "invalid_value", "file");
  assertError(t, await answerWithin(t, await upload(form({ purpose: "x".repeat(70 * 1024) }, { bytes: 10 }))), 400, "invalid_value", "purpose");
  t.equal((await a.client.files.list()).data.length, 0, "nothing was stored");
});

hostileCase(t, hostile, "an upload without a key is a 401, its body drained", async (t) => {
  const conn = await rawRequest({ port, path: "/v1/files", headers: { "content-type": `multipart/form-data; boundary=${boundary}` }, body: form({ purpose: "user_data" }, { bytes: 3 * MB }) });
  await conn.sent;
  assertError(t, await answerWithin(t, conn), 401, null);
  t.equal(conn.writeError(), undefined, "the whole body was taken, without a reset");
});

hostileCase(t, hostile, "a client that leaves in the middle of an upload", async (t) => {
  const conn = await rawConnect({ port });
  const body = form({ purpose: "user_data" }, { bytes: 3 * MB });
  await rawWrite(conn, requestHead("POST", "/v1/files", { authorization: `Bearer ${a.key}`, "content-type": `multipart/form-data; boundary=${boundary}`, "content-length": String(body.length) }));
  await rawWrite(conn, body.subarray(0, MB));
  conn.destroy();
  await new Promise((r) => setTimeout(r, 300));
  t.equal((await a.client.files.list()).data.length, 0, "nothing was stored");
});
