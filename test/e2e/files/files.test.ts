import t from "tap";
import OpenAI, { toFile } from "openai";
import { Kvm } from "@nats-io/kv";
import { Objm } from "@nats-io/obj";
import { sharedStack } from "../../harness/shared-stack.js";
import { FileStore } from "../../../modules/files/mod.js";
import { buckets } from "../../../lib/nats/subjects.js";

// /v1/files through the openai client: upload, retrieve, list (purpose, order, pages), content,
// delete, POST /v1/files/{id} (expiry), expiry itself, errors, and project isolation.
// The shared stack's actor host sweeps expired files every 0.5 s (TRIBUTARY_FILE_SWEEP_MS).
const stack = await sharedStack(t);
const upload = (form: FormData) => fetch(`${stack.gateway.url}/v1/files`, { method: "POST", body: form, headers: { authorization: `Bearer ${stack.key}` } });
const client = stack.client;
// Another project of the same organization.
const other = (await stack.project("files-other")).client;

t.test("upload, retrieve, download, delete", async (t) => {
  const content = Buffer.from('{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{}}\n'.repeat(1000));
  const file = await client.files.create({ file: await toFile(content, "input.jsonl"), purpose: "batch" });
  t.match(file.id, /^file-/);
  t.equal(file.object, "file");
  t.equal(file.bytes, content.length);
  t.equal(file.filename, "input.jsonl");
  t.equal(file.purpose, "batch");
  t.equal(file.status, "processed");
  t.equal(file.expires_at, file.created_at + 30 * 24 * 3600, "batch files expire after 30 days by default");
  t.same(await client.files.retrieve(file.id), file);
  const res = await client.files.content(file.id);
  t.ok(Buffer.from(await res.arrayBuffer()).equals(content), "the contents come back byte for byte");
  const waited = await client.files.waitForProcessing(file.id);
  t.equal(waited.status, "processed");
  const deleted = await client.files.delete(file.id);
  t.same(deleted, { id: file.id, object: "file", deleted: true });
  t.ok((await client.files.retrieve(file.id).catch((e: unknown) => e)) instanceof OpenAI.NotFoundError);
  t.ok((await client.files.content(file.id).catch((e: unknown) => e)) instanceof OpenAI.NotFoundError);
  t.ok((await client.files.delete(file.id).catch((e: unknown) => e)) instanceof OpenAI.NotFoundError, "deleting twice: 404");
});

t.test("an empty file and binary contents round-trip", async (t) => {
  const empty = await client.files.create({ file: await toFile(Buffer.alloc(0), "empty.txt"), purpose: "user_data" });
  t.equal(empty.bytes, 0);
  t.equal(empty.expires_at, null, "non-batch files do not expire unless asked");
  t.equal((await (await client.files.content(empty.id)).arrayBuffer()).byteLength, 0);
  const bytes = Buffer.from(Array.from({ length: 3 * 256 * 1024 + 17 }, (_, i) => (i * 7919) % 256));
  const bin = await client.files.create({ file: await toFile(bytes, "blob.bin"), purpose: "assistants" });
  t.ok(Buffer.from(await (await client.files.content(bin.id)).arrayBuffer()).equals(bytes), "multi-chunk binary contents");
});

t.test("expires_after at upload, and POST /v1/files/{id} changes the expiry", async (t) => {
  const file = await client.files.create({ file: await toFile(Buffer.from("x"), "x.txt"), purpose: "user_data", expires_after: { anchor: "created_at", seconds: 3600 } });
  t.equal(file.expires_at, file.created_at + 3600);
  const update = (body: unknown) => stack.fetch(`/v1/files/${file.id}`, { method: "POST", body: JSON.stringify(body) });
  let res = await update({ expires_after: { anchor: "created_at", seconds: 7200 } });
  t.equal(res.status, 200);
  t.equal(((await res.json()) as { expires_at: number }).expires_at, file.created_at + 7200);
  res = await update({ expires_after: null });
  t.equal(((await res.json()) as { expires_at: number | null }).expires_at, null, "null removes the expiry");
  res = await update({ expires_after: { anchor: "created_at", seconds: 10 } });
  t.equal(res.status, 400);
  t.equal(((await res.json()) as { error: { param: string } }).error.param, "expires_after.seconds");
  res = await update({ filename: "y.txt" });
  t.equal(((await res.json()) as { error: { code: string } }).error.code, "unknown_parameter");
  res = await stack.fetch(`/v1/files/file-nope`, { method: "POST", body: JSON.stringify({ expires_after: null }) });
  t.equal(res.status, 404);
  const bad = await client.files.create({ file: await toFile(Buffer.from("x"), "x.txt"), purpose: "user_data", expires_after: { anchor: "created_at", seconds: 60 } }).catch((e: unknown) => e);
  t.ok(bad instanceof OpenAI.BadRequestError && bad.param === "expires_after.seconds", "upload: too short an expiry is a 400");
});

t.test("an expired file is gone at once, and the sweeper then deletes it", async (t) => {
  // Expiries under an hour cannot be asked for through the API: write one through the store itself.
  const nc = await stack.nats.connect();
  t.teardown(() => nc.close());
  const store = await FileStore.open(nc);
  const past = Math.floor(Date.now() / 1000) - 5;
  const file = await store.upload(
    { project: stack.projectId, maxBytes: 1000, describe: () => ({ filename: "old.txt", purpose: "user_data", expiresAt: past, createdAt: past - 3600 }) },
    (async function* () { yield Buffer.from("expired contents"); })(),
  );
  const kv = await new Kvm(nc).open(buckets.files);
  t.ok(await kv.get(`${stack.projectId}.${file.id}`), "the record exists");
  t.ok((await client.files.retrieve(file.id).catch((e: unknown) => e)) instanceof OpenAI.NotFoundError, "retrieve: 404 before any sweep");
  t.ok((await client.files.content(file.id).catch((e: unknown) => e)) instanceof OpenAI.NotFoundError, "content: 404");
  t.notOk((await client.files.list()).data.some((f) => f.id === file.id), "not listed");
  const os = await new Objm(nc).open(buckets.fileContents);
  const contentsGone = async () => (await os.info(file.id))?.deleted ?? true;
  const deadline = Date.now() + 15_000;
  while (((await kv.get(`${stack.projectId}.${file.id}`))?.operation === "PUT" || !(await contentsGone())) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
  t.notOk((await kv.get(`${stack.projectId}.${file.id}`))?.operation === "PUT", "the sweeper deleted the record");
  t.ok(await contentsGone(), "and the contents");
});

t.test("upload errors are OpenAI errors and store nothing", async (t) => {
  const before = (await client.files.list()).data.length;
  const missingPurpose = await upload(formWith({ file: ["a.jsonl", "{}"] }));
  t.equal(missingPurpose.status, 400);
  t.equal(((await missingPurpose.json()) as { error: { param: string } }).error.param, "purpose");
  const badPurpose = await client.files.create({ file: await toFile(Buffer.from("x"), "x.jsonl"), purpose: "nonsense" as never }).catch((e: unknown) => e);
  t.ok(badPurpose instanceof OpenAI.BadRequestError && badPurpose.param === "purpose");
  const noFile = await upload(formWith({ purpose: "batch" }));
  t.equal(noFile.status, 400);
  t.equal(((await noFile.json()) as { error: { param: string } }).error.param, "file");
  const notJsonl = await client.files.create({ file: await toFile(Buffer.from("x"), "x.txt"), purpose: "batch" }).catch((e: unknown) => e);
  t.ok(notJsonl instanceof OpenAI.BadRequestError && notJsonl.code === "invalid_file_format", "batch files must be .jsonl");
  const json = await stack.fetch("/v1/files", { method: "POST", body: JSON.stringify({ purpose: "batch" }) });
  t.equal(json.status, 400, "a JSON body is not an upload");
  t.equal((await client.files.list()).data.length, before, "nothing was stored");
});

t.test("list: purpose filter, order, pagination with limit and after", async (t) => {
  const ids: string[] = [];
  for (let i = 0; i < 5; i++) ids.push((await client.files.create({ file: await toFile(Buffer.from(`v${i}`), `v${i}.txt`), purpose: "vision" })).id);
  const vision = await client.files.list({ purpose: "vision" });
  t.same(vision.data.map((f) => f.id), [...ids].reverse(), "newest first by default, only that purpose");
  const asc = await client.files.list({ purpose: "vision", order: "asc", limit: 2 });
  t.same(asc.data.map((f) => f.id), ids.slice(0, 2));
  t.equal(asc.has_more, true);
  const page2 = await client.files.list({ purpose: "vision", order: "asc", limit: 2, after: ids[1] });
  t.same(page2.data.map((f) => f.id), ids.slice(2, 4));
  const raw = (await (await stack.fetch(`/v1/files?purpose=vision&limit=2`)).json()) as Record<string, unknown>;
  t.same([raw.object, raw.first_id, raw.last_id, raw.has_more], ["list", ids[4], ids[3], true]);
  const seen: string[] = [];
  for await (const f of client.files.list({ purpose: "vision", limit: 2 })) seen.push(f.id);
  t.same(seen, [...ids].reverse(), "the SDK walks every page once");
  t.equal((await stack.fetch("/v1/files?limit=0")).status, 400);
  t.equal((await stack.fetch("/v1/files?order=sideways")).status, 400);
});

t.test("projects do not see each other's files", async (t) => {
  const file = await client.files.create({ file: await toFile(Buffer.from("secret"), "s.txt"), purpose: "user_data" });
  t.ok((await other.files.retrieve(file.id).catch((e: unknown) => e)) instanceof OpenAI.NotFoundError, "retrieve");
  t.ok((await other.files.content(file.id).catch((e: unknown) => e)) instanceof OpenAI.NotFoundError, "content");
  t.ok((await other.files.delete(file.id).catch((e: unknown) => e)) instanceof OpenAI.NotFoundError, "delete");
  t.notOk((await other.files.list()).data.some((f) => f.id === file.id), "list");
  const mine = await other.files.create({ file: await toFile(Buffer.from("theirs"), "t.txt"), purpose: "user_data" });
  t.notOk((await client.files.list()).data.some((f) => f.id === mine.id), "and the other way round");
  t.equal((await client.files.retrieve(file.id)).id, file.id, "the owner still has it");
});

/** A multipart body built by hand (fields only, or a file part as [filename, contents]). */
function formWith(parts: Record<string, string | [string, string]>): FormData {
  const form = new FormData();
  for (const [name, value] of Object.entries(parts)) {
    if (typeof value === "string") form.append(name, value);
    else form.append(name, new Blob([value[1]]), value[0]);
  }
  return form;
}
