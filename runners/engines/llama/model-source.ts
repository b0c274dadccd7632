import { createHash } from "node:crypto";
import { createReadStream, createWriteStream, existsSync } from "node:fs";
import { mkdir, rename, rm, stat } from "node:fs/promises";
import { dirname } from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import type { Logger } from "../../../lib/log.js";
import { ChecksumMismatch, classifyModelFailure, HttpStatus, hfCachePath, hfReference, ModelFileMissing, ModelLoadFailed, type ModelFileFailure } from "../../../modules/catalog/mod.js";

// A GGUF source is a local path or a Hugging Face reference "hf:<owner>/<repo>/<path/in/repo.gguf>[@revision]".
// Hugging Face files are downloaded once into the cache (resuming a partial download), checked
// against a sha256 (the catalog's, else the one Hugging Face publishes for LFS files), and then
// moved into place atomically, so a half-written file is never loaded. What goes wrong is thrown
// as a ModelFileFailure (modules/catalog): no network, an HTTP status, a checksum, a full disk.

export interface HfReference {
  repo: string;
  file: string;
  revision: string;
}

/** A source that is not a Hugging Face reference (the catalog's schema lets none through). */
export class ModelSourceError extends Error {
  override name = "ModelSourceError";
}

export function parseHfReference(source: string): HfReference {
  const ref = hfReference(source);
  if (!ref) throw new ModelSourceError(`not a Hugging Face reference (hf:<owner>/<repo>/<file.gguf>[@revision]): ${source}`);
  return ref;
}

export async function sha256File(path: string): Promise<string> {
  const hash = createHash("sha256");
  await pipeline(createReadStream(path), hash);
  return hash.digest("hex");
}

export interface ResolveOptions {
  cacheDir: string;
  /** Hugging Face endpoint (HF_ENDPOINT, as huggingface_hub reads it: mirrors, proxies). */
  hfEndpoint?: string;
  expectedSha256: string | undefined;
  hfToken: string | undefined;
  log: Logger;
  /** Called with bytes done and total (total 0 when unknown). */
  onProgress?: (done: number, total: number) => void;
  signal?: AbortSignal;
}

/**
 * Returns a local path to the model file, downloading it first when needed. Fails with a
 * ModelFileFailure (a system error is classified: ENOSPC is DiskFull, ECONNRESET NoNetwork).
 */
export async function resolveModelFile(source: string, opts: ResolveOptions): Promise<string> {
  try {
    if (!source.startsWith("hf:")) {
      if (!existsSync(source)) throw new ModelFileMissing({ path: source });
      if (opts.expectedSha256) {
        const actual = await sha256File(source);
        if (actual !== opts.expectedSha256) throw new ChecksumMismatch({ source, expected: opts.expectedSha256, actual, discarded: false });
      }
      return source;
    }
    const ref = parseHfReference(source);
    const target = hfCachePath(ref, opts.cacheDir);
    const dir = dirname(target);
    if (existsSync(target)) return target;
    await mkdir(dir, { recursive: true });
    await download(ref, target, opts);
    return target;
  } catch (err) {
    throw classifyModelFailure(err);
  }
}

/** A fetch of `url` that failed before any answer: no network, or else why, naming the URL. */
function unreachable(url: string, err: unknown): ModelFileFailure {
  const failure = classifyModelFailure(err);
  return failure._tag === "ModelLoadFailed" ? new ModelLoadFailed({ detail: `cannot reach ${url}: ${failure.detail}` }) : failure;
}

function hfUrl(ref: HfReference, endpoint = "https://huggingface.co"): string {
  const file = ref.file.split("/").map(encodeURIComponent).join("/");
  return `${endpoint.replace(/\/+$/, "")}/${ref.repo}/resolve/${encodeURIComponent(ref.revision)}/${file}`;
}

async function download(ref: HfReference, target: string, opts: ResolveOptions): Promise<void> {
  const partial = `${target}.partial`;
  const url = hfUrl(ref, opts.hfEndpoint);
  const headers: Record<string, string> = { "user-agent": "tributary" };
  if (opts.hfToken) headers.authorization = `Bearer ${opts.hfToken}`;

  // Hugging Face answers a HEAD on resolve/ with the LFS object's sha256 as X-Linked-Etag.
  const head = await fetch(url, { method: "HEAD", headers, redirect: "manual", signal: opts.signal }).catch((err: unknown) => {
    throw unreachable(url, err);
  });
  if (head.status === 401 || head.status === 403 || head.status === 404) throw new HttpStatus({ url, status: head.status, tokenSent: Boolean(opts.hfToken) });
  const published = (head.headers.get("x-linked-etag") ?? "").replaceAll('"', "").toLowerCase();
  const expected = opts.expectedSha256 ?? (/^[0-9a-f]{64}$/.test(published) ? published : undefined);
  if (!expected) opts.log.warn("no sha256 known for this model file; it is downloaded unchecked", { url });

  let offset = existsSync(partial) ? (await stat(partial)).size : 0;
  const res = await fetch(url, {
    headers: offset > 0 ? { ...headers, range: `bytes=${offset}-` } : headers,
    signal: opts.signal,
  }).catch((err: unknown) => {
    throw unreachable(url, err);
  });
  if (!res.ok || !res.body) throw new HttpStatus({ url, status: res.status, tokenSent: Boolean(opts.hfToken) });
  if (offset > 0 && res.status !== 206) offset = 0; // the server ignored the range: start over
  const total = offset + Number(res.headers.get("content-length") ?? 0);
  let done = offset;
  let lastReport = 0;
  opts.log.info("downloading model", { url, resumeFrom: offset, bytes: total });
  const body = Readable.fromWeb(res.body as import("node:stream/web").ReadableStream<Uint8Array>);
  body.on("data", (chunk: Buffer) => {
    done += chunk.length;
    const now = Date.now();
    if (now - lastReport >= 1000) {
      lastReport = now;
      opts.onProgress?.(done, total);
    }
  });
  await pipeline(body, createWriteStream(partial, { flags: offset > 0 ? "a" : "w" }));
  opts.onProgress?.(done, total);

  if (expected) {
    const actual = await sha256File(partial);
    if (actual !== expected) {
      await rm(partial, { force: true });
      throw new ChecksumMismatch({ source: url, expected, actual, discarded: true });
    }
  }
  await rename(partial, target);
  opts.log.info("model downloaded", { path: target, sha256: expected ?? "unchecked" });
}
