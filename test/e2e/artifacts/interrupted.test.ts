// tier: serial (an upload expiry of 2 s that a busy machine can outrun; the gateway killed and restarted)
import t from "tap";
import { request, type ClientRequest } from "node:http";
import { jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { startStack } from "../../harness/stack.js";
import { startGateway, TEST_KEY, type Gateway } from "../../harness/processes.js";
import { until } from "../../harness/until.js";
import { buckets } from "../../../lib/nats/subjects.js";

// Uploads that never finish: an unfinished multipart upload expires and the sweeper frees its
// parts; a gateway killed -9 mid-upload (single-shot and a part) leaves no artifact, and once the
// upload expiry has passed not a byte of it in the Object Store. A short expiry (2 s) and a fast
// sweep keep this quick.
const TTL_S = 2;
const env = { TRIBUTARY_ARTIFACT_UPLOAD_TTL_S: String(TTL_S), TRIBUTARY_ARTIFACT_MIN_PART_BYTES: "1024" };
const stack = await startStack(t, { runners: 0, gatewayEnv: env, actorsEnv: { ...env, TRIBUTARY_ARTIFACT_SWEEP_MS: "300" } });
const nc = await stack.nats.connect();
t.teardown(() => nc.close());
const jsm = await jetstreamManager(nc);
const meta = await new Kvm(nc).open(buckets.artifacts);
const storedMessages = async () => (await jsm.streams.info(`OBJ_${buckets.artifactContents}`)).state.messages;
const storedKeys = async () => {
  const keys: string[] = [];
  for await (const k of await meta.keys()) keys.push(k);
  return keys;
};

let gateway: Gateway = stack.gateway;
const api = (path: string, init: RequestInit = {}) =>
  fetch(gateway.url + path, { ...init, headers: { authorization: `Bearer ${TEST_KEY}`, "content-type": "application/json", ...(init.headers as Record<string, string>) } });

/** Starts a request whose body is sent only in part: `sent` bytes of a declared `declared`. */
function partialUpload(path: string, headers: Record<string, string>, declared: number, sent: Buffer): ClientRequest {
  const req = request(gateway.url + path, { method: "POST", headers: { authorization: `Bearer ${TEST_KEY}`, "content-length": String(declared), ...headers } });
  req.on("error", () => {});
  req.write(sent);
  return req;
}

const boundary = "----tributary-test";
const formHead = Buffer.from(`--${boundary}\r\ncontent-disposition: form-data; name="file"; filename="c.tgz"\r\ncontent-type: application/octet-stream\r\n\r\n`);
const formType = { "content-type": `multipart/form-data; boundary=${boundary}` };

t.test("an unfinished upload expires and the sweeper frees its parts", async (t) => {
  const before = await storedMessages();
  const res = await api("/v1/multipart", { method: "POST", body: JSON.stringify({ filename: "a.tgz", bytes: 4_000 }) });
  const upload = (await res.json()) as { id: string; expires_at: number; created_at: number };
  t.equal(upload.expires_at, upload.created_at + TTL_S, "the configured expiry");
  for (const n of [1, 2]) t.equal((await api(`/v1/multipart/${upload.id}/part?part_number=${n}`, { method: "POST", body: Buffer.alloc(1_500, n) })).status, 200);
  t.ok((await storedMessages()) > before, "the parts are stored");
  await until(async () => (await api(`/v1/artifacts/${upload.id}`)).status === 404, "the upload to expire", 15_000);
  t.equal((await api(`/v1/multipart/${upload.id}/part?part_number=3`, { method: "POST", body: Buffer.alloc(10) })).status, 404, "no more parts");
  t.equal((await api(`/v1/multipart/${upload.id}/finish`, { method: "POST" })).status, 404, "no finish");
  await until(async () => (await storedMessages()) === before && !(await storedKeys()).some((k) => k.includes(upload.id)), "the sweeper to free the parts", 15_000);
  t.pass("record, part index and parts are gone");
});

t.test("a client that breaks off mid-upload leaves nothing: the gateway discards what arrived at once", async (t) => {
  const before = await storedMessages();
  const created = await api("/v1/multipart", { method: "POST", body: JSON.stringify({ filename: "d.tgz", bytes: 8 * 1024 * 1024 }) });
  const upload = (await created.json()) as { id: string };
  const part = partialUpload(`/v1/multipart/${upload.id}/part?part_number=1`, { "content-type": "application/octet-stream" }, 4 * 1024 * 1024, Buffer.alloc(1024 * 1024, 4));
  const single = partialUpload("/v1/artifacts", formType, 16 * 1024 * 1024, Buffer.concat([formHead, Buffer.alloc(1024 * 1024, 5)]));
  await until(async () => (await storedMessages()) >= before + 6, "chunks of both uploads to arrive", 15_000);
  part.destroy();
  single.destroy();
  // Well within the upload expiry: the failed puts purge their own chunks, no sweeper needed.
  await until(async () => (await storedMessages()) === before, "the chunks to be purged", 1_500);
  t.same(((await (await api(`/v1/multipart/${upload.id}/parts`)).json()) as { data: unknown[] }).data, [], "no part was recorded");
  t.same(((await (await api("/v1/artifacts")).json()) as { data: unknown[] }).data, [], "no artifact is listed");
  t.equal((await api(`/v1/artifacts/${upload.id}`, { method: "DELETE" })).status, 200);
});

t.test("a gateway killed -9 mid-upload leaves nothing visible, and its bytes are swept", async (t) => {
  // A multipart upload with one complete part, another part on its way, and a single-shot upload on its way.
  const created = await api("/v1/multipart", { method: "POST", body: JSON.stringify({ filename: "b.tgz", bytes: 8 * 1024 * 1024 }) });
  const upload = (await created.json()) as { id: string };
  t.equal((await api(`/v1/multipart/${upload.id}/part?part_number=1`, { method: "POST", body: Buffer.alloc(4 * 1024 * 1024, 1) })).status, 200);
  const before = await storedMessages();
  partialUpload(`/v1/multipart/${upload.id}/part?part_number=2`, { "content-type": "application/octet-stream" }, 4 * 1024 * 1024, Buffer.alloc(1024 * 1024, 2));
  partialUpload("/v1/artifacts", formType, 16 * 1024 * 1024, Buffer.concat([formHead, Buffer.alloc(1024 * 1024, 3)]));
  // Both uploads have chunks in the Object Store before the kill.
  await until(async () => (await storedMessages()) >= before + 6, "chunks of both uploads to arrive", 15_000);
  await gateway.kill();
  gateway = await startGateway(stack.nats.url, env);
  t.teardown(() => gateway.kill());

  const ready = (await (await api("/v1/artifacts")).json()) as { data: unknown[] };
  t.same(ready.data, [], "no artifact is listed");
  await until(async () => (await storedMessages()) === 0, "the upload to expire and the sweeper to free every byte", 20_000);
  t.equal((await api(`/v1/artifacts/${upload.id}`)).status, 404, "the unfinished upload is gone");
  t.same(await storedKeys(), [], "no record is left");
});
