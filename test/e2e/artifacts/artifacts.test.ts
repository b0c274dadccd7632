import t from "tap";
import type { Test } from "tap";
import { createHash } from "node:crypto";
import { Objm } from "@nats-io/obj";
import { sharedStackWithGateway } from "../../harness/shared-stack.js";
import { buckets } from "../../../lib/nats/subjects.js";

// /v1/artifacts and /v1/multipart: single-shot upload, get, list, content, delete; uploads in
// parts (parallel, out of order, replaced), every refusal of finish, every bound at its edge, and
// project isolation. Small limits (a gateway of this file's own on the shared stack) so that the
// edges are cheap to reach.
const LIMITS = {
  maxBytes: 20_000,
  maxSingle: 10_000,
  partBytes: 2_048,
  minPart: 1_024,
  maxPart: 4_096,
  maxParts: 8,
  filename: 32,
  manifest: 256,
  openUploads: 30,
};
const stack = await sharedStackWithGateway(t, {
  TRIBUTARY_ARTIFACT_MAX_BYTES: String(LIMITS.maxBytes),
  TRIBUTARY_ARTIFACT_MAX_SINGLE_UPLOAD_BYTES: String(LIMITS.maxSingle),
  TRIBUTARY_ARTIFACT_PART_BYTES: String(LIMITS.partBytes),
  TRIBUTARY_ARTIFACT_MIN_PART_BYTES: String(LIMITS.minPart),
  TRIBUTARY_ARTIFACT_MAX_PART_BYTES: String(LIMITS.maxPart),
  TRIBUTARY_ARTIFACT_MAX_PARTS: String(LIMITS.maxParts),
  TRIBUTARY_ARTIFACT_MAX_FILENAME_BYTES: String(LIMITS.filename),
  TRIBUTARY_ARTIFACT_MAX_MANIFEST_BYTES: String(LIMITS.manifest),
  TRIBUTARY_ARTIFACT_MAX_OPEN_UPLOADS: String(LIMITS.openUploads),
});
// Other projects of the same organization: isolation, and a project whose open uploads are used up.
const OTHER_KEY = (await stack.project("other")).key;
const CROWDED_KEY = (await stack.project("crowded")).key;
const TEST_KEY = stack.key;

const nc = await stack.nats.connect();
t.teardown(() => nc.close());
const objectStore = await new Objm(nc).open(buckets.artifactContents);

interface Artifact {
  id: string;
  object: string;
  bytes: number;
  sha256: string | null;
  status: string;
  created_at: number;
  expires_at: number | null;
  filename: string;
  manifest: string | null;
  part_size: number | null;
}
interface ErrorBody {
  error: { message: string; param: string | null; code: string | null };
}

const sha256 = (b: Uint8Array) => createHash("sha256").update(b).digest("hex");
const bytesOf = (n: number, seed = 1) => Buffer.from(Array.from({ length: n }, (_, i) => (i * 31 + seed * 7) % 251));
const api = (path: string, init: RequestInit = {}, key = TEST_KEY) =>
  fetch(stack.gateway.url + path, { ...init, headers: { authorization: `Bearer ${key}`, ...(init.headers as Record<string, string>) } });
const json = (path: string, body: unknown, key = TEST_KEY) =>
  api(path, { method: "POST", body: JSON.stringify(body), headers: { "content-type": "application/json" } }, key);

function form(file: Buffer | undefined, filename = "app.tar.gz", fields: Record<string, string> = {}): FormData {
  const f = new FormData();
  for (const [k, v] of Object.entries(fields)) f.append(k, v);
  if (file) f.append("file", new Blob([file]), filename);
  return f;
}
const uploadSingle = (f: FormData, key = TEST_KEY) => api("/v1/artifacts", { method: "POST", body: f }, key);

async function create(bytes: number, extra: Record<string, unknown> = {}, key = TEST_KEY): Promise<Artifact> {
  const res = await json("/v1/multipart", { filename: "bundle.tar.gz", bytes, ...extra }, key);
  if (res.status !== 200) throw new Error(`create: ${res.status} ${await res.text()}`);
  return (await res.json()) as Artifact;
}
const putPart = (id: string, n: number | string, body: Uint8Array, key = TEST_KEY) =>
  api(`/v1/multipart/${id}/part?part_number=${n}`, { method: "POST", body, headers: { "content-type": "application/octet-stream" } }, key);
const finish = (id: string, body?: unknown, key = TEST_KEY) =>
  api(`/v1/multipart/${id}/finish`, { method: "POST", ...(body === undefined ? {} : { body: JSON.stringify(body) }), headers: { "content-type": "application/json" } }, key);

async function refused(t: Test, res: Response, status: number, param: string | null, pattern: RegExp, code?: string): Promise<void> {
  const body = (await res.json()) as ErrorBody;
  t.equal(res.status, status, `${status}: ${body.error?.message}`);
  t.equal(body.error.param, param, "names the param");
  t.match(body.error.message, pattern);
  if (code) t.equal(body.error.code, code);
}

/** An upload of `parts` (their sizes), every part sent; returns the id and the whole contents. */
async function uploaded(t: Test, sizes: number[], extra: Record<string, unknown> = {}): Promise<{ id: string; whole: Buffer; parts: Buffer[] }> {
  const parts = sizes.map((n, i) => bytesOf(n, i + 1));
  const whole = Buffer.concat(parts);
  const { id } = await create(whole.length, extra);
  for (let i = 0; i < parts.length; i++) t.equal((await putPart(id, i + 1, parts[i]!)).status, 200);
  return { id, whole, parts };
}

t.test("single-shot upload, get, list, content, delete", async (t) => {
  const content = bytesOf(7_000);
  // FormData sends text fields with CRLF line ends (the HTML form rules); the manifest is kept as sent.
  const manifest = "entrypoint: app.main:app\nproject_slug: demo\n";
  let res = await uploadSingle(form(content, "demo.tar.gz", { manifest }));
  t.equal(res.status, 200);
  const artifact = (await res.json()) as Artifact;
  t.match(artifact, { object: "artifact", bytes: 7_000, sha256: sha256(content), status: "ready", expires_at: null, filename: "demo.tar.gz", manifest: manifest.replace(/\n/g, "\r\n"), part_size: null });
  t.match(artifact.id, /^artifact-/);
  t.same(await (await api(`/v1/artifacts/${artifact.id}`)).json(), artifact);
  const list = (await (await api("/v1/artifacts")).json()) as { object: string; data: Artifact[] };
  t.equal(list.object, "list");
  t.ok(list.data.some((a) => a.id === artifact.id), "listed");
  res = await api(`/v1/artifacts/${artifact.id}/content`);
  t.equal(res.status, 200);
  const back = Buffer.from(await res.arrayBuffer());
  t.equal(sha256(back), artifact.sha256, "the content's sha256 matches");
  t.equal(res.headers.get("x-artifact-sha256"), artifact.sha256);
  res = await api(`/v1/artifacts/${artifact.id}`, { method: "DELETE" });
  t.same(await res.json(), { id: artifact.id, object: "artifact", deleted: true });
  t.equal((await api(`/v1/artifacts/${artifact.id}`)).status, 404);
  t.equal((await api(`/v1/artifacts/${artifact.id}/content`)).status, 404);
  t.equal((await api(`/v1/artifacts/${artifact.id}`, { method: "DELETE" })).status, 404, "deleting twice: 404");
});

t.test("single-shot bounds: size, filename, manifest, fields", async (t) => {
  let res = await uploadSingle(form(bytesOf(LIMITS.maxSingle)));
  t.equal(res.status, 200, "at the size limit");
  res = await uploadSingle(form(bytesOf(LIMITS.maxSingle + 1)));
  await refused(t, res, 400, "file", /at most 10000 bytes/, "file_too_large");
  res = await uploadSingle(form(bytesOf(10), "f".repeat(LIMITS.filename)));
  t.equal(res.status, 200, "filename at its limit");
  res = await uploadSingle(form(bytesOf(10), "f".repeat(LIMITS.filename + 1)));
  await refused(t, res, 400, "file", /at most 32 bytes/);
  res = await uploadSingle(form(bytesOf(10), "x.tgz", { manifest: "m".repeat(LIMITS.manifest) }));
  t.equal(res.status, 200, "manifest at its limit");
  res = await uploadSingle(form(bytesOf(10), "x.tgz", { manifest: "m".repeat(LIMITS.manifest + 1) }));
  await refused(t, res, 400, "manifest", /at most 256 bytes/);
  res = await uploadSingle(form(bytesOf(10), "x.tgz", { purpose: "batch" }));
  await refused(t, res, 400, "purpose", /Unrecognized/);
  res = await uploadSingle(form(undefined, "x", { manifest: "m" }));
  await refused(t, res, 400, "file", /Missing required parameter/);
});

t.test("multipart: parts in parallel and out of order, then finish", async (t) => {
  const parts = [2_048, 2_048, 2_048, 2_048, 500].map((n, i) => bytesOf(n, i + 3));
  const whole = Buffer.concat(parts);
  const upload = await create(whole.length, { sha256: sha256(whole), manifest: "entrypoint: a:b\n" });
  t.match(upload, { object: "artifact", status: "uploading", bytes: whole.length, sha256: sha256(whole), part_size: LIMITS.partBytes });
  t.ok(upload.expires_at! >= upload.created_at + 3600, "unfinished uploads expire after an hour by default");
  const order = [5, 3, 1, 4, 2];
  const answers = await Promise.all(order.map(async (n) => (await putPart(upload.id, n, parts[n - 1]!)).json() as Promise<{ part_number: number; bytes: number; sha256: string }>));
  for (const [i, n] of order.entries()) t.same(answers[i], { part_number: n, bytes: parts[n - 1]!.length, sha256: sha256(parts[n - 1]!) });
  const listedParts = (await (await api(`/v1/multipart/${upload.id}/parts`)).json()) as { data: Array<{ part_number: number }> };
  t.same(listedParts.data.map((p) => p.part_number), [1, 2, 3, 4, 5]);
  t.notOk(((await (await api("/v1/artifacts")).json()) as { data: Artifact[] }).data.some((a) => a.id === upload.id), "an unfinished upload is not among the ready artifacts");
  t.ok(((await (await api("/v1/artifacts?status=uploading")).json()) as { data: Artifact[] }).data.some((a) => a.id === upload.id), "it is among the uploading ones");
  // Two finishes race: both answer the one artifact, and only the winner's bytes stay stored.
  const [res, racing] = await Promise.all([finish(upload.id, { parts: parts.map((p, i) => ({ part_number: i + 1, sha256: sha256(p) })) }), finish(upload.id)]);
  t.equal(res.status, 200);
  t.equal(racing.status, 200);
  const done = (await res.json()) as Artifact;
  t.same(await racing.json(), done, "the racing finish answers the same artifact");
  const objects = (await objectStore.list()).filter((o) => !o.deleted && o.name.startsWith(upload.id));
  t.equal(objects.length, 1, "one object holds the artifact: no parts, no second assembly");
  t.match(done, { id: upload.id, status: "ready", bytes: whole.length, sha256: sha256(whole), expires_at: null, part_size: null, manifest: "entrypoint: a:b\n" });
  t.ok(Buffer.from(await (await api(`/v1/artifacts/${upload.id}/content`)).arrayBuffer()).equals(whole), "assembled in part order");
  t.same(await (await finish(upload.id)).json(), done, "finishing again returns the artifact");
  await refused(t, await putPart(upload.id, 1, parts[0]!), 400, "artifact_id", /already finished/);
});

t.test("re-sending a part replaces it", async (t) => {
  const { id, parts } = await uploaded(t, [1_500, 700]);
  const replacement = bytesOf(1_500, 99);
  const answer = (await (await putPart(id, 1, replacement)).json()) as { sha256: string };
  t.equal(answer.sha256, sha256(replacement));
  const res = await finish(id);
  t.equal(res.status, 200);
  const back = Buffer.from(await (await api(`/v1/artifacts/${id}/content`)).arrayBuffer());
  t.ok(back.equals(Buffer.concat([replacement, parts[1]!])), "the last part sent counts");
});

t.test("finish refuses, naming the problem; a refused finish changes nothing", async (t) => {
  const { id, parts } = await uploaded(t, [1_500, 1_500, 700]);
  const entry = (n: number) => ({ part_number: n, sha256: sha256(parts[n - 1]!) });
  await refused(t, await finish(id, { parts: [entry(1), entry(3)] }), 400, "parts[1].part_number", /Part 2 is missing/, "missing_part");
  await refused(t, await finish(id, { parts: [entry(1), entry(2), entry(2), entry(3)] }), 400, "parts[2].part_number", /listed twice/, "duplicate_part");
  await refused(t, await finish(id, { parts: [entry(2), entry(1), entry(3)] }), 400, "parts[1].part_number", /out of order/, "parts_out_of_order");
  await refused(t, await finish(id, { parts: [entry(1), { ...entry(2), sha256: "0".repeat(64) }, entry(3)] }), 400, "parts[1].sha256", /sha256/, "checksum_mismatch");
  await refused(t, await finish(id, { parts: [entry(1), entry(2)] }), 400, "parts", /Part 3 was uploaded but is not in the list/, "unlisted_part");
  t.equal((await finish(id, { parts: [entry(1), entry(2), entry(3)] })).status, 200, "the right list still finishes it");

  const gap = await create(3_000);
  await putPart(gap.id, 1, bytesOf(1_500));
  await putPart(gap.id, 3, bytesOf(1_500));
  await refused(t, await finish(gap.id), 400, "parts", /Part 2 is missing/, "missing_part");
  await refused(t, await finish((await create(100)).id), 400, "parts", /No part was uploaded/, "missing_part");

  const small = await uploaded(t, [LIMITS.minPart - 1, 1_000]);
  await refused(t, await finish(small.id), 400, "parts", /Part 1 is 1023 bytes, below the minimum part size of 1024/, "part_too_small");
  const atMin = await uploaded(t, [LIMITS.minPart, 10]);
  t.equal((await finish(atMin.id)).status, 200, "a part at the minimum size passes");

  const short = await create(5_000);
  await putPart(short.id, 1, bytesOf(2_000));
  await putPart(short.id, 2, bytesOf(2_000));
  await refused(t, await finish(short.id), 400, "bytes", /4000 bytes in all, but the upload declared 5000/, "size_mismatch");

  const wrongSum = await uploaded(t, [1_500, 10], { sha256: "a".repeat(64) });
  await refused(t, await finish(wrongSum.id), 400, "sha256", /declared a{64}/, "checksum_mismatch");
  t.equal(((await (await api(`/v1/artifacts/${wrongSum.id}`)).json()) as Artifact).status, "uploading", "still uploading after a refusal");
  t.equal((await api(`/v1/artifacts/${wrongSum.id}/content`)).status, 404, "no content for an unfinished upload");
  t.equal((await api(`/v1/artifacts/${wrongSum.id}`, { method: "DELETE" })).status, 200, "an unfinished upload can be deleted");
  t.equal((await finish(wrongSum.id)).status, 404);
});

t.test("multipart bounds at their edges", async (t) => {
  // Declared size: 1..maxBytes.
  t.equal((await json("/v1/multipart", { filename: "a", bytes: LIMITS.maxBytes })).status, 200, "declared size at the limit");
  await refused(t, await json("/v1/multipart", { filename: "a", bytes: LIMITS.maxBytes + 1 }), 400, "bytes", /from 1 to 20000/);
  await refused(t, await json("/v1/multipart", { filename: "a", bytes: 0 }), 400, "bytes", /from 1 to/);
  await refused(t, await json("/v1/multipart", { filename: "a", bytes: 1.5 }), 400, "bytes", /integer/);
  // Filename and manifest lengths, checksum syntax, unknown fields.
  t.equal((await json("/v1/multipart", { filename: "é".repeat(LIMITS.filename / 2), bytes: 1 })).status, 200, "filename at its limit (UTF-8 bytes)");
  await refused(t, await json("/v1/multipart", { filename: "é".repeat(LIMITS.filename / 2) + "x", bytes: 1 }), 400, "filename", /at most 32 bytes/);
  await refused(t, await json("/v1/multipart", { filename: "../etc", bytes: 1 }), 400, "filename", /path separators/);
  t.equal((await json("/v1/multipart", { filename: "a", bytes: 1, manifest: "m".repeat(LIMITS.manifest) })).status, 200, "manifest at its limit");
  await refused(t, await json("/v1/multipart", { filename: "a", bytes: 1, manifest: "m".repeat(LIMITS.manifest + 1) }), 400, "manifest", /at most 256 bytes/);
  await refused(t, await json("/v1/multipart", { filename: "a", bytes: 1, sha256: "ABC" }), 400, "sha256", /hex/);
  await refused(t, await json("/v1/multipart", { filename: "a", bytes: 1, purpose: "x" }), 400, "purpose", /Unrecognized/);

  // Part numbers 1..maxParts, part size up to maxPart.
  const { id } = await create(LIMITS.maxBytes);
  t.equal((await putPart(id, LIMITS.maxParts, bytesOf(1))).status, 200, "the highest part number");
  await refused(t, await putPart(id, LIMITS.maxParts + 1, bytesOf(1)), 400, "part_number", /from 1 to 8/);
  await refused(t, await putPart(id, 0, bytesOf(1)), 400, "part_number", /from 1 to 8/);
  await refused(t, await putPart(id, "1e3", bytesOf(1)), 400, "part_number", /from 1 to 8/);
  await refused(t, await api(`/v1/multipart/${id}/part`, { method: "POST", body: bytesOf(1) }), 400, "part_number", /Missing/);
  t.equal((await putPart(id, 1, bytesOf(LIMITS.maxPart))).status, 200, "a part at the size limit");
  const over = await putPart(id, 2, bytesOf(LIMITS.maxPart + 1));
  t.equal(over.status, 413, "a part past the size limit");
  // The part list: at most maxParts entries.
  const list = (n: number) => ({ parts: Array.from({ length: n }, (_, i) => ({ part_number: i + 1 })) });
  await refused(t, await finish(id, list(LIMITS.maxParts + 1)), 400, "parts", /at most 8 parts/);
  await refused(t, await finish(id, list(LIMITS.maxParts)), 400, "parts[1].part_number", /Part 2 was never uploaded/, "missing_part");
  await refused(t, await finish(id, { parts: [{ part_number: 9 }] }), 400, "parts[0].part_number", /from 1 to 8/);

  // The part size grows when the most parts at the default size would not hold the declared size.
  t.equal((await create(LIMITS.maxBytes)).part_size, Math.ceil(LIMITS.maxBytes / LIMITS.maxParts));

  // Unfinished uploads per project.
  for (let i = 0; i < LIMITS.openUploads; i++) await create(10, {}, CROWDED_KEY);
  await refused(t, await json("/v1/multipart", { filename: "a", bytes: 10 }, CROWDED_KEY), 400, null, /already has 30 unfinished uploads/, "too_many_uploads");
});

t.test("another project's key sees nothing", async (t) => {
  const single = (await (await uploadSingle(form(bytesOf(100)))).json()) as Artifact;
  const upload = await create(100);
  for (const path of [`/v1/artifacts/${single.id}`, `/v1/artifacts/${single.id}/content`, `/v1/artifacts/${upload.id}`, `/v1/multipart/${upload.id}/parts`])
    t.equal((await api(path, {}, OTHER_KEY)).status, 404, path);
  t.equal((await api(`/v1/artifacts/${single.id}`, { method: "DELETE" }, OTHER_KEY)).status, 404, "delete");
  t.equal((await putPart(upload.id, 1, bytesOf(100), OTHER_KEY)).status, 404, "part");
  t.equal((await finish(upload.id, undefined, OTHER_KEY)).status, 404, "finish");
  t.same(((await (await api("/v1/artifacts", {}, OTHER_KEY)).json()) as { data: unknown[] }).data, [], "lists nothing");
  t.equal((await api(`/v1/artifacts/${single.id}`)).status, 200, "still there for its owner");
  t.equal((await api("/v1/artifacts/artifact-nope")).status, 404);
  t.equal((await api("/v1/artifacts/..%2Ffile-x")).status, 404);
});
