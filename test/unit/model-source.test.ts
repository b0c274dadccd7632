import t from "tap";
import { createHash } from "node:crypto";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { createServer, type IncomingMessage, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createLogger } from "../../lib/log.js";
import { ModelSourceError, parseHfReference, resolveModelFile } from "../../runners/engines/llama/model-source.js";
import { repoRoot } from "../../lib/paths.js";

// The Hugging Face download path against a local server that answers like huggingface.co:
// HEAD with X-Linked-Etag (the LFS sha256), GET with Range support.
const model = readFileSync(join(repoRoot, "..", "shared", "models", "stories260K.gguf"));
const sha = createHash("sha256").update(model).digest("hex");
const log = createLogger("test");

interface Hub {
  server: Server;
  endpoint: string;
  requests: Array<{ method: string; url: string; range?: string; auth?: string }>;
  /** What the server claims and serves (tests change them). */
  etag: string;
  body: Buffer;
  status?: number;
}

async function startHub(): Promise<Hub> {
  const hub = { requests: [], etag: sha, body: model } as unknown as Hub;
  hub.server = createServer((req: IncomingMessage, res) => {
    hub.requests.push({ method: req.method!, url: req.url!, range: req.headers.range, auth: req.headers.authorization });
    if (hub.status) return void res.writeHead(hub.status).end();
    if (req.url !== "/acme/tiny-GGUF/resolve/main/tiny.gguf") return void res.writeHead(404).end();
    if (req.method === "HEAD") return void res.writeHead(302, { "x-linked-etag": `"${hub.etag}"`, location: req.url }).end();
    const m = /^bytes=(\d+)-$/.exec(req.headers.range ?? "");
    const from = m ? Number(m[1]) : 0;
    res.writeHead(m ? 206 : 200, { "content-length": hub.body.length - from });
    res.end(hub.body.subarray(from));
  });
  await new Promise<void>((r) => hub.server.listen(0, "127.0.0.1", r));
  hub.endpoint = `http://127.0.0.1:${(hub.server.address() as { port: number }).port}`;
  return hub;
}

const hub = await startHub();
t.teardown(() => hub.server.close());
const source = "hf:acme/tiny-GGUF/tiny.gguf";

function cache(t: import("tap").Test): string {
  const dir = mkdtempSync(join(tmpdir(), "tributary-cache-"));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

t.test("references parse, with and without a revision", async (t) => {
  t.same(parseHfReference("hf:Qwen/Qwen3-0.6B-GGUF/Qwen3-0.6B-Q8_0.gguf"), { repo: "Qwen/Qwen3-0.6B-GGUF", file: "Qwen3-0.6B-Q8_0.gguf", revision: "main" });
  t.same(parseHfReference("hf:a/b/sub/dir/m.gguf@v1.2"), { repo: "a/b", file: "sub/dir/m.gguf", revision: "v1.2" });
  t.throws(() => parseHfReference("hf:justarepo"), ModelSourceError);
});

t.test("downloads once, checks the published sha256, reports progress, then uses the cache", async (t) => {
  const dir = cache(t);
  hub.requests.length = 0;
  let progress = 0;
  const path = await resolveModelFile(source, { cacheDir: dir, expectedSha256: undefined, hfToken: "hf_secret", hfEndpoint: hub.endpoint, log, onProgress: () => progress++ });
  t.ok(readFileSync(path).equals(model), "the file is the model");
  t.ok(progress > 0, "progress was reported");
  t.same(hub.requests.map((r) => r.method), ["HEAD", "GET"]);
  t.equal(hub.requests[0]!.auth, "Bearer hf_secret", "HF_TOKEN is sent");
  const again = await resolveModelFile(source, { cacheDir: dir, expectedSha256: undefined, hfToken: undefined, hfEndpoint: hub.endpoint, log });
  t.equal(again, path);
  t.equal(hub.requests.length, 2, "no request the second time");
});

t.test("a partial download resumes with a Range request", async (t) => {
  const dir = cache(t);
  const first = await resolveModelFile(source, { cacheDir: dir, expectedSha256: sha, hfToken: undefined, hfEndpoint: hub.endpoint, log });
  rmSync(first);
  writeFileSync(`${first}.partial`, model.subarray(0, 1000));
  hub.requests.length = 0;
  const path = await resolveModelFile(source, { cacheDir: dir, expectedSha256: sha, hfToken: undefined, hfEndpoint: hub.endpoint, log });
  t.equal(hub.requests[1]!.range, "bytes=1000-");
  t.ok(readFileSync(path).equals(model));
  t.notOk(existsSync(`${path}.partial`));
});

t.test("a checksum mismatch discards the download with a clear error", async (t) => {
  const dir = cache(t);
  hub.etag = "0".repeat(64);
  t.teardown(() => void (hub.etag = sha));
  await t.rejects(resolveModelFile(source, { cacheDir: dir, expectedSha256: undefined, hfToken: undefined, hfEndpoint: hub.endpoint, log }), { _tag: "ChecksumMismatch", message: /sha256 mismatch/ });
  const catalogSha = "1".repeat(64);
  await t.rejects(resolveModelFile(source, { cacheDir: dir, expectedSha256: catalogSha, hfToken: undefined, hfEndpoint: hub.endpoint, log }), new RegExp(`expected ${catalogSha}`), "the catalog's sha256 wins");
  const files = readdirSync(dir, { recursive: true }).map(String).filter((f) => statSync(join(dir, f)).isFile());
  t.same(files, [], "nothing left behind");
});

t.test("missing files, refused access and unreachable hubs are failures of their cause", async (t) => {
  const dir = cache(t);
  await t.rejects(resolveModelFile("hf:acme/tiny-GGUF/other.gguf", { cacheDir: dir, expectedSha256: undefined, hfToken: undefined, hfEndpoint: hub.endpoint, log }), {
    _tag: "HttpStatus",
    status: 404,
    message: `not found at ${hub.endpoint}/acme/tiny-GGUF/resolve/main/other.gguf`,
  });
  hub.status = 401;
  t.teardown(() => void (hub.status = undefined));
  await t.rejects(resolveModelFile(source, { cacheDir: dir, expectedSha256: undefined, hfToken: undefined, hfEndpoint: hub.endpoint, log }), { _tag: "HttpStatus", message: /needs a token: set HF_TOKEN/ });
  await t.rejects(resolveModelFile(source, { cacheDir: dir, expectedSha256: undefined, hfToken: "hf_wrong", hfEndpoint: hub.endpoint, log }), { message: /refused the token in HF_TOKEN/ });
  hub.status = undefined;
  // A port nothing listens on: the hub's, once closed.
  const closed = await startHub();
  await new Promise<void>((r) => closed.server.close(() => r()));
  await t.rejects(resolveModelFile(source, { cacheDir: dir, expectedSha256: undefined, hfToken: undefined, hfEndpoint: closed.endpoint, log }), { _tag: "NoNetwork", message: /^no network: connect ECONNREFUSED/ });
});

t.test("local files: must exist, and match the catalog's sha256 when given", async (t) => {
  const local = join(repoRoot, "..", "shared", "models", "stories260K.gguf");
  t.equal(await resolveModelFile(local, { cacheDir: "/nonexistent", expectedSha256: sha, hfToken: undefined, log }), local);
  await t.rejects(resolveModelFile(local, { cacheDir: "/nonexistent", expectedSha256: "2".repeat(64), hfToken: undefined, log }), /sha256 mismatch/);
  await t.rejects(resolveModelFile("/no/such/model.gguf", { cacheDir: "/nonexistent", expectedSha256: undefined, hfToken: undefined, log }), { _tag: "ModelFileMissing", message: "model file not found: /no/such/model.gguf" });
});
